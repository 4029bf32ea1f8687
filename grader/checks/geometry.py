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
  difference was returned instead of its largest absolute entry.
"""
from __future__ import annotations

import math

import numpy as np

from grader import oracles
from grader.compare import call_learner, check, fail, passed, preview, strict_array
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
            return "for d = 1 the centred vector x - mean(x) is always 0, so P must be [[0.]]; you returned [[1.]]."
        return None
    fit = _structure(P)
    if fit is None:
        if np.max(np.abs(P - P.T)) > PROPERTY_ATOL:
            return ("P is not symmetric, and not of the form alpha I + beta 1 1^T: every diagonal entry of "
                    "I - 1 1^T / d is 1 - 1/d and every other entry is -1/d. Print P and compare.")
        return ("the entries of P are not all equal off the diagonal: every off-diagonal entry of I - 1 1^T / d "
                "is the same number, -1/d. Print P and compare.")
    alpha, beta = fit
    seen = f"(yours has {alpha + beta:.4g} on the diagonal and {beta:.4g} elsewhere)"
    known = [
        ((1.0, 0.0), "you returned the identity: nothing was subtracted. The mean part 1 1^T / d must be "
                     "removed: P = I - 1 1^T / d."),
        ((0.0, 1.0 / d), "you returned 1 1^T / d, the projection onto 1: it maps x to mean(x) * 1, the part "
                         "that centring removes. Subtract it from the identity: P = I - 1 1^T / d."),
        ((1.0, -1.0), f"every off-diagonal entry is -1 instead of -1/d = {-1 / d:.4g}: the 1/d is missing. "
                      "Note also that np.ones(d) @ np.ones(d) is the inner product (the number d), not the "
                      "outer product; use np.outer(np.ones(d), np.ones(d)) / d or np.ones((d, d)) / d."),
        ((1.0, -float(d)), "every off-diagonal entry is -d: np.ones(d) @ np.ones(d) is the inner product (the "
                           "number d), not the outer product 1 1^T, and the 1/d is missing. Use "
                           "np.ones((d, d)) / d."),
        ((1.0, -1.0 / d**2), "the off-diagonal entries are -1/d^2: you divided by d twice (the mean already "
                             "has its 1/d; 1 1^T / d needs no second one)."),
        ((1.0, -1.0 / (d - 1)) if d > 1 else (math.nan, math.nan),
         "the off-diagonal entries are -1/(d-1): a d - 1 where d belongs (the mean divides by d)."),
        ((1.0 - 1.0 / d, 0.0), "only the diagonal was changed (1 - 1/d on it, 0 elsewhere): every off-diagonal "
                               "entry must be -1/d, because each output x_i - mean(x) depends on all inputs."),
        ((-1.0, 1.0 / d), "the sign is flipped: you returned 1 1^T / d - I instead of I - 1 1^T / d."),
    ]
    for (a_known, b_known), cause in known:
        if _close(alpha, a_known) and _close(beta, b_known):
            return f"{cause} {seen}"
    if _close(alpha, 1.0):
        return (f"P = I + ({beta:.4g}) 1 1^T, but the coefficient of 1 1^T must be -1/d = {-1 / d:.4g}. "
                "Check the factor in front of the outer product.")
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
             "np.ones((d, d)).")
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
                 f"Likely cause: {cause or 'compare your entries with 1 - 1/d on the diagonal and -1/d elsewhere.'}")
    rank = int(np.linalg.matrix_rank(P, tol=1e-8))
    if rank != d - 1:
        fail(f"{what} has rank {rank}, expected d - 1 = {d - 1}: centring removes exactly one direction, 1.\n"
             f"Likely cause: {cause or 'a term is missing or mis-scaled.'}")
    cases = [random_input((d,), seed=seed, scale=2.0, offset=7.0)]
    if d == 4:
        cases.insert(0, WORKED_EXAMPLE)
    for x in cases:
        mean = math.fsum(x) / d  # the high-precision mean, not numpy's
        expected = WORKED_CENTRED if x is WORKED_EXAMPLE else x - mean
        got = P @ x
        if relative_error(got, expected, floor=1.0) > 1e-10:
            fail(f"{what} @ x should be x - mean(x).\n  x:        {preview(x)}\n  expected: {preview(expected)}\n"
                 f"  got:      {preview(got)}\nLikely cause: {cause or 'a term is mis-scaled.'}")
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
        if z.ndim == 0:
            fail(f"norm was called on a single number ({z}); it maps arrays of shape (..., d). Pass it the "
                 "whole array a * x + c (and x).")
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


def _input_cause(calls, x: np.ndarray, a: float, c: float) -> str | None:
    """What the learner fed the norm, read off the recorded calls; None if it looks right."""
    if not calls:
        return ("norm was never called. The gap compares norm(a * x + c) with norm(x): call the norm that "
                "was passed in, on both.")
    full = [z for z, _ in calls if z.shape == x.shape]
    if not full:
        # Called on pieces, e.g. token by token: fine if every token of x was normalised.
        rows = x.reshape(-1, x.shape[-1])
        seen = {i for z, _ in calls for i, row in enumerate(rows) if z.shape == row.shape and np.array_equal(z, row)}
        if x.ndim > 1 and len(seen) < len(rows):
            first = " you looked at the first token only:" if seen == {0} else ""
            return (f"norm(x) was evaluated on {len(seen)} of the {len(rows)} tokens of x;{first} the gap is the "
                    "largest difference over every entry of every token.")
        return None
    scale = 1e-9 * max(1.0, float(np.max(np.abs(x))))
    fits = [_implied_affine(z, x) for z in full]
    if any(r > 1e-9 * max(1.0, float(np.max(np.abs(z)))) for (_, _, r), z in zip(fits, full)):
        return ("norm received an input that is not of the form alpha * x + beta: the shift c is a constant added "
                "to every entry (c * 1, i.e. + c), not a multiple of x.")
    is_x = [_close(al, 1.0) and abs(be) <= scale for al, be, _ in fits]
    is_moved = [_close(al, a) and abs(be - c) <= scale * max(1.0, abs(c)) for al, be, _ in fits]
    if any(is_moved) and any(is_x):
        return None
    if not any(is_x):
        return "norm(x) itself was never evaluated: the gap is measured against norm(x), the unmoved input."
    others = [f for f, plain in zip(fits, is_x) if not plain]
    if not others:
        return ("norm was only ever called on x itself; the moved input a * x + c was never built (or was built "
                "by changing x in place, so that both calls saw the same array).")
    alpha, beta, _ = others[0]
    shown_beta = 0.0 if abs(beta) <= scale else beta
    seen = (f"(norm received {alpha:.4g} * x {'-' if shown_beta < 0 else '+'} {abs(shown_beta):.4g}; "
            f"a = {a:g}, c = {c:g})")
    if _close(alpha, a) and abs(beta) <= scale:
        return f"the shift c was not added: you measured norm(a * x) against norm(x) {seen}."
    if _close(alpha, 1.0) and _close(beta, c):
        return f"the scale a was not applied: you measured norm(x + c) against norm(x) {seen}."
    if _close(alpha, a) and _close(beta, a * c):
        return f"the shift was scaled too: you built a * (x + c) instead of a * x + c {seen}."
    if _close(alpha, a + c) and abs(beta) <= scale:
        return (f"c multiplied x instead of being added: a * x + c * x is (a + c) * x. The shift is c times the "
                f"all-ones vector, a * x + c {seen}.")
    if _close(alpha, c) and _close(beta, a):
        return f"a and c are swapped: you built c * x + a instead of a * x + c {seen}."
    return f"the moved input should be a * x + c {seen}."


def _value_cause(gap: float, calls, x: np.ndarray) -> str | None:
    """Which summary of the difference came back instead of its largest absolute entry."""
    full = [(z, out) for z, out in calls if z.shape == x.shape]
    plain = [out for z, out in full if np.array_equal(z, x)]
    moved = [out for z, out in full if not np.array_equal(z, x)]
    if not plain or not moved:
        return None
    u, v = moved[0], plain[0]
    diff = u - v
    summaries = [
        (float(np.max(diff)), "you took the largest signed difference: a large negative difference is missed. "
                              "Take the absolute value first: np.max(np.abs(...))."),
        (float(np.max(-diff)), "you took the largest signed difference of norm(x) - norm(a * x + c): take the "
                               "absolute value first, np.max(np.abs(...))."),
        (float(np.mean(np.abs(diff))), "you returned the mean absolute difference; the gap is the largest one "
                                       "(np.max, not np.mean)."),
        (float(np.sqrt(np.sum(diff * diff))), "you returned the Euclidean norm of the difference; the gap is its "
                                              "largest absolute entry (np.max(np.abs(...)))."),
        (float(np.max(np.abs(u)) - np.max(np.abs(v))), "you returned the difference of the two largest entries; "
                                                        "the gap is the largest entry of the difference."),
        (float(abs(np.max(u) - np.max(v))), "you returned the difference of the two maxima; the gap is the "
                                            "maximum of the absolute difference, entry by entry."),
        (float(np.max(np.abs(diff)) / np.max(np.abs(v))), "you divided by the size of norm(x): the gap is the "
                                                          "absolute difference, not a relative one."),
    ]
    if x.ndim > 1:
        summaries.append((float(np.max(np.abs(diff.reshape(-1, x.shape[-1])[0]))),
                          "you looked at the first token only: the gap is the largest difference over every "
                          "entry of every token."))
    size = max(1.0, float(np.max(np.abs(v))))
    # Relative to the value itself: the gaps of an invariant norm are ~1e-5 and must still be told
    # apart. On some inputs two summaries coincide (the signed maximum and the difference of the
    # maxima, when both sit at the same entry); then every matching cause is named.
    causes = [cause for value, cause in summaries if abs(gap - value) <= 1e-7 * abs(value) + 1e-14 * size]
    return " Or: ".join(causes) if causes else None


def _gap_value(value, what: str, x: np.ndarray) -> float:
    """A Python float (np.float64 is one) and finite; arrays are named by their shape."""
    if isinstance(value, np.ndarray):
        if value.shape == x.shape[:-1] and x.ndim > 1:
            hint = ("one gap per token; the gap is the largest over all tokens too "
                    "(reduce over every axis, not axis=-1).")
        elif value.shape == x.shape:
            hint = "the elementwise differences; the gap is their largest absolute value."
        elif value.ndim == 0:
            hint = "a 0-d array; return float(...) of it."
        else:
            hint = "reduce it to one number, the largest absolute difference."
        fail(f"{what} should return one float, but returned an array of shape {value.shape}: {hint}")
    if isinstance(value, bool) or not isinstance(value, float):
        kind = type(value).__module__ + "." + type(value).__name__
        hint = " Did you forget the return statement?" if value is None else ""
        if kind.startswith("torch"):
            hint = " Convert with float(...) or .item()."
        elif isinstance(value, np.floating):
            hint = f" It is a {np.dtype(type(value)).name} scalar: keep float64 and return float(...)."
        fail(f"{what} should return a float, but returned {kind}.{hint}")
    if not math.isfinite(value):
        fail(f"{what} returned {value}; the gap of two finite arrays is finite. Look for a division by zero.")
    if value < 0:
        fail(f"{what} returned {value:.6g} < 0: a largest absolute difference cannot be negative.\n"
             "Likely cause: np.max of the signed difference, or the difference of two maxima. "
             "Use np.max(np.abs(...)).")
    return value


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
        gap = _gap_value(call_learner(invariance_gap, recorder, x, a_, c_, what=what,
                                      shape_rule=SHAPE_RULES["invariance_gap"]), what, x)
        expected = _gap(name, x, a_, c_, eps)
        size = max(1.0, float(np.max(np.abs(oracles.norm_by_name(name, x, eps)))))
        if abs(gap - expected) > GAP_RTOL * size:
            cause = _input_cause(recorder.calls, x, a_, c_) or _value_cause(gap, recorder.calls, x)
            fail(f"{what} is wrong.\n  expected (torch, float64): {expected:.6g}\n  got:                       "
                 f"{gap:.6g}\nLikely cause: "
                 f"{cause or 'the gap is max |norm(a * x + c) - norm(x)| over every entry; compare step by step.'}")
        report.append(f"{name} a={a_:g} c={c_:g}: {gap:.2e}")
    passed("invariance_gap matches torch (" + "; ".join(report) + ")")
