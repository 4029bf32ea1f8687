"""Mutants of 02_geometry: wrong ``centering_matrix`` and ``invariance_gap`` with known mistakes, and correct variants.

``centering_matrix``: most mistakes are a wrong pair (alpha, beta) in P = alpha I + beta 1 1^T,
each written in a dozen *styles* (np.eye and np.full, np.outer, a broadcast scalar, loops,
fill_diagonal, einsum, a list comprehension...) and two spellings of its coefficients; the
unstructured ones (not symmetric, unequal off-diagonal entries, a vector, a special case for
d = 1) are small hand-written families.

``invariance_gap``: a recipe gap = reduce(norm(move(x, a, c)), norm(ref(x))) whose three steps
can each be written right or wrong, run in three styles (moved input first, reference first,
token by token); mistakes in the move and in the reduction are also combined. The rest
(norm on single numbers, never called, partial reductions, types) are hand-written families.
"""
from __future__ import annotations

import itertools

import numpy as np

from tests.diagnosis_harness import solution
from tests.implementations import geometry as impl
from tests.mutants import Correct, mutant

NB = "02_geometry"
CM, GAP = "centering_matrix", "invariance_gap"


# ============================================================================ centering_matrix
def _ones(d):
    return np.ones(d)


# style name -> builder(d, alpha, beta) of alpha I + beta 1 1^T
STYLES = {
    "eye_full": lambda d, a, b: a * np.eye(d) + np.full((d, d), b),
    "outer": lambda d, a, b: a * np.eye(d) + b * np.outer(_ones(d), _ones(d)),
    "ones_matrix": lambda d, a, b: a * np.identity(d) + b * np.ones((d, d)),
    "scalar": lambda d, a, b: a * np.eye(d) + b,
    "column_row": lambda d, a, b: a * np.eye(d) + b * (_ones(d)[:, None] @ _ones(d)[None, :]),
    "einsum": lambda d, a, b: a * np.eye(d) + b * np.einsum("i,j->ij", _ones(d), _ones(d)),
    "diag": lambda d, a, b: np.diag(np.full(d, float(a))) + b * np.ones((d, d)),
    "tile": lambda d, a, b: a * np.eye(d) + np.tile(float(b), (d, d)),
}


def _loops(d, a, b):
    P = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            P[i, j] = (a if i == j else 0.0) + b
    return P


def _fill_diagonal(d, a, b):
    P = np.full((d, d), float(b))
    np.fill_diagonal(P, a + b)
    return P


def _list_comprehension(d, a, b):
    return np.array([[a * (i == j) + b for j in range(d)] for i in range(d)], dtype=np.float64)


def _columns(d, a, b):
    """Column by column: the image of each basis vector."""
    return np.stack([a * np.eye(d)[:, j] + b * _ones(d) for j in range(d)], axis=1)


STYLES.update(loops=_loops, fill_diagonal=_fill_diagonal, list_comprehension=_list_comprehension, columns=_columns)


def _structured(coefficients):
    """A centering_matrix for each style: P = alpha I + beta 1 1^T with (alpha, beta) = coefficients(d)."""
    def build(style):
        def centering_matrix(d):
            a, b = coefficients(d)
            return STYLES[style](d, a, b)

        return centering_matrix

    return build


# id -> {spelling: coefficients(d)}; two spellings of the same mistake
STRUCTURED = {
    "geo.identity_returned": {"eye": lambda d: (1.0, 0.0), "zero_mean_part": lambda d: (1.0, 0.0 * d)},
    "geo.mean_projector": {"one_over_d": lambda d: (0.0, 1.0 / d),
                           "mean_weights": lambda d: (0.0, np.mean(_ones(d)) / d)},
    "geo.missing_one_over_d": {"minus_one": lambda d: (1.0, -1.0), "ones_unscaled": lambda d: (1.0, -np.ones(1)[0])},
    "geo.divided_twice": {"d_squared": lambda d: (1.0, -1.0 / d**2), "over_d_over_d": lambda d: (1.0, -(1.0 / d) / d)},
    "geo.d_minus_one": {"d_minus_one": lambda d: (1.0, -1.0 / (d - 1)),
                        "bessel": lambda d: (1.0, -1.0 / max(d - 1, 1))},
    "geo.diagonal_only": {"diag_shift": lambda d: (1.0 - 1.0 / d, 0.0),
                          "eye_minus_eye_over_d": lambda d: ((d - 1) / d, 0.0)},
    "geo.sign_flipped": {"flipped": lambda d: (-1.0, 1.0 / d), "negated": lambda d: (-(1.0), -(-1.0 / d))},
    "geo.wrong_coefficient": {"two_over_d": lambda d: (1.0, -2.0 / d), "half_over_d": lambda d: (1.0, -0.5 / d),
                              "sqrt_d": lambda d: (1.0, -1.0 / np.sqrt(d)),
                              "d_plus_one": lambda d: (1.0, -1.0 / (d + 1)),
                              "minus_half": lambda d: (1.0, -0.5)},
}


def _centering_structured():
    found = []
    for mistake, spellings in STRUCTURED.items():
        for spelling, coefficients in spellings.items():
            build = _structured(coefficients)
            for style in STYLES:
                found.append(mutant(NB, CM, mistake, build(style), f"{CM}/{mistake}/{spelling}/{style}"))
    return found


def _integer_division(d):
    """1 // d is 0 for every d > 1: nothing is subtracted."""
    return np.eye(d) - np.ones((d, d)) * (1 // d)


def _floor_mean_part(d):
    return np.eye(d) - np.ones((d, d)) // d


# ---------------------------------------------------------------------------- the inner product
INNERS = {
    "matmul": lambda o: o @ o,
    "dot": lambda o: np.dot(o, o),
    "transpose": lambda o: o.T @ o,
    "transpose_right": lambda o: o @ o.T,
    "inner": lambda o: np.inner(o, o),
    "vdot": lambda o: np.vdot(o, o),
    "method": lambda o: o.dot(o),
    "np_matmul": lambda o: np.matmul(o, o),
    "row_column": lambda o: o[None, :] @ o[:, None],
    "einsum": lambda o: np.einsum("i,i->", o, o),
    "tensordot": lambda o: np.tensordot(o, o, axes=1),
    "sum_of_products": lambda o: np.sum(o * o),
}


def _inner_product(how, divided):
    def centering_matrix(d):
        ones = np.ones(d)
        J = INNERS[how](ones)  # the number d, not the matrix 1 1^T
        return np.eye(d) - (J / d if divided else J)

    return centering_matrix


def _centering_inner():
    found = []
    for how in INNERS:
        found.append(mutant(NB, CM, "geo.inner_product", _inner_product(how, True), f"{CM}/inner/{how}/over_d"))
        found.append(mutant(NB, CM, ("geo.inner_product", "geo.missing_one_over_d"), _inner_product(how, False),
                            f"{CM}/inner+missing_1_over_d/{how}"))
    return found


# ---------------------------------------------------------------------------- a vector
VECTORS = {
    "ones_minus": lambda d: np.ones(d) - 1.0 / d,
    "one_minus_ones": lambda d: 1 - np.ones(d) / d,
    "full": lambda d: np.full(d, 1.0 - 1.0 / d),
    "eye_row": lambda d: np.eye(d)[0] - 1.0 / d,
    "eye_column": lambda d: np.eye(d)[:, 0] - np.ones(d) / d,
    "diagonal": lambda d: np.diag(np.eye(d) - np.ones((d, d)) / d),
    "diagonal_method": lambda d: (np.eye(d) - 1.0 / d).diagonal().copy(),
    "first_row": lambda d: (np.eye(d) - np.ones((d, d)) / d)[0],
    "last_row": lambda d: (np.eye(d) - np.ones((d, d)) / d)[-1],
    "row_sums": lambda d: (np.eye(d) - np.ones((d, d)) / d).sum(axis=0),
    "column_means": lambda d: (np.eye(d) - np.ones((d, d)) / d).mean(axis=1),
    "ones_vector_mean": lambda d: np.ones(d) - np.mean(np.ones(d)) / d,
    "centred_ones": lambda d: np.ones(d) - np.ones(d).mean(),
    "centred_range": lambda d: np.arange(d, dtype=float) - (d - 1) / 2,
    "eye_minus_vector_diag": lambda d: np.diag(np.eye(d)) - np.ones(d) / d,
    "linspace": lambda d: np.linspace(1 - 1 / d, 1 - 1 / d, d),
    "repeat": lambda d: np.repeat(1.0 - 1.0 / d, d),
    "outer_of_scalar": lambda d: np.ones(d) - np.ones(d) @ np.ones((d, d)) / d**2,
    "inner_broadcast": lambda d: np.eye(d)[0] - np.ones(d) * (np.ones(d) @ np.ones(d)) / d**2,
    "max_of_rows": lambda d: (np.eye(d) - np.ones((d, d)) / d).max(axis=1),
}


def _vector(build):
    def centering_matrix(d):
        return np.asarray(build(d), dtype=np.float64)

    return centering_matrix


# ---------------------------------------------------------------------------- d = 1 special-cased
ONE_BY_ONE = {"eye": lambda: np.eye(1), "ones": lambda: np.ones((1, 1)), "array": lambda: np.array([[1.0]]),
              "identity": lambda: np.identity(1)}


def _d1_identity(style, special):
    def centering_matrix(d):
        if d == 1:  # "one feature: nothing to centre"
            return ONE_BY_ONE[special]()
        return STYLES[style](d, 1.0, -1.0 / d)

    return centering_matrix


def _d1_guarded_divisor(style):
    """Divides by max(d - 1, 1) ... only at d = 1, where the mean part is then dropped."""
    def centering_matrix(d):
        return STYLES[style](d, 1.0, -1.0 / d if d > 1 else 0.0)

    return centering_matrix


# ---------------------------------------------------------------------------- not symmetric
def _triangle(kind, k):
    def centering_matrix(d):
        mask = np.tril(np.ones((d, d)), k) if kind == "tril" else np.triu(np.ones((d, d)), k)
        return np.eye(d) - mask / d

    return centering_matrix


def _running_mean_lower(d):
    P = np.eye(d)
    for i in range(d):
        P[i, : i + 1] -= 1.0 / (i + 1)
    return P


def _running_mean_upper(d):
    P = np.eye(d)
    for i in range(d):
        P[i, i:] -= 1.0 / (d - i)
    return P


def _loop_bounds(rows, columns):
    """Loops over the wrong ranges: rows(d, i) and columns(d, i) give the indices touched."""
    def centering_matrix(d):
        P = np.eye(d)
        for i in rows(d):
            for j in columns(d, i):
                P[i, j] -= 1.0 / d
        return P

    return centering_matrix


def _one_line(which):
    def centering_matrix(d):
        P = np.eye(d)
        if which == "first_row":
            P[0] -= 1.0 / d
        elif which == "first_column":
            P[:, 0] -= 1.0 / d
        elif which == "last_row":
            P[-1, :] -= 1.0 / d
        else:
            P[:, -1] -= 1.0 / d
        return P

    return centering_matrix


def _outer_with(left, right):
    def centering_matrix(d):
        return np.eye(d) - np.outer(left(d), right(d)) / d

    return centering_matrix


NOT_SYMMETRIC = {
    **{f"tril_k{k}": _triangle("tril", k) for k in (0, -1, 1)},
    **{f"triu_k{k}": _triangle("triu", k) for k in (0, 1, -1)},
    "running_mean_lower": _running_mean_lower,
    "running_mean_upper": _running_mean_upper,
    "loop_j_up_to_i": _loop_bounds(lambda d: range(d), lambda d, i: range(i + 1)),
    "loop_j_from_i": _loop_bounds(lambda d: range(d), lambda d, i: range(i, d)),
    "loop_j_below_i": _loop_bounds(lambda d: range(d), lambda d, i: range(i)),
    "loop_rows_from_1": _loop_bounds(lambda d: range(1, d), lambda d, i: range(d)),
    "loop_columns_from_1": _loop_bounds(lambda d: range(d), lambda d, i: range(1, d)),
    "loop_rows_to_d_minus_1": _loop_bounds(lambda d: range(d - 1), lambda d, i: range(d)),
    **{f"only_{which}": _one_line(which) for which in ("first_row", "first_column", "last_row", "last_column")},
    "outer_range_ones": _outer_with(lambda d: np.arange(d) / ((d - 1) / 2), lambda d: np.ones(d)),
    "outer_ones_basis": _outer_with(lambda d: np.ones(d), lambda d: np.eye(d)[0] * d),
    "outer_linspace": _outer_with(lambda d: np.linspace(0.5, 1.5, d), lambda d: np.ones(d)),
}


# ---------------------------------------------------------------------------- symmetric, unequal off-diagonal
def _band(width, divisor):
    def centering_matrix(d):
        i, j = np.indices((d, d))
        return np.eye(d) - (np.abs(i - j) <= width) / divisor(d, width)

    return centering_matrix


def _skip_index(skip):
    def centering_matrix(d):
        keep = [k for k in range(d) if k != skip(d)]
        P = np.eye(d)
        for i in keep:
            for j in keep:
                P[i, j] -= 1.0 / d
        return P

    return centering_matrix


def _projector_off(vector):
    """I - v v^T / (v . v): a projection, but onto the complement of v, not of 1."""
    def centering_matrix(d):
        v = vector(d)
        return np.eye(d) - np.outer(v, v) / (v @ v)

    return centering_matrix


def _halves(d):
    """Centres the first and the second half separately."""
    P = np.eye(d)
    h = d // 2
    P[:h, :h] -= 1.0 / h
    P[h:, h:] -= 1.0 / (d - h)
    return P


def _circulant(d):
    P = np.eye(d)
    for i in range(d):
        for j in (i - 1, i, i + 1):
            P[i, j % d] -= 1.0 / 3
    return P


UNEQUAL = {
    **{f"band_{w}_over_{name}": _band(w, div) for w in (1, 2)
       for name, div in (("d", lambda d, w: d), ("width", lambda d, w: 2 * w + 1))},
    "skip_first": _skip_index(lambda d: 0),
    "skip_last": _skip_index(lambda d: d - 1),
    "skip_middle": _skip_index(lambda d: d // 2),
    **{f"projector_{name}": _projector_off(v) for name, v in (
        ("range", lambda d: np.arange(1.0, d + 1)), ("linspace", lambda d: np.linspace(1.0, 2.0, d)),
        ("first_doubled", lambda d: np.r_[2.0, np.ones(d - 1)]), ("squares", lambda d: np.arange(1.0, d + 1) ** 2),
        ("alternating", lambda d: 1.0 + 0.5 * (-1.0) ** np.arange(d)))},
    "halves": _halves,
    "circulant": _circulant,
    "outer_range": lambda d: np.eye(d) - np.outer(np.arange(d), np.arange(d)) / d**2,
    "outer_linspace_sym": lambda d: np.eye(d) - np.outer(np.linspace(0.5, 1.5, d), np.linspace(0.5, 1.5, d)) / d,
    "ones_but_diag_zero": lambda d: np.eye(d) - (np.ones((d, d)) - np.eye(d)) / d - np.diag(np.arange(d) / d**2),
    "hilbert": lambda d: np.eye(d) - 1.0 / (np.add.outer(np.arange(d), np.arange(d)) + 1) / d,
    "skip_two": lambda d: _skip_index(lambda d: 1)(d) + _skip_index(lambda d: 0)(d) - np.eye(d),
    "centred_pairs": lambda d: np.eye(d) - np.kron(np.eye(d // 2), np.ones((2, 2)) / 2) if d % 2 == 0 else
    np.eye(d) - np.outer(np.arange(d), np.arange(d)) / (d * d),
    "toeplitz": lambda d: np.eye(d) - np.exp(-np.abs(np.subtract.outer(np.arange(d), np.arange(d)))) / d,
}


def _centering_mutants():
    found = _centering_structured() + _centering_inner()
    found.append(mutant(NB, CM, "geo.identity_returned", _integer_division, f"{CM}/identity/integer_division"))
    found.append(mutant(NB, CM, "geo.identity_returned", _floor_mean_part, f"{CM}/identity/floor_division"))
    for name, build in VECTORS.items():
        found.append(mutant(NB, CM, "geo.vector_for_matrix", _vector(build), f"{CM}/vector/{name}"))
    for style, special in itertools.product(STYLES, ONE_BY_ONE):
        if special in ("eye", "ones") or style in ("loops", "outer", "scalar"):
            found.append(mutant(NB, CM, "geo.d1_not_zero", _d1_identity(style, special), f"{CM}/d1/{special}/{style}"))
    for style in STYLES:
        found.append(mutant(NB, CM, "geo.d1_not_zero", _d1_guarded_divisor(style), f"{CM}/d1/guarded/{style}"))
    for name, function in NOT_SYMMETRIC.items():
        found.append(mutant(NB, CM, "geo.not_symmetric", function, f"{CM}/not_symmetric/{name}"))
    for name, function in UNEQUAL.items():
        found.append(mutant(NB, CM, "geo.unequal_off_diagonal", function, f"{CM}/unequal/{name}"))
    return found


def _correct_centerings():
    found = [Correct(NB, CM, f, f"{CM}/correct/impl/{f.__name__}") for f in impl.CORRECT_CENTERINGS]
    found.append(Correct(NB, CM, solution(NB, CM), f"{CM}/correct/solution"))
    for style in list(STYLES)[::2]:
        found.append(Correct(NB, CM, _structured(lambda d: (1.0, -1.0 / d))(style), f"{CM}/correct/style/{style}"))
    found.append(Correct(NB, CM, lambda d: np.eye(d) - np.ones((d, d)) * np.mean(np.ones(d)) / d, f"{CM}/correct/mean"))
    found.append(Correct(NB, CM, lambda d: np.eye(d) - np.outer(np.ones(d) / np.sqrt(d), np.ones(d) / np.sqrt(d)),
                         f"{CM}/correct/unit_vector"))
    found.append(Correct(NB, CM, lambda d: np.linalg.inv(np.eye(d)) - np.full((d, d), d**-1.0),
                         f"{CM}/correct/inverse_power"))
    return found


# ============================================================================ invariance_gap
# moves: how a * x + c is built
MOVES_OK = {
    "plain": lambda x, a, c: a * x + c,
    "multiply_add": lambda x, a, c: np.add(np.multiply(x, a), c),
    "ones_like": lambda x, a, c: x * a + c * np.ones_like(x),
    "full_like": lambda x, a, c: a * x + np.full_like(x, c),
    "ones_vector": lambda x, a, c: a * x + c * np.ones(x.shape[-1]),
}
MOVE_MISTAKES = {
    "geo.shift_missing": {"a_x": lambda x, a, c: a * x, "multiply": lambda x, a, c: np.multiply(x, a),
                          "x_a": lambda x, a, c: x * a, "scaled_copy": lambda x, a, c: x.copy() * a},
    "geo.scale_missing": {"x_c": lambda x, a, c: x + c, "add": lambda x, a, c: np.add(x, c),
                          "c_x": lambda x, a, c: c + x, "ones": lambda x, a, c: x + c * np.ones_like(x)},
    "geo.shift_scaled": {"brackets": lambda x, a, c: a * (x + c), "expanded": lambda x, a, c: a * x + a * c,
                         "right": lambda x, a, c: (x + c) * a, "ones": lambda x, a, c: a * (x + c * np.ones_like(x))},
    "geo.shift_times_x": {"c_x": lambda x, a, c: a * x + c * x, "sum": lambda x, a, c: (a + c) * x,
                          "x_sum": lambda x, a, c: x * (a + c), "multiply": lambda x, a, c: np.multiply(x, a + c)},
    "geo.scale_shift_swapped": {"c_x_a": lambda x, a, c: c * x + a, "x_c_a": lambda x, a, c: x * c + a,
                                "ones": lambda x, a, c: c * x + a * np.ones_like(x),
                                "add": lambda x, a, c: np.add(np.multiply(c, x), a)},
    "geo.shift_not_constant": {"basis": lambda x, a, c: a * x + c * np.eye(x.shape[-1])[0],
                               "range": lambda x, a, c: a * x + c * np.arange(x.shape[-1]),
                               "linspace": lambda x, a, c: a * x + c * np.linspace(0.0, 1.0, x.shape[-1]),
                               "squares": lambda x, a, c: a * x + c * x**2,
                               "token_mean": lambda x, a, c: a * x + c * x.mean(axis=-1, keepdims=True),
                               "abs": lambda x, a, c: a * x + c * np.abs(x),
                               "sign": lambda x, a, c: a * x + c * np.sign(x)},
}
# references: what the moved output is compared with (the right one is norm(x))
REF_MISTAKES = {
    "raw_x": lambda norm, x, a, c: x,
    "scaled_only": lambda norm, x, a, c: norm(a * x),
    "shifted_only": lambda norm, x, a, c: norm(x + c),
    "moved_itself": lambda norm, x, a, c: a * x + c,
    "doubled": lambda norm, x, a, c: norm(2.0 * x),
    "negated": lambda norm, x, a, c: norm(-x),
    "shifted_by_a": lambda norm, x, a, c: norm(x + a),
}
# reductions: reduce(u, v) with u = norm(moved), v = norm(x)
REDUCE_OK = {
    "max_abs": lambda u, v: float(np.max(np.abs(u - v))),
    "method": lambda u, v: float(np.abs(u - v).max()),
    "inf_norm": lambda u, v: float(np.linalg.norm((u - v).ravel(), ord=np.inf)),
    "python_max": lambda u, v: float(max(abs(e) for e in (u - v).ravel())),
    "maximum": lambda u, v: float(np.max(np.maximum(u - v, v - u))),
    "both_ends": lambda u, v: float(max((u - v).max(), -(u - v).min())),
    "amax_absolute": lambda u, v: float(np.amax(np.absolute(v - u))),
    "item": lambda u, v: np.max(np.abs(u - v)).item(),
}
REDUCE_MISTAKES = {
    "geo.abs_missing": {"signed": lambda u, v: float(np.max(u - v)), "reversed": lambda u, v: float(np.max(v - u)),
                        "method": lambda u, v: float((u - v).max()),
                        "abs_after": lambda u, v: float(abs(np.max(u - v))),
                        "abs_after_reversed": lambda u, v: abs(float((v - u).max()))},
    "geo.mean_not_max": {"mean": lambda u, v: float(np.mean(np.abs(u - v))),
                         "method": lambda u, v: float(np.abs(u - v).mean()),
                         "average": lambda u, v: float(np.average(np.abs(v - u))),
                         "sum_over_size": lambda u, v: float(np.sum(np.abs(u - v)) / u.size)},
    "geo.euclidean_not_max": {"norm": lambda u, v: float(np.linalg.norm(u - v)),
                              "sqrt_sum": lambda u, v: float(np.sqrt(np.sum((u - v) ** 2))),
                              "ravel_norm": lambda u, v: float(np.linalg.norm((u - v).ravel())),
                              "dot": lambda u, v: float(np.sqrt((u - v).ravel() @ (u - v).ravel()))},
    "geo.difference_of_maxima": {"abs_of_maxima": lambda u, v: float(abs(np.max(u) - np.max(v))),
                                 "maxima_of_abs": lambda u, v: float(np.max(np.abs(u)) - np.max(np.abs(v))),
                                 "methods": lambda u, v: float(abs(u.max() - v.max())),
                                 "abs_of_abs_maxima": lambda u, v: float(np.abs(u).max() - np.abs(v).max())},
    "geo.relative_gap": {"over_max": lambda u, v: float(np.max(np.abs(u - v)) / np.max(np.abs(v))),
                         "method": lambda u, v: float(np.abs(u - v).max() / np.abs(v).max()),
                         "inf_norms": lambda u, v: float(np.linalg.norm((u - v).ravel(), np.inf)
                                                         / np.linalg.norm(v.ravel(), np.inf))},
    "geo.some_tokens_only": {"first_token": lambda u, v: float(np.max(np.abs(u[0] - v[0]))),
                             "first_row": lambda u, v: float(np.max(np.abs((u - v).reshape(-1, u.shape[-1])[0]))),
                             "first_index": lambda u, v: float(np.abs(u - v)[0].max())},
}


def _gap(move, reduce, style, ref=None):
    """gap = reduce(norm(move(x, a, c)), ref); ref defaults to norm(x)."""
    def invariance_gap(norm, x, a, c):
        if style == "moved_first":
            u = norm(move(x, a, c))
            v = norm(x) if ref is None else ref(norm, x, a, c)
        elif style == "reference_first":
            v = norm(x) if ref is None else ref(norm, x, a, c)
            u = norm(move(x, a, c))
        else:  # token by token, put back together
            d = x.shape[-1]
            rows = x.reshape(-1, d)
            u = np.stack([norm(move(row, a, c)) for row in rows]).reshape(x.shape)
            v = (np.stack([norm(row) for row in rows]).reshape(x.shape) if ref is None
                 else np.stack([ref(norm, row, a, c) for row in rows]).reshape(x.shape))
        return reduce(u, v)

    return invariance_gap


GAP_STYLES = ("moved_first", "reference_first", "tokens")


def _cycle(mapping, k):
    keys = list(mapping)
    return keys[k % len(keys)], mapping[keys[k % len(keys)]]


def _gap_recipes():
    found = []
    k = 0
    for mistake, moves in MOVE_MISTAKES.items():
        for (name, move), style in itertools.product(moves.items(), GAP_STYLES):
            for _ in range(2):
                rname, reduce = _cycle(REDUCE_OK, k)
                k += 1
                found.append(mutant(NB, GAP, mistake, _gap(move, reduce, style),
                                    f"{GAP}/{mistake}/{name}/{style}/{rname}"))
    for mistake, reduces in REDUCE_MISTAKES.items():
        for (name, reduce), style in itertools.product(reduces.items(), GAP_STYLES):
            for _ in range(2):
                mname, move = _cycle(MOVES_OK, k)
                k += 1
                found.append(mutant(NB, GAP, mistake, _gap(move, reduce, style),
                                    f"{GAP}/{mistake}/{name}/{style}/{mname}"))
    for (name, ref), style in itertools.product(REF_MISTAKES.items(), GAP_STYLES):
        rname, reduce = _cycle(REDUCE_OK, k)
        k += 1
        found.append(mutant(NB, GAP, "geo.reference_missing", _gap(MOVES_OK["plain"], reduce, style, ref),
                            f"{GAP}/reference/{name}/{style}/{rname}"))
    # two mistakes at once: a wrong move and a wrong summary of the differences
    # (not the missing scale: on the identity probes its difference is the constant c, whose every summary agrees)
    combinable = [m for m in MOVE_MISTAKES if m != "geo.scale_missing"]
    for j, (move_id, reduce_id) in enumerate(itertools.product(combinable, REDUCE_MISTAKES)):
        mname, move = _cycle(MOVE_MISTAKES[move_id], j)
        rname, reduce = _cycle(REDUCE_MISTAKES[reduce_id], j)
        style = GAP_STYLES[j % 2]
        found.append(mutant(NB, GAP, (move_id, reduce_id), _gap(move, reduce, style),
                            f"{GAP}/{move_id}+{reduce_id}/{mname}/{rname}/{style}"))
    return found


# ---------------------------------------------------------------------------- hand-written families
def _entrywise(how, move):
    def invariance_gap(norm, x, a, c):
        if how == "flat":
            return float(max(abs(norm(move(e, a, c)) - norm(e)) for e in x.ravel()))
        if how == "vectorize":
            f = np.vectorize(norm)
            return float(np.max(np.abs(f(move(x, a, c)) - f(x))))
        if how == "ndindex":
            return float(max(abs(norm(move(x[i], a, c)) - norm(x[i])) for i in np.ndindex(x.shape)))
        if how == "nested":
            best = 0.0
            for row in x.reshape(-1, x.shape[-1]):
                for e in row:
                    best = max(best, float(abs(norm(move(e, a, c)) - norm(e))))
            return best
        if how == "map":
            return float(max(map(lambda e: abs(norm(move(e, a, c)) - norm(e)), x.flat)))
        if how == "list":
            return float(np.max([np.abs(norm(move(float(e), a, c)) - norm(float(e))) for e in x.flat]))
        return float(np.max(np.abs(np.frompyfunc(norm, 1, 1)(move(x, a, c)).astype(float)
                                   - np.frompyfunc(norm, 1, 1)(x).astype(float))))

    return invariance_gap


ENTRYWISE = ("flat", "vectorize", "ndindex", "nested", "map", "list", "frompyfunc")


def _own_layer_norm(z):
    mu = z.mean(-1, keepdims=True)
    return (z - mu) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)


NOT_CALLED = {
    "zero": lambda norm, x, a, c: 0.0,
    "inputs": lambda norm, x, a, c: float(np.max(np.abs((a * x + c) - x))),
    "inputs_scaled": lambda norm, x, a, c: float(np.max(np.abs(a * x - x))),
    "own_layer_norm": lambda norm, x, a, c: float(np.max(np.abs(_own_layer_norm(a * x + c) - _own_layer_norm(x)))),
    "own_rms": lambda norm, x, a, c: float(np.max(np.abs(
        (a * x + c) / np.sqrt(np.mean((a * x + c) ** 2, -1, keepdims=True) + 1e-5)
        - x / np.sqrt(np.mean(x**2, -1, keepdims=True) + 1e-5)))),
    "eps": lambda norm, x, a, c: float(np.finfo(np.float64).eps),
    "abs_c": lambda norm, x, a, c: float(abs(c)),
    "formula": lambda norm, x, a, c: float(abs(a - 1) * np.max(np.abs(x)) + abs(c)),
    "one": lambda norm, x, a, c: 1.0,
    "standardised_inputs": lambda norm, x, a, c: float(np.max(np.abs(
        ((a * x + c) - (a * x + c).mean(-1, keepdims=True)) / (a * x + c).std(-1, keepdims=True)
        - (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)))),
    "relative_inputs": lambda norm, x, a, c: float(np.max(np.abs(a * x + c - x)) / np.max(np.abs(x))),
}


def _never_called(move, form):
    def invariance_gap(norm, x, a, c):
        if form == "inputs":
            return float(np.max(np.abs(move(x, a, c) - x)))
        return NOT_CALLED[form](norm, x, a, c)

    return invariance_gap


def _moved_not_built(how, reduce):
    def invariance_gap(norm, x, a, c):
        if how == "discarded":
            z = x.copy()
            a * z + c  # computed, never kept
        elif how == "copy_only":
            z = np.array(x)
        elif how == "same_name":
            z = x
            _moved = a * z + c  # noqa: F841 - the learner then uses z
        elif how == "out_of_place_add":
            z = x.copy()
            np.add(np.multiply(z, a), c)
        else:  # "x_twice"
            return reduce(norm(x), norm(x))
        return reduce(norm(z), norm(x))

    return invariance_gap


def _some_tokens_input(how, reduce):
    def invariance_gap(norm, x, a, c):
        if how == "first":
            return reduce(norm(a * x[0] + c), norm(x[0]))
        if how == "last":
            return reduce(norm(a * x[-1] + c), norm(x[-1]))
        if how == "first_slice":
            return reduce(norm(a * x[:1] + c), norm(x[:1]))
        if how == "second":
            return reduce(norm(a * x[1] + c), norm(x[1]))
        rows = x.reshape(-1, x.shape[-1])  # "every_other"
        return max(reduce(norm(a * r + c), norm(r)) for r in rows[::2])

    return invariance_gap


PARTIAL = {
    "last_axis": lambda D: np.max(np.abs(D), axis=-1),
    "method_last_axis": lambda D: np.abs(D).max(-1),
    "first_axis": lambda D: np.max(np.abs(D), axis=0),
    "leading_axes": lambda D: np.max(np.abs(D), axis=tuple(range(D.ndim - 1))),
    "amax": lambda D: np.amax(np.abs(D), axis=D.ndim - 1),
    "per_token_list": lambda D: np.array([np.max(np.abs(r)) for r in D.reshape(-1, D.shape[-1])]).reshape(D.shape[:-1]),
    "inf_norm_rows": lambda D: np.linalg.norm(D, ord=np.inf, axis=-1),
}
NO_REDUCTION = {
    "abs": lambda D: np.abs(D),
    "signed": lambda D: D,
    "absolute": lambda D: np.absolute(D),
    "copy": lambda D: np.abs(D).copy(),
    "sqrt_square": lambda D: np.sqrt(D * D),
    "maximum": lambda D: np.maximum(D, -D),
    "fabs": lambda D: np.fabs(D),
}
NOT_A_FLOAT = {
    "keepdims": lambda D: np.max(np.abs(D), keepdims=True),
    "zero_d": lambda D: np.array(np.max(np.abs(D))),
    "asarray": lambda D: np.asarray(float(np.max(np.abs(D)))),
    "list": lambda D: [float(np.max(np.abs(D)))],
    "tuple": lambda D: (float(np.max(np.abs(D))),),
    "reshape_one": lambda D: np.abs(D).max().reshape(1),
    "atleast_1d": lambda D: np.atleast_1d(np.max(np.abs(D))),
}


def _shaped(summary, move):
    def invariance_gap(norm, x, a, c):
        return summary(norm(move(x, a, c)) - norm(x))

    return invariance_gap


def _gap_families():
    found = []
    for j, how in enumerate(ENTRYWISE):
        for mname in ("plain", "ones_like", "multiply_add"):
            found.append(mutant(NB, GAP, "geo.norm_on_scalar", _entrywise(how, MOVES_OK[mname]),
                                f"{GAP}/norm_on_scalar/{how}/{mname}"))
    for form in NOT_CALLED:
        found.append(mutant(NB, GAP, "geo.norm_not_called", _never_called(MOVES_OK["plain"], form),
                            f"{GAP}/norm_not_called/{form}"))
    for mname, move in MOVES_OK.items():
        for form in ("inputs",):
            found.append(mutant(NB, GAP, "geo.norm_not_called", _never_called(move, form),
                                f"{GAP}/norm_not_called/{form}/{mname}"))
    for mname, move in list(MOVES_OK.items())[:4]:
        found.append(mutant(NB, GAP, "geo.norm_not_called",
                            lambda norm, x, a, c, move=move: float(np.max(np.abs(_own_layer_norm(move(x, a, c))
                                                                                 - _own_layer_norm(x)))),
                            f"{GAP}/norm_not_called/own_layer_norm/{mname}"))
    for k, how in enumerate(("discarded", "copy_only", "same_name", "out_of_place_add", "x_twice")):
        for rname in list(REDUCE_OK)[:4]:
            found.append(mutant(NB, GAP, "geo.moved_not_built", _moved_not_built(how, REDUCE_OK[rname]),
                                f"{GAP}/moved_not_built/{how}/{rname}"))
    for how in ("first", "last", "first_slice", "second", "every_other"):
        for rname in list(REDUCE_OK)[:3]:
            found.append(mutant(NB, GAP, "geo.some_tokens_only", _some_tokens_input(how, REDUCE_OK[rname]),
                                f"{GAP}/some_tokens_input/{how}/{rname}"))
    for family, mistake in ((PARTIAL, "geo.partial_reduction"), (NO_REDUCTION, "geo.no_reduction"),
                            (NOT_A_FLOAT, "geo.not_a_float")):
        for name, summary in family.items():
            for mname in ("plain", "ones_like", "full_like"):
                found.append(mutant(NB, GAP, mistake, _shaped(summary, MOVES_OK[mname]),
                                    f"{GAP}/{mistake}/{name}/{mname}"))
    return found


def _correct_gaps():
    found = [Correct(NB, GAP, f, f"{GAP}/correct/impl/{f.__name__}") for f in impl.CORRECT_GAPS]
    found.append(Correct(NB, GAP, solution(NB, GAP), f"{GAP}/correct/solution"))
    for j, ((mname, move), (rname, reduce)) in enumerate(itertools.product(MOVES_OK.items(), REDUCE_OK.items())):
        if j % 3 == 0:
            style = GAP_STYLES[(j // 3) % 3]
            found.append(Correct(NB, GAP, _gap(move, reduce, style), f"{GAP}/correct/{mname}/{rname}/{style}"))
    return found


MUTANTS = _centering_mutants() + _gap_recipes() + _gap_families()
CORRECT = _correct_centerings() + _correct_gaps()
UNREACHABLE: dict = {}
