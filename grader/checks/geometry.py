"""Checks for 02_geometry: the centring matrix and the invariance gap.

Oracles:

* ``centering_matrix(d)`` is judged by properties only. A real matrix that is symmetric and
  idempotent is an orthogonal projection, and an orthogonal projection is fixed by its null
  space; so "symmetric, idempotent, P 1 = 0, rank d - 1" pins down I - 1 1^T / d without the
  check ever building it. ``P x = x - mean(x)`` is then confirmed against a mean taken with
  ``math.fsum``. When it is wrong, the diagnosis reads the matrix's diagonal and
  off-diagonal entries (an alpha I + beta 1 1^T fit) and names what the two numbers imply.
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
from grader.compare import CheckFailed, call_learner, check, fail, ids_of, passed, preview, strict_array, tag
from grader.numerics import random_input, relative_error

WORKED_EXAMPLE = np.array([2.0, 4.0, 6.0, 8.0])
WORKED_CENTRED = np.array([-3.0, -1.0, 1.0, 3.0])  # the deviations, worked out by hand
PROPERTY_ATOL = 1e-10  # float64 entries of size ~1; any formula slip is >= 1/d^2 ~ 1e-5 at d = 256
GAP_RTOL = 1e-9  # relative to the size of the norm's output; rounding differences are ~1e-15
SHAPE_RULES = {  # the likely cause of a shape error raised by the learner's code
    "centering_matrix": "d is a plain int, from 1 up: the matrix has shape (d, d), e.g. np.eye(d) - np.ones((d, d)) / d.",
    "invariance_gap": "invariance_gap must accept x of any shape (..., d): build a * x + c with the same shape, call "
                      "norm on whole arrays, and reduce the difference over every axis (np.max(np.abs(...))).",
}


# --------------------------------------------------------------------------- centering_matrix


def _structure(P: np.ndarray) -> tuple[float, float] | None:
    """If P = alpha I + beta 1 1^T (to rounding), return (alpha, beta); else None (d >= 2)."""
    d = P.shape[0]
    if d < 2:
        return None
    off = P[~np.eye(d, dtype=bool)]
    beta = float(np.mean(off))
    alpha = float(np.mean(np.diag(P))) - beta
    fitted = beta * np.ones((d, d))
    fitted[np.diag_indices(d)] += alpha
    if np.max(np.abs(P - fitted)) > 1e-12 * max(1.0, abs(alpha), abs(beta) * d):
        return None
    return alpha, beta


def _close(value: float, target: float) -> bool:
    return abs(value - target) <= 1e-9 * max(1.0, abs(target))


def _centering_cause(P: np.ndarray) -> str | None:
    """Name the mistake from the entries of P: its diagonal and its off-diagonal values."""
    d = P.shape[0]
    if d == 1:
        if _close(float(P[0, 0]), 1.0):
            return tag("for d = 1 the centred vector x - mean(x) is always 0, so P must be [[0.]]; you returned "
                       "[[1.]].", "geo.d1_not_zero")
        return None
    fit = _structure(P)
    if fit is None:
        if np.max(np.abs(P - P.T)) > PROPERTY_ATOL:
            return tag("P is not symmetric, and not of the form alpha I + beta 1 1^T: every diagonal entry of "
                       "I - 1 1^T / d is 1 - 1/d and every other entry is -1/d. Print P and compare.",
                       "geo.not_symmetric")
        return tag("the entries of P are not all equal off the diagonal: every off-diagonal entry of I - 1 1^T / d "
                   "is the same number, -1/d. Print P and compare.", "geo.unequal_off_diagonal")
    alpha, beta = fit
    seen = f"(yours has {alpha + beta:.4g} on the diagonal and {beta:.4g} elsewhere)"
    known = [  # (alpha, beta), the mistakes it names, the diagnosis
        ((1.0, 0.0), ("geo.identity_returned",),
         "you returned the identity: nothing was subtracted. The mean part 1 1^T / d must be "
         "removed: P = I - 1 1^T / d."),
        ((0.0, 1.0 / d), ("geo.mean_projector",),
         "you returned 1 1^T / d, the projection onto 1: it maps x to mean(x) * 1, the part "
         "that centring removes. Subtract it from the identity: P = I - 1 1^T / d."),
        # the same matrix as np.eye(d) - np.ones(d) @ np.ones(d) / d: both mistakes are named
        ((1.0, -1.0), ("geo.missing_one_over_d", "geo.inner_product"),
         f"every off-diagonal entry is -1 instead of -1/d = {-1 / d:.4g}: the 1/d is missing. "
         "Note also that np.ones(d) @ np.ones(d) is the inner product (the number d), not the "
         "outer product; use np.outer(np.ones(d), np.ones(d)) / d or np.ones((d, d)) / d."),
        ((1.0, -float(d)), ("geo.inner_product", "geo.missing_one_over_d"),
         "every off-diagonal entry is -d: np.ones(d) @ np.ones(d) is the inner product (the "
         "number d), not the outer product 1 1^T, and the 1/d is missing. Use "
         "np.ones((d, d)) / d."),
        ((1.0, -1.0 / d**2), ("geo.divided_twice",),
         "the off-diagonal entries are -1/d^2: you divided by d twice (the mean already "
         "has its 1/d; 1 1^T / d needs no second one)."),
        ((1.0, -1.0 / (d - 1)) if d > 1 else (math.nan, math.nan), ("geo.d_minus_one",),
         "the off-diagonal entries are -1/(d-1): a d - 1 where d belongs (the mean divides by d)."),
        ((1.0 - 1.0 / d, 0.0), ("geo.diagonal_only",),
         "only the diagonal was changed (1 - 1/d on it, 0 elsewhere): every off-diagonal "
         "entry must be -1/d, because each output x_i - mean(x) depends on all inputs."),
        ((-1.0, 1.0 / d), ("geo.sign_flipped",),
         "the sign is flipped: you returned 1 1^T / d - I instead of I - 1 1^T / d."),
    ]
    for (a_known, b_known), mistakes, cause in known:
        if _close(alpha, a_known) and _close(beta, b_known):
            return tag(f"{cause} {seen}", *mistakes)
    if _close(alpha, 1.0):
        return tag(f"P = I + ({beta:.4g}) 1 1^T, but the coefficient of 1 1^T must be -1/d = {-1 / d:.4g}. "
                   "Check the factor in front of the outer product.", "geo.wrong_coefficient")
    return (f"P should be I - 1 1^T / d, with 1 - 1/d = {1 - 1 / d:.4g} on the diagonal and -1/d = {-1 / d:.4g} "
            f"elsewhere {seen}.")


@check
def check_centering_matrix(centering_matrix, d=4, seed=0):
    """``centering_matrix(d)`` must be the (d, d) float64 projection I - 1 1^T / d.

    Checks: symmetric, idempotent, P 1 = 0, rank d - 1, and P x = x - mean(x) for a random x
    with an offset (and for the worked example (2, 4, 6, 8) when d = 4).
    """
    d = int(d)
    what = f"centering_matrix({d})"
    P = call_learner(centering_matrix, d, what=what, shape_rule=SHAPE_RULES["centering_matrix"])
    if type(P) is np.ndarray and P.shape == (d,) and d > 1:
        fail(f"{what} returned a vector of shape ({d},), expected the ({d}, {d}) matrix.\nLikely cause: "
             "np.ones(d) is the vector 1; the matrix 1 1^T is np.outer(np.ones(d), np.ones(d)) or "
             "np.ones((d, d)).", "geo.vector_for_matrix")
    P = strict_array(P, what, (d, d))
    cause = _centering_cause(P)
    ones = np.ones(d)
    problems = [
        (np.max(np.abs(P - P.T)), "is not symmetric (P != P.T)",
         "an orthogonal projection equals its transpose."),
        (np.max(np.abs(P @ ones)), "does not send 1 to 0 (P @ ones(d) != 0)",
         "centring a constant vector must give 0: print(P @ np.ones(d))."),
        (np.max(np.abs(P @ P - P)), "is not idempotent (P @ P != P)",
         "centring twice must change nothing: print(P @ P - P)."),
    ]
    for error, property_, meaning in problems:
        if error > PROPERTY_ATOL:
            fail(f"{what} {property_}: largest error {error:.3g}; {meaning}\n"
                 f"Likely cause: {cause or 'compare your entries with 1 - 1/d on the diagonal and -1/d elsewhere.'}",
                 *ids_of(cause))
    rank = int(np.linalg.matrix_rank(P, tol=1e-8))
    if rank != d - 1:
        fail(f"{what} has rank {rank}, expected d - 1 = {d - 1}: centring removes exactly one direction, 1.\n"
             f"Likely cause: {cause or 'a term is missing or mis-scaled.'}", *ids_of(cause))
    cases = [random_input((d,), seed=seed, scale=2.0, offset=7.0)]
    if d == 4:
        cases.insert(0, WORKED_EXAMPLE)
    for x in cases:
        mean = math.fsum(x) / d  # the high-precision mean, not numpy's
        expected = WORKED_CENTRED if x is WORKED_EXAMPLE else x - mean
        got = P @ x
        if relative_error(got, expected, floor=1.0) > 1e-10:
            fail(f"{what} @ x should be x - mean(x).\n  x:        {preview(x)}\n  expected: {preview(expected)}\n"
                 f"  got:      {preview(got)}\nLikely cause: {cause or 'a term is mis-scaled.'}", *ids_of(cause))
    passed(f"centering_matrix({d}) is symmetric, idempotent, kills 1, has rank {d - 1} and maps x to x - mean(x)")


# --------------------------------------------------------------------------- invariance_gap


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
    if any(r > 1e-9 * max(1.0, float(np.max(np.abs(z)))) for (_, _, r), z in zip(fits, full)):
        return tag("norm received an input that is not of the form alpha * x + beta: the shift c is a constant "
                   "added to every entry (c * 1, i.e. + c), not a multiple of x.", "geo.shift_not_constant")
    is_x = [_close(al, 1.0) and abs(be) <= scale for al, be, _ in fits]
    is_moved = [_close(al, a) and abs(be - c) <= scale * max(1.0, abs(c)) for al, be, _ in fits]
    if any(is_moved) and any(is_x):
        return None
    if not any(is_x):
        return tag("norm(x) itself was never evaluated: the gap is measured against norm(x), the unmoved input.",
                   "geo.reference_missing")
    others = [f for f, plain in zip(fits, is_x) if not plain]
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
NOT_WRITTEN = "✎ check_norm_squared: write your expression first (replace the ... in the cell above), then run this cell again."
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
                print(f"✘ your expression raised {type(error).__name__}: {error} (for a token of d = {d}, eps = {eps:g}).")
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
    except Exception as error:  # noqa: BLE001
        print(f"✘ check_norm_squared could not judge your expression ({type(error).__name__}: {error}).")
        return False
