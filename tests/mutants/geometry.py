"""Mutants of 02_geometry: wrong ``complement_projection`` and ``invariance_gap`` with known mistakes, and correct
variants.

``complement_projection``: the answer is "identity minus the projection onto the span of V's
columns", so a mutant is a wrong stand-in for that span projection (unnormalised columns, single
columns summed or chained, a basis that keeps dependent columns, one column only, V read as rows)
crossed with several spellings of "identity minus it"; returning the span projection itself is its
own family.

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
PROJ, GAP = "complement_projection", "invariance_gap"


# ============================================================================ complement_projection
# A projection is assembled in two steps: a matrix M for the part to remove (the projection onto the
# span, or a mistaken stand-in for it), then "identity minus M". Each step has several spellings.
def _gram_schmidt_basis(V, tol=1e-10):
    basis = []
    scale = max(1.0, float(np.abs(V).max()))
    for v in V.T:
        w = np.array(v, dtype=np.float64)
        for q in basis:
            w = w - (q @ w) * q
        if np.linalg.norm(w) > tol * scale:
            basis.append(w / np.linalg.norm(w))
    return np.array(basis).T if basis else np.zeros((V.shape[0], 0))


def _svd_basis(V):
    U, s, _ = np.linalg.svd(V, full_matrices=False)
    return U[:, s > 1e-10 * s.max()]


def _eigh_basis(V):
    w, U = np.linalg.eigh(V @ V.T)
    return U[:, w > 1e-10 * w.max()]


SPAN_OK = {  # the projection onto span(V), robust to dependent columns
    "pinv": lambda V: V @ np.linalg.pinv(V),
    "gram_schmidt": lambda V: _gram_schmidt_basis(V) @ _gram_schmidt_basis(V).T,
    "svd": lambda V: _svd_basis(V) @ _svd_basis(V).T,
    "lstsq": lambda V: V @ np.linalg.lstsq(V, np.eye(V.shape[0]), rcond=None)[0],
    "pinv_gram": lambda V: V @ np.linalg.pinv(V.T @ V) @ V.T,
    "eigh": lambda V: _eigh_basis(V) @ _eigh_basis(V).T,
    "outer_sum": lambda V: sum(np.outer(q, q) for q in _gram_schmidt_basis(V).T),
}
COMPLEMENT_OK = {  # identity minus M, spelled several ways
    "eye": lambda M: np.eye(M.shape[0]) - M,
    "identity": lambda M: np.identity(M.shape[0]) - M,
    "diag": lambda M: np.diag(np.ones(M.shape[0])) - M,
    "in_place": lambda M: _minus_in_place(M),
}


def _minus_in_place(M):
    P = -np.array(M, dtype=np.float64)
    P[np.diag_indices(P.shape[0])] += 1.0
    return P


def _projection(span, complement=COMPLEMENT_OK["eye"]):
    def complement_projection(V):
        return complement(span(V))

    return complement_projection


# the part to remove, wrong in a known way
SPAN_UNNORMALISED = {
    "matmul": lambda V: V @ V.T,
    "dot": lambda V: np.dot(V, V.T),
    "einsum": lambda V: np.einsum("ik,jk->ij", V, V),
    "outer_sum": lambda V: sum(np.outer(v, v) for v in V.T),
    "loop": lambda V: _outer_loop(V, lambda v: 1.0),
}
SPAN_SINGLES = {  # each column's own projection, summed: right for orthogonal columns only
    "outer_sum": lambda V: sum(np.outer(v, v) / (v @ v) for v in V.T),
    "normalised_columns": lambda V: (V / np.linalg.norm(V, axis=0)) @ (V / np.linalg.norm(V, axis=0)).T,
    "loop": lambda V: _outer_loop(V, lambda v: 1.0 / (v @ v)),
    "einsum": lambda V: np.einsum("ik,jk->ij", V / np.sqrt((V * V).sum(0)), V / np.sqrt((V * V).sum(0))),
    "diag_gram": lambda V: V @ np.diag(1.0 / np.diag(V.T @ V)) @ V.T,
}
# exact only for independent columns (np.linalg.solve on the singular Gram matrix is left out: whether it
# raises or, by luck of rounding, returns a valid generalised inverse depends on the last bits)
SPAN_DEPENDENT = {
    "inv_gram": lambda V: V @ np.linalg.inv(V.T @ V) @ V.T,
    "inv_gram_grouped": lambda V: (V @ np.linalg.inv(V.T @ V)) @ V.T,
    "qr": lambda V: np.linalg.qr(V)[0] @ np.linalg.qr(V)[0].T,
    "svd_all": lambda V: np.linalg.svd(V, full_matrices=False)[0] @ np.linalg.svd(V, full_matrices=False)[0].T,
    "gram_schmidt_no_tol": lambda V: _gram_schmidt_basis(V, tol=0.0) @ _gram_schmidt_basis(V, tol=0.0).T,
    "cholesky": lambda V: _cholesky_span(V),
}
SPAN_ONE = {  # one column only
    "first": lambda V: np.outer(V[:, 0], V[:, 0]) / (V[:, 0] @ V[:, 0]),
    "last": lambda V: np.outer(V[:, -1], V[:, -1]) / (V[:, -1] @ V[:, -1]),
    "first_pinv": lambda V: V[:, :1] @ np.linalg.pinv(V[:, :1]),
    "early_return": lambda V: _first_in_loop(V),
    "unit_first": lambda V: np.outer(V[:, 0] / np.linalg.norm(V[:, 0]), V[:, 0] / np.linalg.norm(V[:, 0])),
}
SPAN_ROWS = {  # V read as (k, d): the result is k by k
    "pinv": lambda V: V.T @ np.linalg.pinv(V.T),
    "gram_schmidt": lambda V: _gram_schmidt_basis(V.T) @ _gram_schmidt_basis(V.T).T,
    "svd": lambda V: _svd_basis(V.T) @ _svd_basis(V.T).T,
    "lstsq": lambda V: V.T @ np.linalg.lstsq(V.T, np.eye(V.shape[1]), rcond=None)[0],
    "pinv_gram": lambda V: V.T @ np.linalg.pinv(V @ V.T) @ V,
}


def _outer_loop(V, weight):
    M = np.zeros((V.shape[0], V.shape[0]))
    for j in range(V.shape[1]):
        v = V[:, j]
        M += weight(v) * np.outer(v, v)
    return M


def _first_in_loop(V):
    for v in V.T:
        return np.outer(v, v) / (v @ v)


def _cholesky_span(V):
    L = np.linalg.cholesky(V.T @ V)
    Q = np.linalg.solve(L, V.T).T  # V L^-T: orthonormal columns when L exists
    return Q @ Q.T


def _chained(order, weight):
    def complement_projection(V):
        d = V.shape[0]
        P = np.eye(d)
        columns = list(V.T) if order == "forward" else list(V.T)[::-1]
        for v in columns:
            step = np.eye(d) - weight(v) * np.outer(v, v)
            P = P @ step if order != "left" else step @ P
        return P

    return complement_projection


def _projection_mutants():
    found = []
    families = (("geo.not_normalised", SPAN_UNNORMALISED), ("geo.orthogonality_assumed", SPAN_SINGLES),
                ("geo.dependent_columns", SPAN_DEPENDENT), ("geo.one_direction_only", SPAN_ONE),
                ("geo.rows_for_columns", SPAN_ROWS))
    for mistake, spans in families:
        for (name, span), (cname, complement) in itertools.product(spans.items(), COMPLEMENT_OK.items()):
            found.append(mutant(NB, PROJ, mistake, _projection(span, complement), f"{PROJ}/{mistake}/{name}/{cname}"))
    for order in ("forward", "backward", "left"):
        for wname, weight in (("over_vv", lambda v: 1.0 / (v @ v)), ("unit", lambda v: 1.0 / np.linalg.norm(v) ** 2)):
            found.append(mutant(NB, PROJ, "geo.orthogonality_assumed", _chained(order, weight),
                                f"{PROJ}/orthogonality_assumed/chained/{order}/{wname}"))
    # the span itself returned: M, or M written as "identity minus the complement" the wrong way round
    for (name, span), how in itertools.product(SPAN_OK.items(), ("as_is", "copy", "twice_minus")):
        if how == "as_is":
            function = span
        elif how == "copy":
            def function(V, span=span):
                return np.array(span(V), dtype=np.float64, copy=True)
        else:  # I - (I - M) = M
            def function(V, span=span):
                return np.eye(V.shape[0]) - (np.eye(V.shape[0]) - span(V))
        found.append(mutant(NB, PROJ, "geo.span_not_complement", function, f"{PROJ}/span_not_complement/{name}/{how}"))
    # No two-mistake family here: with one column only, V = 1, the first test case cannot show a mistake
    # about several columns, so the first failure names the other mistake alone.
    return found


def _correct_projections():
    found = [Correct(NB, PROJ, f, f"{PROJ}/correct/impl/{f.__name__}") for f in impl.CORRECT_PROJECTIONS]
    found.append(Correct(NB, PROJ, solution(NB, PROJ), f"{PROJ}/correct/solution"))
    for j, ((name, span), (cname, complement)) in enumerate(itertools.product(SPAN_OK.items(), COMPLEMENT_OK.items())):
        if j % 3 == 0:
            found.append(Correct(NB, PROJ, _projection(span, complement), f"{PROJ}/correct/{name}/{cname}"))
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
            _moved = a * z + c  # the learner then uses z
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
    for how in ENTRYWISE:
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
    for how in ("discarded", "copy_only", "same_name", "out_of_place_add", "x_twice"):
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


MUTANTS = _projection_mutants() + _gap_recipes() + _gap_families()
CORRECT = _correct_projections() + _correct_gaps()
UNREACHABLE: dict = {}
