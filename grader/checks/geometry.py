"""Checks for 02_geometry: the projection that removes given directions, and the invariance gap.

Oracles:

* ``complement_projection(V)`` is judged by properties only. A real matrix that is symmetric and
  idempotent is an orthogonal projection, and an orthogonal projection is fixed by its null
  space; so "symmetric, idempotent, P V = 0, trace d - r" (r the dimension of the span of V's
  columns) pins down the answer without the check ever building it. The test matrices are
  V = B R with B orthogonal cosine (DCT-II) columns, orthogonal by a trigonometric identity, so r
  is known by construction, and each V has twins with the same span (B itself, and independent
  columns B U): when the learner's P is wrong for V but right for a twin, the diagnosis says which
  assumption (orthogonal or independent columns) the code made.
* ``invariance_gap(norm, x, a, c)`` is compared with the same gap computed end to end in
  torch (``torch.nn.functional.layer_norm`` / ``rms_norm`` in float64). The ``norm`` the check
  hands over records what it was called with, so a wrong answer is traced to its cause: the
  implied scale and shift of the input the learner built, or which summary of the
  difference was returned instead of its largest absolute entry. Where two summaries agree on the
  test input (or a wrong one agrees with the right one), the learner's function is asked again on
  -x and three other inputs, where they differ.
"""
from __future__ import annotations

import math

import numpy as np

from grader import oracles
from grader.compare import CheckFailed, LearnerError, call_learner, check, fail, ids_of, passed, strict_array, tag
from grader.numerics import random_input

GAP_RTOL = 1e-9  # relative to the size of the norm's output; rounding differences are ~1e-15
SHAPE_RULES = {  # the likely cause of a shape error raised by the learner's code
    "complement_projection": "V has shape (d, k): d features (rows), k directions (columns); the result is (d, d).",
    "invariance_gap": "invariance_gap must accept x of any shape (..., d): build a * x + c with the same shape, call "
                      "norm on whole arrays, and reduce the difference over every axis (np.max(np.abs(...))).",
}


# --------------------------------------------------------------------------- complement_projection


def dct_basis(d: int, frequencies) -> np.ndarray:
    """Columns cos(pi (n + 1/2) f / d), n = 0..d-1: mutually orthogonal by a trigonometric identity (DCT-II).

    Frequency 0 is the all-ones vector 1. The check builds every test matrix V as B R from these
    columns B, so it knows the span of V and its dimension without ever computing a projection.
    """
    n = np.arange(d)[:, None] + 0.5
    return np.cos(np.pi * n * np.asarray(frequencies, dtype=np.float64)[None, :] / d)


class _Case:
    """V = B R: B orthogonal columns (chosen DCT frequencies, scaled), R of full row rank r = len(frequencies)."""

    def __init__(self, d: int, frequencies, k: int, seed: int, mixed: bool = True, basis: str = "dct"):
        rng = np.random.default_rng(seed)
        r = len(frequencies)
        self.d, self.r, self.k = d, r, k
        scales = rng.uniform(0.5, 2.0, size=r) * (2.0 if d > 1 else 3.0)  # never unit columns
        # "standard": columns along standard basis vectors e_j (j = the "frequencies"): zero rows, V[0, 0] == 0
        # unless e_0 is among them, the inputs a special case on V's first entry gets wrong
        directions = np.eye(d)[:, list(frequencies)] if basis == "standard" else dct_basis(d, frequencies)
        self.B = directions * scales  # the orthogonal "twin": same span
        if not mixed and k == r:
            R = np.eye(r)
        else:
            R = rng.uniform(-1.5, 1.5, size=(r, k))
            R[:, :r] += 2.0 * np.eye(r)[:, :min(r, k)]  # full row rank, far from singular
        self.V = self.B @ R
        self.dependent = k > r
        # an independent, non-orthogonal twin with the same span (used to tell dependent-column failures apart)
        self.independent = self.B @ (np.eye(r) + np.triu(rng.uniform(0.3, 0.9, size=(r, r)), 1))

    @property
    def orthogonal(self) -> bool:
        G = self.V.T @ self.V
        return bool(np.max(np.abs(G - np.diag(np.diag(G)))) <= 1e-12 * np.max(np.abs(G)))

    def describe(self) -> str:
        kind = ("linearly dependent columns" if self.dependent else
                "orthogonal columns" if self.orthogonal else "independent, non-orthogonal columns")
        return f"V of shape ({self.d}, {self.k}), {kind}, spanning {self.r} direction{'s' * (self.r > 1)}"


def _projection_problems(P: np.ndarray, case: _Case) -> list:
    """What is wrong with P as the projection onto the complement of span(V): [] when it is right.

    Symmetric, idempotent, P V = 0 and trace d - r determine that projection uniquely.
    """
    d, r, V = case.d, case.r, case.V
    scale = max(1.0, float(np.max(np.abs(V))))
    found = []
    for error, text in (
        (np.max(np.abs(P - P.T)), "is not symmetric (P != P.T): an orthogonal projection equals its transpose"),
        (np.max(np.abs(P @ V)) / scale, "does not send the columns of V to 0 (P @ V != 0): print(P @ V)"),
        (np.max(np.abs(P @ P - P)), "is not idempotent (P @ P != P): projecting twice must change nothing"),
        (abs(float(np.trace(P)) - (d - r)), f"has trace {np.trace(P):.6g}, not d - r = {d - r}: the trace of a "
                                            "projection is the dimension it keeps"),
    ):
        if error > PROJECTION_ATOL:
            found.append(text)
    return found


def _learner_projection(function, V: np.ndarray, what: str):
    """The learner's P for V as a float64 (d, d) array, or None if it raised or returned something else."""
    try:
        P = call_learner(function, V, what=what)
    except CheckFailed:
        return None
    if type(P) is not np.ndarray or P.shape != (V.shape[0],) * 2:
        return None
    P = np.array(P, dtype=np.float64)
    return P if np.all(np.isfinite(P)) else None


def _only_one_column(P: np.ndarray, case: _Case) -> int | None:
    """The column of V that P alone removes (P a projection of rank d - 1 that kills it), or None."""
    if case.k < 2 or case.r < 2:
        return None
    V = case.V
    if np.max(np.abs(P - P.T)) > PROJECTION_ATOL or np.max(np.abs(P @ P - P)) > PROJECTION_ATOL:
        return None
    if abs(float(np.trace(P)) - (case.d - 1)) > PROJECTION_ATOL:
        return None
    for j in range(case.k):
        if np.max(np.abs(P @ V[:, j])) <= PROJECTION_ATOL * max(1.0, float(np.max(np.abs(V[:, j])))):
            return j
    return None


def _projection_cause(function, P: np.ndarray, case: _Case) -> str | None:
    """Name the mistake from what P does to the columns of V, and from the learner's P for V's twins."""
    V, G = case.V, case.V.T @ case.V
    scale = max(1.0, float(np.max(np.abs(V))), float(np.max(np.abs(V @ G))))
    PV = P @ V
    if np.max(np.abs(PV - V)) <= PROJECTION_ATOL * scale and np.max(np.abs(P - P.T)) <= PROJECTION_ATOL:
        return tag("P keeps the columns of V (P @ V = V): you returned the projection ONTO their span, the part "
                   "to remove. The complement is the identity minus it.", "geo.span_not_complement")
    if np.max(np.abs(PV - (V - V @ G))) <= PROJECTION_ATOL * scale:
        return tag("P @ v = v - v |v|^2 for the columns: you subtracted v v^T as if every column had length 1 "
                   "(and as if they were orthogonal). A direction v is removed by v v^T / (v . v); for several "
                   "columns, work with an orthonormal basis of their span.", "geo.not_normalised")
    j = _only_one_column(P, case)
    if j is not None:
        return tag(f"P removes column {j} of V and nothing else (it has rank d - 1): every column of V must be "
                   f"sent to 0, so P keeps d - r = {case.d - case.r} dimensions.", "geo.one_direction_only")
    if case.dependent:
        twin = _learner_projection(function, case.independent, "complement_projection(independent columns)")
        if twin is not None and not _projection_problems(twin, _twin_case(case, case.independent)):
            return tag(DEPENDENT, "geo.dependent_columns")
    if not case.orthogonal:
        twin = _learner_projection(function, case.B, "complement_projection(orthogonal columns)")
        if twin is not None and not _projection_problems(twin, _twin_case(case, case.B)):
            return tag("your P is right when the columns of V are orthogonal, and wrong here, where they are not: "
                       "removing each column's direction on its own (adding or chaining v v^T / (v . v)) counts the "
                       "overlap between columns twice. Make the columns orthonormal first (Gram-Schmidt), or use "
                       "the least-squares form V (V^T V)^+ V^T.", "geo.orthogonality_assumed")
    return None


def _twin_case(case: _Case, V: np.ndarray) -> _Case:
    twin = object.__new__(_Case)
    twin.d, twin.r, twin.k, twin.V, twin.B, twin.dependent = case.d, case.r, V.shape[1], V, case.B, False
    twin.independent = V
    return twin


DEPENDENT = ("your P is right when the columns of V are independent, and wrong here, where one column is a "
             "combination of the others: (V^T V) is then singular, and a QR or Gram-Schmidt step that keeps every "
             "column keeps a spurious direction. Drop the columns that add no new direction (a tolerance on the "
             "norm of what is left), or use a pseudo-inverse.")
PROJECTION_ATOL = 1e-9  # entries of a projection are <= 1; rounding errors are ~1e-14 even at d = 256
STANDARD_PROJECTION_CASES = (  # (d, DCT frequencies, k, seed, mixed)
    (4, [0], 1, 0, False),  # V = 1 (scaled): the centring matrix
    (6, [0, 2], 2, 1, False),  # two orthogonal columns
    (6, [1, 3], 2, 2, True),  # two independent, non-orthogonal columns
    (6, [0, 1], 3, 3, True),  # three columns spanning two directions
)


@check
def check_complement_projection(complement_projection, cases=None):
    """``complement_projection(V)`` must be the (d, d) projection onto the complement of the span of V's columns.

    Judged by properties only (symmetric, idempotent, P V = 0, trace d - r, which pin it down), on test
    matrices V = B R built from orthogonal cosine columns B, so the span and its dimension r are known.
    ``cases`` is a tuple of (d, frequencies, k, seed, mixed[, basis]), basis "dct" (the default) or "standard"
    (columns along the standard basis vectors numbered by ``frequencies``); the default runs the standard four: the
    all-ones column (the centring matrix), orthogonal, non-orthogonal and dependent columns.
    """
    report = []
    for d, frequencies, k, seed, mixed, *basis in (STANDARD_PROJECTION_CASES if cases is None else cases):
        case = _Case(d, frequencies, k, seed, mixed, *basis)
        what = f"complement_projection(V) for {case.describe()}"
        try:
            P = call_learner(complement_projection, case.V, what=what, shape_rule=SHAPE_RULES["complement_projection"])
        except LearnerError as error:
            if case.dependent and error.error_type == "LinAlgError":
                raise error.with_cause(tag(DEPENDENT, "geo.dependent_columns")) from None
            raise
        if type(P) is np.ndarray and P.shape == (k, k) and k != d:
            fail(f"{what} returned shape {P.shape}, (k, k) for k = {k} columns; expected ({d}, {d}).\n"
                 f"Likely cause: V holds its directions as columns, V[:, j], one row per feature (shape (d, k)); "
                 "your code read them as rows. The projection acts on d-vectors.", "geo.rows_for_columns")
        if case.dependent and type(P) is np.ndarray and P.shape == (d, d) and not np.all(np.isfinite(P)):
            fail(f"{what} contains non-finite values.\nLikely cause: {DEPENDENT}", "geo.dependent_columns")
        P = strict_array(P, what, (d, d))
        problems = _projection_problems(P, case)
        if problems:
            cause = _projection_cause(complement_projection, P, case)
            listed = "\n".join(f"  - P {p}" for p in problems)
            fail(f"{what} is wrong:\n{listed}\nLikely cause: "
                 f"{cause or 'compare P @ V with 0 and P @ P with P, column by column.'}", *ids_of(cause))
        report.append(f"d={d}, k={k}, r={case.r}")
    passed("complement_projection is symmetric, idempotent, sends V to 0 and keeps d - r dimensions ("
           + "; ".join(report) + ")")


# --------------------------------------------------------------------------- invariance_gap


def _close(value: float, target: float) -> bool:
    return abs(value - target) <= 1e-9 * max(1.0, abs(target))


def _gap(name: str, x: np.ndarray, a: float, c: float, eps: float) -> float:
    """max |norm(a x + c 1) - norm(x)| with torch's own norm, float64 (the oracle)."""
    return float(np.max(np.abs(oracles.norm_by_name(name, a * x + c, eps) - oracles.norm_by_name(name, x, eps))))


class _RecordingNorm:
    """The ``norm`` handed to the learner: torch's map, numpy in and out, every call recorded."""

    def __init__(self, name: str, eps: float):
        self.name, self.eps, self.calls = name, eps, []

    def __call__(self, z):
        z = np.array(z, dtype=np.float64, copy=True)
        if z.ndim == 0:  # raised inside the learner's call; run_learner lets a CheckFailed through, ids and all
            fail(f"norm was called on a single number ({z}); it maps arrays of shape (..., d). Pass it the "
                 "whole array a * x + c (and x).", "geo.norm_on_scalar")
        out = oracles.norm_by_name(self.name, z, self.eps)
        self.calls.append((z, out.copy()))
        return out

    def __repr__(self):
        return f"<{self.name} (eps={self.eps}), provided by the check>"


def _implied_affine(z: np.ndarray, x: np.ndarray) -> tuple[float, float, float]:
    """Least-squares fit z = alpha x + beta over all entries: (alpha, beta, worst residual)."""
    design = np.stack([x.ravel(), np.ones(x.size)], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, z.ravel(), rcond=None)
    residual = float(np.max(np.abs(z.ravel() - design @ np.array([alpha, beta]))))
    return float(alpha), float(beta), residual


def _full_calls(calls, x: np.ndarray) -> list:
    """The calls of the norm as (input, output) pairs of x's shape.

    Called on whole arrays: those calls. Called token by token: the tokens are put back together,
    one whole array per kind of input (each token an affine image alpha * x_i + beta of its own
    token of x, the same alpha and beta for every token), where every token of x was seen.
    """
    full = [(z, out) for z, out in calls if z.shape == x.shape]
    if full or x.ndim < 2:
        return full
    rows = x.reshape(-1, x.shape[-1])
    groups: dict = {}  # (alpha, beta) -> {token index: number of the call}
    tokens = [k for k, (z, _) in enumerate(calls) if z.shape == rows[0].shape]
    for k in tokens:
        z = calls[k][0]
        for i, row in enumerate(rows):
            alpha, beta, residual = _implied_affine(z, row)
            if residual <= 1e-9 * max(1.0, float(np.max(np.abs(z)))):
                key = next((g for g in groups if _close(g[0], alpha) and _close(g[1], beta)), (alpha, beta))
                groups.setdefault(key, {}).setdefault(i, k)
                break
    complete = [[group[i] for i in range(len(rows))] for group in groups.values() if len(group) == len(rows)]
    used = {k for piece in complete for k in piece}
    others = [k for k in tokens if k not in used]  # in the order they came
    if complete and len(others) == len(rows):  # e.g. a shift that is not a constant, token by token
        complete.append(others)
    pieces = [[calls[k] for k in piece] for piece in complete]
    return [(np.stack([z for z, _ in piece]).reshape(x.shape), np.stack([out for _, out in piece]).reshape(x.shape))
            for piece in pieces]


def _input_cause(calls, x: np.ndarray, a: float, c: float) -> str | None:
    """What the learner fed the norm, read off the recorded calls; None if it looks right."""
    if not calls:
        return tag("norm was never called. The gap compares norm(a * x + c) with norm(x): call the norm that "
                   "was passed in, on both.", "geo.norm_not_called")
    full = [z for z, _ in _full_calls(calls, x)]
    if not full:
        # Called on pieces, e.g. token by token, and not on every token.
        rows = x.reshape(-1, x.shape[-1])
        seen = {i for z, _ in calls for i, row in enumerate(rows) if z.shape == row.shape and np.array_equal(z, row)}
        if x.ndim > 1 and len(seen) < len(rows):
            first = " you looked at the first token only:" if seen == {0} else ""
            return tag(f"norm(x) was evaluated on {len(seen)} of the {len(rows)} tokens of x;{first} the gap is the "
                       "largest difference over every entry of every token.", "geo.some_tokens_only")
        return None
    scale = 1e-9 * max(1.0, float(np.max(np.abs(x))))
    fits = [_implied_affine(z, x) for z in full]
    if any(r > 1e-9 * max(1.0, float(np.max(np.abs(z)))) for (_, _, r), z in zip(fits, full, strict=True)):
        return tag("norm received an input that is not of the form alpha * x + beta: the shift c is a constant "
                   "added to every entry (c * 1, i.e. + c), not a multiple of x.", "geo.shift_not_constant")
    is_x = [_close(al, 1.0) and abs(be) <= scale for al, be, _ in fits]
    is_moved = [_close(al, a) and abs(be - c) <= scale * max(1.0, abs(c)) for al, be, _ in fits]
    if any(is_moved) and any(is_x):
        return None
    if not any(is_x):
        return tag("norm(x) itself was never evaluated: the gap is measured against norm(x), the unmoved input.",
                   "geo.reference_missing")
    others = [f for f, plain in zip(fits, is_x, strict=True) if not plain]
    if not others:
        return tag("norm was only ever called on x itself; the moved input a * x + c was never built (or was built "
                   "by changing x in place, so that both calls saw the same array).", "geo.moved_not_built")
    alpha, beta, _ = others[0]
    shown_beta = 0.0 if abs(beta) <= scale else beta
    seen = (f"(norm received {alpha:.4g} * x {'-' if shown_beta < 0 else '+'} {abs(shown_beta):.4g}; "
            f"a = {a:g}, c = {c:g})")
    if _close(alpha, a) and abs(beta) <= scale:
        return tag(f"the shift c was not added: you measured norm(a * x) against norm(x) {seen}.", "geo.shift_missing")
    if _close(alpha, 1.0) and _close(beta, c):
        return tag(f"the scale a was not applied: you measured norm(x + c) against norm(x) {seen}.",
                   "geo.scale_missing")
    if _close(alpha, a) and _close(beta, a * c):
        return tag(f"the shift was scaled too: you built a * (x + c) instead of a * x + c {seen}.", "geo.shift_scaled")
    if _close(alpha, a + c) and abs(beta) <= scale:
        return tag(f"c multiplied x instead of being added: a * x + c * x is (a + c) * x. The shift is c times the "
                   f"all-ones vector, a * x + c {seen}.", "geo.shift_times_x")
    if _close(alpha, c) and _close(beta, a):
        return tag(f"a and c are swapped: you built c * x + a instead of a * x + c {seen}.", "geo.scale_shift_swapped")
    return f"the moved input should be a * x + c {seen}."  # no classic mistake matched


def _pair(calls, x: np.ndarray):
    """(norm of the moved input, norm(x)) from the recorded calls, or None."""
    full = _full_calls(calls, x)
    plain = [out for z, out in full if np.array_equal(z, x)]
    moved = [out for z, out in full if not np.array_equal(z, x)]
    return (moved[0], plain[0]) if plain and moved else None


def _matches(gap: float, value: float, size: float) -> bool:
    # Relative to the value itself: the gaps of an invariant norm are ~1e-5 and must still be told apart.
    return abs(gap - value) <= 1e-7 * abs(value) + 1e-14 * size


SIGNED = ("you took the largest signed difference: a large negative difference is missed. "
          "Take the absolute value first: np.max(np.abs(...)).")
MAXIMA = ("you returned the difference of the two maxima; the gap is the maximum of the absolute difference, "
          "entry by entry.")
SIGNED_REVERSED = ("you took the largest signed difference of norm(x) - norm(a * x + c): take the "
                   "absolute value first, np.max(np.abs(...)).")


def _value_matches(gap: float, calls, x: np.ndarray) -> dict | None:
    """{diagnosis: id} of every summary of the learner's own difference that equals the gap returned.

    None where the gap is the right summary (the largest absolute entry) of the learner's own difference,
    or where there is no such difference to summarise.
    """
    pair = _pair(calls, x)
    if pair is None:
        return None
    u, v = pair
    diff = u - v
    size = max(1.0, float(np.max(np.abs(v))))
    if _matches(gap, float(np.max(np.abs(diff))), size):
        return None  # the right summary of the learner's own difference: the inputs are what is wrong
    summaries = [
        (float(np.max(diff)), SIGNED, "geo.abs_missing"),
        (float(np.max(-diff)), SIGNED_REVERSED, "geo.abs_missing"),
        (abs(float(np.max(diff))), SIGNED, "geo.abs_missing"),  # the absolute value after the maximum
        (abs(float(np.max(-diff))), SIGNED_REVERSED, "geo.abs_missing"),
        (float(np.mean(np.abs(diff))), "you returned the mean absolute difference; the gap is the largest one "
                                       "(np.max, not np.mean).", "geo.mean_not_max"),
        (float(np.sqrt(np.sum(diff * diff))), "you returned the Euclidean norm of the difference; the gap is its "
                                              "largest absolute entry (np.max(np.abs(...))).", "geo.euclidean_not_max"),
        (float(np.max(np.abs(u)) - np.max(np.abs(v))), "you returned the difference of the two largest entries; "
                                                        "the gap is the largest entry of the difference.",
         "geo.difference_of_maxima"),
        (float(abs(np.max(u) - np.max(v))), MAXIMA, "geo.difference_of_maxima"),
        (float(np.max(np.abs(diff)) / np.max(np.abs(v))), "you divided by the size of norm(x): the gap is the "
                                                          "absolute difference, not a relative one.",
         "geo.relative_gap"),
    ]
    if x.ndim > 1:
        summaries.append((float(np.max(np.abs(diff.reshape(-1, x.shape[-1])[0]))),
                          "you looked at the first token only: the gap is the largest difference over every "
                          "entry of every token.", "geo.some_tokens_only"))
    matched: dict = {}
    for value, cause, mistake in summaries:
        if _matches(gap, value, size):
            matched.setdefault(cause, mistake)
    return matched


def _probes(invariance_gap, name: str, eps: float, x: np.ndarray, a: float, c: float):
    """For each of four further inputs, the summaries ({diagnosis: id}, see ``_value_matches``) that match what
    the learner's function returns there; None where it returns the right summary of its own difference.

    Used where two summaries coincide on x (the signed maximum and the difference of the maxima, when both sit
    at the same entry), or where a wrong summary happens to agree with the right one (a signed maximum, when
    the largest difference is positive): on -x and on other random inputs they differ.
    """
    for probe in (-x, random_input(x.shape, seed=12345, scale=2.0, offset=0.5),
                  random_input(x.shape, seed=54321, scale=1.0, offset=-3.0),
                  random_input(x.shape, seed=999, scale=0.1, offset=-0.25)):
        recorder = _RecordingNorm(name, eps)
        try:
            value = call_learner(invariance_gap, recorder, probe, a, c, what="probe")
        except (CheckFailed, NotImplementedError):
            continue
        if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
            continue
        if value < 0:
            texts = {"geo.abs_missing": SIGNED, "geo.difference_of_maxima": MAXIMA}
            yield {texts[mistake]: mistake for mistake in _negative_matches(value, recorder.calls, probe)}
        else:
            yield _value_matches(value, recorder.calls, probe)


def _narrowed(matched: dict | None, probes) -> dict:
    """Where the gap on x names no summary, what the first probe that names one names; where several are named,
    those the further probes confirm (all of them if none is confirmed)."""
    for found in probes:
        if matched is not None and len(set(matched.values())) < 2:
            break
        if not found:
            continue
        if matched is None:
            matched = dict(found)
            continue
        ids = set(found.values())
        matched = {t: i for t, i in matched.items() if i in ids} or matched
    return matched or {}


def _value_cause(gap: float, calls, x: np.ndarray, probes=None, inputs_wrong: bool = False) -> str | None:
    """Which summary of the difference came back instead of its largest absolute entry.

    On some inputs two summaries coincide, or (when the inputs of the norm are wrong too) a wrong summary
    agrees with the right one; ``probes`` (see ``_probes``) then tell them apart, and what still cannot be
    told apart is all named.
    """
    matched = _value_matches(gap, calls, x)
    if probes is not None and ((matched is None and inputs_wrong and _pair(calls, x) is not None)
                               or (matched and len(set(matched.values())) > 1)):
        matched = _narrowed(matched, probes)
    if not matched:
        return None
    return tag(" Or: ".join(matched), *matched.values())


def _negative_matches(gap: float, calls, x: np.ndarray) -> tuple:
    """Which of the two mistakes a negative gap matches, read off the recorded calls (possibly neither)."""
    pair = _pair(calls, x)
    if pair is None:
        return ()
    u, v = pair
    size = max(1.0, float(np.max(np.abs(v))))
    signed = [float(np.max(u - v)), float(np.max(v - u))]
    maxima = [float(np.max(np.abs(u)) - np.max(np.abs(v))), float(np.max(u) - np.max(v)),
              float(np.max(np.abs(v)) - np.max(np.abs(u))), float(np.max(v) - np.max(u))]
    return (("geo.abs_missing",) if any(_matches(gap, s, size) for s in signed) else ()) + (
        ("geo.difference_of_maxima",) if any(_matches(gap, m, size) for m in maxima) else ())


def _negative_ids(gap: float, calls, x: np.ndarray, probes=()) -> tuple:
    """The mistakes a negative gap comes from: where the calls (and then the probes) tell, else both."""
    found = _negative_matches(gap, calls, x) or ("geo.abs_missing", "geo.difference_of_maxima")
    for matched in probes:
        if len(found) < 2:
            break
        ids = set((matched or {}).values())
        found = tuple(i for i in found if i in ids) or found
    return found


def _gap_value(value, what: str, x: np.ndarray, calls=(), cause: str | None = None, probes=()) -> float:
    """A Python float (np.float64 is one) and finite; arrays are named by their shape.

    For a negative gap: ``cause``, what is wrong with the inputs of the norm (``_input_cause``), is added to
    the diagnosis, and ``probes`` (see ``_probe_ids``) tell a missing abs from a difference of maxima.
    """
    if isinstance(value, np.ndarray):
        mistake = "geo.partial_reduction"
        if value.shape == x.shape[:-1] and x.ndim > 1:
            hint = ("one gap per token; the gap is the largest over all tokens too "
                    "(reduce over every axis, not axis=-1).")
        elif value.shape == x.shape:
            hint, mistake = "the elementwise differences; the gap is their largest absolute value.", "geo.no_reduction"
        elif value.ndim == 0:
            hint, mistake = "a 0-d array; return float(...) of it.", "geo.not_a_float"
        else:
            hint = "reduce it to one number, the largest absolute difference."
            if value.size == 1:  # reduced over every axis, with the axes kept
                mistake = "geo.not_a_float"
        fail(f"{what} should return one float, but returned an array of shape {value.shape}: {hint}", mistake)
    if isinstance(value, bool) or not isinstance(value, float):
        kind = type(value).__module__ + "." + type(value).__name__
        hint, mistake = "", "geo.not_a_float"
        if value is None:
            hint, mistake = " Did you forget the return statement?", "common.returned_none"
        if kind.startswith("torch"):
            hint, mistake = " Convert with float(...) or .item().", "common.torch_returned"
        elif isinstance(value, np.floating):
            hint, mistake = f" It is a {np.dtype(type(value)).name} scalar: keep float64 and return float(...).", \
                "common.wrong_dtype"
        fail(f"{what} should return a float, but returned {kind}.{hint}", mistake)
    if not math.isfinite(value):
        fail(f"{what} returned {value}; the gap of two finite arrays is finite. Look for a division by zero.",
             "common.non_finite")
    if value < 0:
        also = f"\nAlso: {cause}" if cause else ""
        fail(f"{what} returned {value:.6g} < 0: a largest absolute difference cannot be negative.\n"
             "Likely cause: np.max of the signed difference, or the difference of two maxima. "
             f"Use np.max(np.abs(...)).{also}", *_negative_ids(value, calls, x, probes), *ids_of(cause))
    return value


# input mistakes after which there is no (moved, unmoved) pair of outputs whose summary could be judged
NO_PAIR = {"geo.norm_not_called", "geo.reference_missing", "geo.moved_not_built"}
STANDARD_CASES = (
    # Two probes: the differences are -0.5 x - 1 (mostly negative) and x + 1 (mostly positive),
    # so a missing abs, a missing shift or scale, or a mean instead of a max all show.
    ("identity", 0.5, -1.0),
    ("identity", 2.0, 1.0),
    ("layer_norm", 3.0, 4.0),  # invariant: the gap is the eps effect, about 1e-6
    ("rms_norm", 3.0, 0.0),  # scale-invariant too
    ("rms_norm", 3.0, 4.0),  # but a shift moves RMSNorm
)


@check
def check_invariance_gap(invariance_gap, norm=None, a=None, c=None, shape=(3, 6), eps=1e-5, seed=0,
                         scale=1.0, offset=0.0):
    """Compare ``invariance_gap(norm, x, a, c)`` with the gap from torch's own norm (float64).

    Without ``norm``, runs the standard cases: two identity probes, LayerNorm (a = 3, c = 4),
    RMSNorm with c = 0 and with c = 4. ``norm`` is ``"layer_norm"``, ``"rms_norm"`` or
    ``"identity"``; the check hands the learner a callable that applies it (eps as given).
    """
    cases = STANDARD_CASES if norm is None else ((norm, float(a), float(c)),)
    x = random_input(tuple(shape), seed=seed, scale=scale, offset=offset)
    report = []
    for name, a_, c_ in cases:
        recorder = _RecordingNorm(name, eps)
        what = f"invariance_gap({name}, x, a={a_:g}, c={c_:g}) for x of shape {tuple(shape)}"
        value = call_learner(invariance_gap, recorder, x, a_, c_, what=what, shape_rule=SHAPE_RULES["invariance_gap"])
        if isinstance(value, float) and not isinstance(value, bool) and math.isfinite(value) and value < 0:
            input_cause = _input_cause(recorder.calls, x, a_, c_)
            input_cause = input_cause if ids_of(input_cause) else None
        else:
            input_cause = None
        gap = _gap_value(value, what, x, recorder.calls, input_cause,
                         probes=_probes(invariance_gap, name, eps, x, a_, c_))
        expected = _gap(name, x, a_, c_, eps)
        size = max(1.0, float(np.max(np.abs(oracles.norm_by_name(name, x, eps)))))
        if abs(gap - expected) > GAP_RTOL * size:
            # What went into the norm, then how its outputs were summarised: both when both are wrong.
            input_cause = _input_cause(recorder.calls, x, a_, c_)
            value_cause = None
            if not set(ids_of(input_cause)) & NO_PAIR:
                value_cause = _value_cause(gap, recorder.calls, x, _probes(invariance_gap, name, eps, x, a_, c_),
                                           inputs_wrong=bool(ids_of(input_cause)))
            if input_cause and value_cause:
                cause = tag(f"{input_cause} Also, {value_cause}", *ids_of(input_cause, value_cause))
            else:
                cause = input_cause or value_cause
            fail(f"{what} is wrong.\n  expected (torch, float64): {expected:.6g}\n  got:                       "
                 f"{gap:.6g}\nLikely cause: "
                 f"{cause or 'the gap is max |norm(a * x + c) - norm(x)| over every entry; compare step by step.'}",
                 *ids_of(cause))
        report.append(f"{name} a={a_:g} c={c_:g}: {gap:.2e}")
    passed("invariance_gap matches torch (" + "; ".join(report) + ")")


# ------------------------------------------------------------------ derivation: the squared length of x_hat
NOT_WRITTEN = ("✎ check_norm_squared: write your expression first (replace the ... in the cell above), then run this "
               "cell again.")
NORM_SQUARED_CASES = (  # (d, spread, offset, eps): ordinary tokens, a spread near sqrt(eps), a constant token
    (4, 1.0, 5.0, 1e-5), (16, 3e-3, 3.0, 1e-5), (7, 0.2, -1.0, 1e-2), (64, 1e-4, 0.5, 1e-5), (5, 0.0, 2.0, 1e-5),
)


def _norm_squared_numeric(x: np.ndarray, eps: float) -> float:
    """|x_hat|^2 of one token, from the forward pass itself (mean, biased variance, eps inside the root)."""
    centred = x - math.fsum(x) / x.size
    x_hat = centred / math.sqrt(math.fsum(centred * centred) / x.size + eps)
    return math.fsum(x_hat * x_hat)


@check
def check_norm_squared(expression):
    """Compare ``expression(x, eps)`` with |x_hat|^2 computed numerically (float64) on five tokens.

    A derivation check, not a graded one: it prints its verdict and never raises. An expression
    left at ``...`` (or returning None) is told to come first. Returns True when every case agrees.
    """
    try:
        if expression is None or expression is Ellipsis:
            print(NOT_WRITTEN)
            return False
        rng = np.random.default_rng(2024)
        for d, spread, offset, eps in NORM_SQUARED_CASES:
            direction = rng.standard_normal(d)
            x = offset + spread * (direction - direction.mean()) / direction.std()
            target = _norm_squared_numeric(x, eps)
            try:
                value = expression(x.copy(), eps)
            except Exception as error:  # noqa: BLE001 - a derivation check reports, it never stops the notebook
                print(f"✘ your expression raised {type(error).__name__}: {error} (for a token of d = {d}, "
                      f"eps = {eps:g}).")
                return False
            if value is None or value is Ellipsis:
                print(NOT_WRITTEN)
                return False
            try:
                got = float(np.asarray(value, dtype=np.float64).reshape(()))
            except (TypeError, ValueError):
                print(f"✘ your expression should give one number per token, but gave {value!r}.")
                return False
            if not math.isfinite(got):
                print(f"✘ your expression gave {got} for a token of d = {d} with spread {spread:g}, eps = {eps:g}: "
                      "a division by zero? eps keeps the denominator positive.")
                return False
            if abs(got - target) > 1e-9 * max(1.0, abs(target)):
                cause = "write it with d, the token's biased variance sigma^2 = mean((x - mu)^2) and eps."
                if abs(got - target / d) <= 1e-9 * max(1.0, target):
                    cause = "that is |x_hat|^2 / d: the squared length sums d squares, so multiply by d."
                elif abs(got - math.sqrt(target)) <= 1e-9 * max(1.0, target):
                    cause = "that is the length |x_hat|, not its square."
                elif abs(got - d) <= 1e-9 * d:
                    cause = "exactly d holds only for eps = 0; keep eps where s puts it."
                print(f"✘ for a token of d = {d} with spread sigma = {spread:g} and eps = {eps:g}: |x_hat|^2 measured "
                      f"from the forward pass is {target:.10g}, your expression gives {got:.10g}.\n  Hint: {cause}")
                return False
        print(f"✔ your expression matches |x_hat|^2 measured from the forward pass on all {len(NORM_SQUARED_CASES)} "
              "tokens (ordinary, near the noise floor, and constant).")
        return True
    except Exception as error:  # noqa: BLE001 - any error in the learner's expression is reported, not raised
        print(f"✘ check_norm_squared could not judge your expression ({type(error).__name__}: {error}).")
        return False
