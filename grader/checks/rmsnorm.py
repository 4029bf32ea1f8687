"""Checks for 04_rmsnorm: RMSNorm forward and backward, for inputs of shape (..., d).

Oracles: ``torch.nn.functional.rms_norm`` and autograd in float64 (private helpers
below), float64 central differences of the learner's own forward, and high-precision
statistics (the mean of squares in float64). Nothing here computes RMSNorm by hand.

When an answer is wrong, the diagnosis comes from properties of what came back:

* the *implied scale* gamma * x / y, which must be one number per token (its r);
  matching it against statistics names the mistake (eps outside the square root, eps
  ignored, a sum instead of a mean, the standard deviation, the wrong axis, keepdims);
* sums along the features (LayerNorm's outputs and gradients sum to zero, RMSNorm's do not);
* for the backward, a probe gradient perpendicular to x (it must come back divided by r
  and nothing else) and the component of dx along x_hat (it must be almost zero);
* the size of the error (float32 or half-precision arithmetic leaves a typical level).
"""
from __future__ import annotations

import numpy as np

from grader import oracles
from grader.checks._scales import Map, Statistic, describe, explain_scale, simplest
from grader.compare import (
    LearnerError,
    Probe,
    assert_close,
    call_learner,
    check,
    fail,
    ids_of,
    passed,
    strict_array,
    tag,
)
from grader.numerics import random_input, relative_error

WORKED_EXAMPLE = np.array([2.0, 4.0, 6.0, 8.0])
RTOL = {np.dtype(np.float64): 1e-9,   # float64 formulas agree to ~1e-14; 1e-9 leaves room, float32 does not fit
        np.dtype(np.float32): 1e-5}   # float32 arithmetic lands near 1e-7; float16/bfloat16 statistics near 1e-3
MATCH = {np.dtype(np.float64): 1e-11,  # how closely an implied quantity must match a candidate to name it
         np.dtype(np.float32): 1e-4}
FD_RTOL = 1e-6                        # central differences of a float64 forward: good to ~1e-9 relative
SHAPE_RULE = ("your function must accept any shape (..., d): (d,), (T, d), (B, T, d) and more. Reduce over the "
              "last axis (axis=-1, keepdims=True), sum dgamma over every leading axis (axis=tuple(range(x.ndim - 1))), "
              "and keep the leading axes as they are, whatever their number.")


def _mean_square(x):
    """Per-token mean of squares in float64, shape (..., 1): a statistic, not the exercise."""
    x = np.asarray(x, dtype=np.float64)
    return np.mean(x * x, axis=-1, keepdims=True)


# ---------------------------------------------------------------------------- inputs
def _gamma(d, seed):
    """A gain that is far from uniform, has both signs and stays away from zero."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 2.0, d) * rng.choice([-1.0, 1.0], d, p=[0.25, 0.75])


def _input(shape, seed, scale, offset, tiny_rows):
    x = random_input(shape, seed=seed, scale=scale, offset=offset)
    if tiny_rows and len(shape) > 1:
        tokens = int(np.prod(shape[:-1]))
        # token scales from 1e-6 to 10: the smallest rows have a mean square far below eps
        x = x * np.logspace(-6, 1, tokens).reshape(shape[:-1] + (1,))
    return x


# ---------------------------------------------------------------------------- calling
def _call(function, *args, what, **kwargs):
    """call_learner, with numpy's broadcasting and axis errors diagnosed for RMSNorm."""
    try:
        return call_learner(function, *args, what=what, shape_rule=SHAPE_RULE, **kwargs)
    except LearnerError as error:  # matched by message: under isolated grading numpy's AxisError arrives renamed
        text = error.error_message
        if "could not be broadcast" in text:
            raise error.with_cause(tag("a reduction over the features lost its axis. Reduce with axis=-1, "
                                       "keepdims=True, so that r has shape (..., 1) and divides every feature of its "
                                       "own token.", "rms.keepdims_missing")) from None
        if "must match the size of tensor" in text:  # torch's broadcasting error
            raise error.with_cause(tag("a reduction over the features lost its dim. Reduce with dim=-1, keepdim=True, "
                                       "so that r has shape (..., 1) and divides every feature of its own token.",
                                       "rms.keepdims_missing")) from None
        if "is out of bounds for array of dimension" in text:
            raise error.with_cause(tag("a fixed axis number such as axis=1 or axis=2. Use axis=-1 (the features are "
                                       "always the last axis), so that the same code works for (d,), (T, d) and "
                                       "(B, T, d). " + SHAPE_RULE, "common.fixed_rank")) from None
        raise


def _strict(value, what, shape, dtype):
    """strict_array with messages about float32 in -> float32 out."""
    dtype = np.dtype(dtype)
    if isinstance(value, np.ndarray) and value.dtype != dtype and value.dtype.kind == "f":
        if dtype == np.float32 and value.dtype == np.float64:
            fail(f"{what} returned dtype float64 for a float32 input; float32 in must give float32 out.\n"
                 "Likely cause: computing the statistics in float64 is fine (it is the upcast LLaMA's RMSNorm does), "
                 "but the result must be cast back: return (...).astype(x.dtype). A float64 gamma or a "
                 "np.float64 constant also promotes the result.", "rms.no_cast_back")
        if dtype == np.float64 and value.dtype in (np.float32, np.float16):
            fail(f"{what} returned dtype {value.dtype} for a float64 input.\n"
                 f"Likely cause: a cast to {value.dtype} (x.astype(np.{value.dtype}) or a torch float32 tensor). "
                 "Keep the input's precision: the result must have x's dtype.", "common.wrong_dtype")
    return strict_array(value, what, shape, dtype)


def _allclose_rel(a, b, tol):
    """Every entry of a within a relative tol of b (b nonzero), same shape."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return bool(a.size) and bool(np.all(np.abs(a - b) <= tol * np.abs(b)))


def _float32_evidence(y, x, gamma, eps):
    """Whether some stage of the learner's forward is exactly a float32 number: the output, the r it divided by
    (gamma * x / y), the mean square under it (r**2 - eps), the sum of squares (d times that) or the gain it
    applied (y / x_hat).

    A float64 computation lands on a float32 value with probability ~1e-9 per entry, so this tells float32
    rounding apart from a formula that is off by the same small amount (a hard-coded eps, say).
    """
    with np.errstate(all="ignore"):
        implied = gamma * x / y
        gain = y / oracles.rms_norm(x, eps)
        square = implied * implied - eps
        stages = (y, implied, square, square * x.shape[-1], gain)  # the mean square, or the sum of squares
    for stage in stages:
        stage = np.asarray(stage, dtype=np.float64)
        stage = stage[np.isfinite(stage) & (stage != 0) & (np.abs(stage) < 1e30)]
        if stage.size and np.all(np.abs(stage - stage.astype(np.float32)) <= 1e-12 * np.abs(stage)):
            return True
    return False


def _precision_cause(error, dtype, float32_evidence=True):
    if dtype == np.float64 and error < 1e-5:
        if not float32_evidence:
            return None
        return tag(f"the error ({error:.1e}) is the size of float32 rounding, not a formula mistake: part of your "
                   "computation ran in float32 (np.float32, .astype, or a torch tensor created in float32). "
                   "Keep float64 for a float64 input.", "rms.float32_inside")
    if error < 5e-2:
        return tag(f"the error ({error:.1e}) is the size of half-precision rounding (float16 keeps 11 significant "
                   "bits, bfloat16 8): the statistics were computed or accumulated in float16/bfloat16. Compute the "
                   "mean of squares in float32 at least (upcast, normalise, cast back).",
                   "rms.low_precision_statistics")
    return None


# ---------------------------------------------------------------------------- forward
GAMMA_MISSING = tag("gamma was not applied: multiply the normalised x by gamma (one gain per feature).",
                    "rms.gamma_missing")
GAMMA_TWICE = tag("gamma was applied twice: the output is gamma * x / r, with gamma once.", "rms.gamma_twice")
# the same, found by calling again with a non-uniform gamma where the input has gamma = 1 (_gain_probe)
PROBED_GAMMA_MISSING = tag("gamma was not applied (called again with a non-uniform gamma, your output did not "
                           "change): multiply the normalised x by gamma (one gain per feature).", "rms.gamma_missing")
PROBED_GAMMA_TWICE = tag("gamma was applied twice (called again with a non-uniform gamma, your output changed by "
                         "gamma**2): the output is gamma * x / r, with gamma once.", "rms.gamma_twice")
ROUND_MANTISSAS = np.arange(1, 11)  # 10: a c just below a power of ten


def _is_round(value):
    """Whether value is m * 10**k for a digit m, to 1e-4: the eps a learner would type in."""
    if not value > 0:
        return False
    exponent = np.floor(np.log10(value))
    mantissa = value / 10.0 ** exponent
    return bool(np.min(np.abs(ROUND_MANTISSAS - mantissa)) <= 1e-4 * mantissa)


def _hard_coded_eps(r, ms, eps, tol, alone_ok):
    """The c of r = sqrt(ms + c), one c for every token, when c is not the eps passed; else None.

    ``r``, ``ms``: per token. With a single token any r fits some c, so then only a round c (1e-5,
    1e-8, ...) counts, and only when nothing points at float32 arithmetic (``alone_ok``).
    """
    c = float(np.median(r * r - ms))
    if not c > 0 or abs(c - eps) <= 1e-6 * max(c, eps):
        return None
    if not _allclose_rel(r, np.sqrt(ms + c), tol):
        return None
    distinct = np.unique(np.round(ms / np.max(ms), 9)).size
    if distinct >= 2 or (alone_ok and _is_round(c)):
        return c
    return None


def _implied_scale_cause(y, x, gamma, eps, tol, known_gain=None, float32_evidence=False):
    """Read the learner's r off gamma * x / y and name it if it is a classic wrong one.

    ``known_gain``: the gain mistakes already found (by ``_gain_probe``, when gamma is uniform here);
    otherwise, for a non-uniform gamma, the r is also read off x / y and gamma**2 * x / y, so that a
    wrong r *and* a wrong gain are both named.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        implied = gamma * x / y
    mask = (np.abs(y) > 0) & (np.abs(x) > 0) & np.isfinite(implied)
    if mask.sum() < max(1, x.size // 2):
        return None
    d = x.shape[-1]
    ms = _mean_square(x)
    summed = tag(f"you summed the squares instead of averaging them, so your r is sqrt(d) = {np.sqrt(d):.4g} times too "
              "large (np.sum where np.mean belongs, or the Euclidean norm np.linalg.norm(x)). RMSNorm divides by the "
              "root MEAN square, so its output has squared norm about d, not 1.", "rms.sum_not_mean")
    centred = x - x.mean(axis=-1, keepdims=True)
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    # Every statistic x every map to r (grader.checks._scales): two mistakes at once are both named.
    def statistic(value, *mistakes):
        return Statistic(np.broadcast_to(value, x.shape)[mask], list(mistakes))

    statistics = [
        statistic(ms),
        statistic(d * ms, summed),
        statistic(var, tag("you divided by the standard deviation (a variance around the mean). RMSNorm's statistic "
                           "is the mean of the squares of x itself: no mean is subtracted anywhere.",
                           "rms.variance_not_mean_square")),
        statistic(var * d / max(d - 1, 1), tag("you divided by the unbiased standard deviation. RMSNorm's statistic "
                                               "is sqrt(mean(x**2) + eps), with no mean and no d - 1.",
                                               "rms.variance_not_mean_square", "rms.unbiased_variance")),
    ]
    no_sqrt = tag("you divided by the mean square itself: the square root is missing.", "rms.sqrt_missing")
    ignored = tag(f"eps is ignored: your r is sqrt(mean(x**2)) but eps = {eps} was passed. Use sqrt(mean(x**2) + eps).",
                  "rms.eps_ignored")
    maps = [
        Map(lambda v: np.sqrt(v + eps)),
        Map(lambda v: np.sqrt(v) + eps, [tag("eps is outside the square root: r must be sqrt(mean(x**2) + eps), "
                                             "not sqrt(mean(x**2)) + eps. Rows with a small mean square show it most.",
                                             "rms.eps_outside_sqrt")]),
        Map(lambda v: v + eps, [no_sqrt]),
    ]
    if eps > 0:
        maps += [Map(lambda v: np.sqrt(v), [ignored]), Map(lambda v: v, [no_sqrt, ignored])]
    if known_gain is not None:
        gains = [(gamma, list(known_gain))]
    elif not np.allclose(gamma, 1.0) and np.all(gamma != 0):
        gains = [(gamma, []), (np.ones_like(gamma), [GAMMA_MISSING]), (gamma * gamma, [GAMMA_TWICE])]
    else:
        gains = [(gamma, [])]
    found = []
    for gain, gain_mistakes in gains:
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = (gain * x / y)[mask]
        explanations = explain_scale(scale, statistics, maps, tol)
        if explanations is not None:
            found += [gain_mistakes + mistakes for mistakes in explanations]
    if found:
        return describe(simplest(found))
    candidates = []
    candidates.append((np.full_like(ms, np.sqrt(np.mean(x * x) + eps)),
                       tag("one r for the whole array: the mean of squares was taken over every axis. Each token "
                           "needs its own r: np.mean(x**2, axis=-1, keepdims=True).", "rms.global_statistic")))
    for axis in range(x.ndim - 1):
        other = np.sqrt(np.mean(x * x, axis=axis, keepdims=True) + eps)
        candidates.append((other, tag(f"the mean of squares was taken over axis {axis} (across tokens) instead of "
                                      "the features. Use axis=-1, keepdims=True: each token is normalised by itself.",
                                      "rms.wrong_axis")))
    if x.ndim == 2 and x.shape[0] == d:
        rows = np.sqrt(np.mean(x * x, axis=-1) + eps)  # shape (n,), broadcast along the features
        candidates.append((np.broadcast_to(rows, x.shape), tag(
            "keepdims=True is missing: your r has shape (n,) and numpy broadcast it along the features, so feature j "
            "was divided by token j's r. Reduce with axis=-1, keepdims=True.", "rms.keepdims_missing")))
    for candidate, cause in candidates:
        candidate = np.broadcast_to(candidate, x.shape)
        if _allclose_rel(implied[mask], candidate[mask], tol):
            return cause
    if not np.all(mask.any(axis=-1)):
        return None
    largest = np.max(np.where(mask, implied, -np.inf), axis=-1)
    smallest = np.min(np.where(mask, implied, np.inf), axis=-1)
    if not np.all(smallest > 0):
        return None
    if np.max(largest / smallest - 1) <= tol:  # one r per token: is it sqrt(mean(x**2) + c) for a c of the learner's?
        c = _hard_coded_eps(largest.ravel(), ms.ravel(), eps, tol, alone_ok=not float32_evidence)
        if c is not None:
            return tag(f"eps is ignored: your r is sqrt(mean(x**2) + {c:.3g}) although eps = {eps} was passed (a "
                       "hard-coded epsilon?). Use the eps argument: sqrt(mean(x**2) + eps).", "rms.eps_ignored")
    true_r = np.sqrt(ms[..., 0] + eps)
    if np.max(largest / smallest - 1) <= 1e-3 and np.all(largest < true_r * (1 - 1e-3)):
        shortfall = 100 * float(np.max(1 - smallest / true_r))
        return tag(f"your r is one number per token, as it should be, but too small (by up to {shortfall:.3g} %): "
                   "the sum of squares lost terms. That is what a running sum in a low precision does: in bfloat16 "
                   "(8 significant bits) it stops growing once the total is about 256 times the next term. "
                   "Accumulate in float32 or wider (upcast, normalise, cast back).", "rms.low_precision_statistics")
    if np.max(largest / smallest - 1) > 5e-2:  # beyond half-precision rounding of y (bfloat16: ~4e-3)
        return tag("gamma * x / y is not one number per token: every feature of a token must be divided by the same "
                   "r. Check the axis of the reduction (axis=-1, keepdims=True) and that nothing else depends on the "
                   "feature index. See it: print(gamma * x / rms_norm(x, gamma)).", "rms.scale_not_per_token")
    return None


def _forward_cause(y, x, gamma, eps, expected, dtype, known_gain=None):
    tol = MATCH[np.dtype(dtype)]
    d = x.shape[-1]
    if d > 1 and np.all(gamma != 0):
        per_token = y / gamma
        size = float(np.max(np.abs(per_token))) or 1.0
        zero_sum = np.max(np.abs(np.sum(per_token, axis=-1))) <= 1e-6 * size * d
        reference_sum = np.max(np.abs(np.sum(expected / gamma, axis=-1))) > 1e-3 * size
        if zero_sum and reference_sum:
            return tag("your outputs (divided by gamma) sum to zero over each token's features: you subtracted the "
                       "mean. That is LayerNorm; RMSNorm keeps the mean and divides x itself by "
                       "sqrt(mean(x**2) + eps).",
                       "rms.mean_subtracted")
    if not np.allclose(gamma, 1.0) and np.all(gamma != 0):
        if _allclose_rel(y[expected != 0], (expected / gamma)[expected != 0], tol):
            return GAMMA_MISSING
        if _allclose_rel(y[expected != 0], (expected * gamma)[expected != 0], tol):
            return GAMMA_TWICE
    float32_evidence = np.dtype(dtype) == np.float64 and _float32_evidence(y, x, gamma, eps)
    cause = _implied_scale_cause(y, x, gamma, eps, tol, known_gain, float32_evidence)
    if cause:
        return cause
    return _precision_cause(relative_error(y, expected), np.dtype(dtype), float32_evidence)


def _gain_probe(rms_norm, x_in, y, eps, dtype):
    """With gamma = 1 a wrong gain is invisible: call again with a non-uniform gamma and compare.

    Returns the gain mistakes ([] if gamma is applied once), or None if the answer is not a
    multiple of the first one feature by feature (then nothing is said about the gain).
    """
    gamma = _gamma(x_in.shape[-1], 5).astype(dtype)
    try:
        other = call_learner(rms_norm, x_in, gamma, eps=eps, what="gain probe")
    except Exception:  # noqa: BLE001 - the main check reports problems with the call itself
        return None
    if type(other) is not np.ndarray or other.shape != y.shape:
        return None
    other = np.asarray(other, dtype=np.float64)
    gamma = gamma.astype(np.float64)
    keep = y != 0
    if not keep.any() or not np.all(np.isfinite(other)):
        return None
    tol = MATCH[np.dtype(dtype)]
    for factor, mistakes in ((gamma, []), (np.ones_like(gamma), [PROBED_GAMMA_MISSING]),
                             (gamma * gamma, [PROBED_GAMMA_TWICE])):
        if _allclose_rel(other[keep], (factor * y)[keep], tol):
            return mistakes
    return None


def _rms_norm_case(rms_norm, x, gamma, eps, dtype, label):
    dtype = np.dtype(dtype)
    x_in, gamma_in = x.astype(dtype), gamma.astype(dtype)
    x64, gamma64 = x_in.astype(np.float64), gamma_in.astype(np.float64)
    what = f"rms_norm(x, gamma, eps={eps}) for {label}"
    y = _strict(_call(rms_norm, x_in, gamma_in, eps=eps, what=what), what, x.shape, dtype)
    expected = oracles.rms_norm(x64, eps, gamma64)
    if relative_error(y, expected) > RTOL[dtype]:
        known_gain = _gain_probe(rms_norm, x_in, y, eps, dtype) if np.all(gamma64 == 1.0) else None
        cause = _forward_cause(y, x64, gamma64, eps, expected, dtype, known_gain)
        probe = Probe(lambda e, dt: oracles.in_precision(dt, oracles.rms_norm, x64, e, gamma64), eps,
                      eps_ids=("rms.eps_ignored", "rms.eps_ignored"),
                      precision_ids=("rms.float32_inside", "rms.low_precision_statistics"), input_dtype=dtype)
        assert_close(y, expected, what, "torch.nn.functional.rms_norm, float64", RTOL[dtype], cause, probe=probe)


@check
def check_rms_norm(rms_norm, shape=None, eps=1e-6, seed=0, gamma=None, scale=1.0, offset=0.0, tiny_rows=False,
                   dtype=np.float64):
    """Compare ``rms_norm(x, gamma, eps)`` with torch's RMSNorm (float64) for x: (..., d).

    Without ``shape``: the worked example (2, 4, 6, 8) with gamma = 1, a (2, 3, 8) batch with a
    non-uniform gamma, and a square (6, 6) input (which exposes a missing keepdims).
    ``tiny_rows`` spreads the tokens' scales from 1e-6 to 10, so eps dominates some rows.
    ``dtype``: float32 inputs must come back as float32, within a float32 tolerance of the float64 oracle.
    """
    dtype = np.dtype(dtype)
    if shape is None:
        cases = [(WORKED_EXAMPLE, np.ones(4), "x = (2, 4, 6, 8), gamma = 1"),
                 (_input((2, 3, 8), seed, 2.0 * scale, offset, tiny_rows), _gamma(8, seed + 1),
                  "x of shape (2, 3, 8) and a non-uniform gamma"),
                 (_input((6, 6), seed + 2, scale, offset, tiny_rows), _gamma(6, seed + 3),
                  "a square x of shape (6, 6)")]
    else:
        shape = tuple(shape)
        g = _gamma(shape[-1], seed + 1) if gamma is None else np.array(gamma, dtype=np.float64)
        cases = [(_input(shape, seed, scale, offset, tiny_rows), g, f"x of shape {shape}")]
    for x, g, label in cases:
        _rms_norm_case(rms_norm, x, g, eps, dtype, label + ("" if dtype == np.float64 else f", {dtype.name}"))
    kind = f"{dtype.name} in -> {dtype.name} out" + (", tiny rows" if tiny_rows else "")
    shapes = ", ".join(str(tuple(np.shape(x))) for x, _, _ in cases)
    passed(f"rms_norm matches torch's RMSNorm for shape(s) {shapes}, eps={eps} ({kind})")


# ---------------------------------------------------------------------------- backward
def _probe_scale_cause(rms_norm_backward, x, gamma, eps, dtype, tol):
    """Send a gradient perpendicular to x through the learner's backward: it must come back divided by r.

    For v with v . x = 0 per token, the true dx for dy = v / gamma is exactly v / r, so
    |v| / |dx| is the r the learner's code divided by, whatever its other terms do.

    Returns (cause, r): r is the learner's r (per token) when the mistake is in r itself (eps, the
    statistic, the square root), so that the other terms can be read with it; else None.
    """
    if x.shape[-1] < 3 or np.min(np.abs(gamma)) < 1e-3:
        return None, None
    unit = x / np.linalg.norm(x, axis=-1, keepdims=True)
    v = random_input(x.shape, seed=97)
    v = v - unit * np.sum(v * unit, axis=-1, keepdims=True)
    dy = (v / gamma).astype(dtype)
    try:
        result = call_learner(rms_norm_backward, dy, x.astype(dtype), gamma.astype(dtype), eps=eps, what="probe")
        dx = np.asarray(result[0], dtype=np.float64)
    except Exception:  # noqa: BLE001 - the main check reports problems with the call itself
        return None, None
    if dx.shape != x.shape or not np.all(np.isfinite(dx)):
        return None, None
    dv = dy.astype(np.float64) * gamma  # v as the learner's dtype saw it
    along = np.sum(dx * dv, axis=-1, keepdims=True) / np.sum(dv * dv, axis=-1, keepdims=True)
    if relative_error(dx, along * dv) > 10 * tol:  # not a pure multiple of v: another term is off
        return None, None
    implied = 1.0 / along
    d = x.shape[-1]
    ms = _mean_square(x)
    # (r, cause, whether the mistake is in r itself rather than in how often dx is divided by it)
    candidates = [
        (np.sqrt(ms + eps), None, False),
        (np.sqrt(ms) + eps, tag("eps is outside the square root: r must be sqrt(mean(x**2) + eps), not "
                                "sqrt(mean(x**2)) + eps.", "rms.eps_outside_sqrt"), True),
        (np.sqrt(d * ms + eps), tag(f"you summed the squares instead of averaging them: your r is sqrt(d) = "
                                    f"{np.sqrt(d):.4g} times too large.", "rms.sum_not_mean"), True),
        (ms + eps, tag("you divided by the mean square: the square root is missing from r.", "rms.sqrt_missing"), True),
        (np.ones_like(ms), tag("dx is not divided by r: every term of dx = (g - mean(g * x_hat) * x_hat) / r carries "
                               "1/r.", "rms.dx_wrong_power_of_r"), False),
        ((ms + eps) ** 1.5, tag("dx is divided by r three times: once is right.", "rms.dx_wrong_power_of_r"), False),
        (1.0 / np.sqrt(ms + eps), tag("dx is multiplied by r where it should be divided by it.",
                                      "rms.dx_wrong_power_of_r"), False),
    ]
    if eps > 0:
        candidates.insert(1, (np.sqrt(ms), tag(f"eps is ignored: your r is sqrt(mean(x**2)) but eps = {eps} was "
                                               "passed.", "rms.eps_ignored"), True))
    for candidate, cause, own_r in candidates:
        if _allclose_rel(implied, candidate, tol):
            return cause, (candidate if own_r else None)
    return None, None


def _projection_cause(dx, dy, x, gamma, eps, tol, r=None, sum_is_consistent=False):
    """Name the mistake from the component of dx along x_hat.

    Write the learner's dx as (g - k * mean(g * x_hat) * x_hat) / r along x_hat, with g = gamma * dy.
    Since |x_hat|^2 = d q with q = ms / (ms + eps), the coefficient c = r (dx . x_hat) / (g . x_hat)
    is 1 - k q, so k = (1 - c) / q can be read off each token: 1 is right, 0 means the term is
    missing, d means a sum instead of a mean, r**2 means x in place of x_hat.

    ``r``: the learner's own (wrong) r, per token, read off by ``_probe_scale_cause``; x_hat = x / r
    and q = ms / r**2 then, so that a second mistake in the projection term is named too.
    """
    d = x.shape[-1]
    ms = _mean_square(x)
    if r is None:
        r = np.sqrt(ms + eps)
        x_hat = oracles.rms_norm(x, eps)
    else:
        x_hat = x / r
    g = gamma * dy
    gx = np.sum(g * x_hat, axis=-1, keepdims=True)
    q = ms / (r * r)
    # tokens where eps does not dominate (q > 0.1) and the probe direction is well represented
    keep = (np.abs(gx) > 1e-3 * np.linalg.norm(g, axis=-1, keepdims=True) * np.sqrt(d)) & (q > 0.1)
    if not keep.any():
        return None
    c = r * np.sum(dx * x_hat, axis=-1, keepdims=True) / np.where(keep, gx, 1.0)
    k = ((1.0 - c) / q)[keep]
    slack = 10 * tol / q[keep]  # rounding in dx (float32 above all) blurs c, and k by 1/q more

    def near(target):
        return bool(np.all(np.abs(k - target) <= 1e-4 * np.abs(target) + slack))

    if near(0.0):
        return tag("dx keeps the whole component of g along x_hat: the -mean(g * x_hat) * x_hat term is missing. "
                   "It comes from dr/dx_j = x_j / (d r); without it the gradient is not orthogonal to x, although "
                   "scaling x does not change the output. See it: print(np.sum(dx * x, axis=-1)).",
                   "rms.projection_term_missing")
    if near(float(d)) and not sum_is_consistent:
        return tag("the -mean(g * x_hat) * x_hat term uses a sum instead of a mean: it is d times too large, so dx "
                   "points against x_hat. Use np.mean(g * x_hat, axis=-1, keepdims=True).",
                   "rms.projection_sum_not_mean")
    r2 = (r * r)[keep]
    if near(r2) and np.max(np.abs(r2 - 1)) > 0.1:
        return tag("the -mean(g * x_hat) * x_hat term was built from x instead of x_hat (x = r * x_hat, so it is off "
                   "by r**2 = mean(x**2) + eps). Use x_hat = x / r in both places.", "rms.projection_uses_x")
    return None


def _backward_causes(dx, dgamma, dy, x, gamma, eps, reference, dtype, rms_norm_backward):
    ref_dx, ref_dgamma = reference
    tol = MATCH[np.dtype(dtype)]
    rtol = RTOL[np.dtype(dtype)]
    dgamma_wrong = relative_error(dgamma, ref_dgamma) > rtol
    dgamma_cause = _dgamma_cause(dgamma, dy, x, gamma, eps, ref_dgamma, tol) if dgamma_wrong else None
    dx_cause = None
    if relative_error(dx, ref_dx) > rtol:
        dx_cause = _dx_cause(dx, dy, x, gamma, eps, ref_dx, dtype, tol, rms_norm_backward)
    if dgamma_cause:
        # the mistakes found in dx as well are named with it, unless they are the same one (eps ignored in both)
        mistakes = [dgamma_cause]
        if isinstance(dx_cause, list):
            mistakes += [m for m in dx_cause if not set(ids_of(m)) <= set(ids_of(dgamma_cause))]
        return "dgamma", describe([mistakes])
    if isinstance(dx_cause, list):
        return "dx", describe([dx_cause])
    if dx_cause is not None:
        return "dx", dx_cause
    if dgamma_wrong:
        cause = _precision_cause(relative_error(dgamma, ref_dgamma), np.dtype(dtype))
        return "dgamma", cause or ("dgamma should be sum(dy * x_hat) over every leading axis, with "
                                   "x_hat = x / sqrt(mean(x**2) + eps) from the forward pass.")
    return None, None


def _dgamma_cause(dgamma, dy, x, gamma, eps, ref_dgamma, tol):
    """The classic mistake that explains a wrong dgamma exactly, or None."""
    lead = tuple(range(x.ndim - 1))
    x_hat = oracles.rms_norm(x, eps)
    tokens = int(np.prod(x.shape[:-1]))
    if relative_error(dgamma, np.sum(dy * x, axis=lead)) < tol:
        return tag("dgamma used x instead of x_hat: it is sum(dy * x_hat) over the leading axes, "
                   "x_hat = x / r.", "rms.dgamma_uses_x")
    if relative_error(dgamma, np.sum(dy * x_hat * gamma, axis=lead)) < tol:
        return tag("dgamma was multiplied by gamma: it is sum(dy * x_hat); gamma does not appear in it.",
                   "rms.dgamma_times_gamma")
    if tokens > 1 and relative_error(dgamma, ref_dgamma / tokens) < tol:
        return tag("dgamma is a mean over the tokens; it is a sum: every token's contribution adds up.",
                   "rms.dgamma_mean")
    if eps > 0 and relative_error(dgamma, oracles.rms_norm_grads(dy, x, gamma, 0.0)[1]) < tol:
        return tag(f"dgamma is the eps = 0 one: eps is ignored in x_hat, but eps = {eps} was passed. "
                   "x_hat = x / sqrt(mean(x**2) + eps), exactly as in the forward pass.", "rms.eps_ignored")
    return None


def _dx_cause(dx, dy, x, gamma, eps, ref_dx, dtype, tol, rms_norm_backward):
    """The diagnosis of a wrong dx: a list of the mistakes found (one or two), else a general pointer (a str)."""
    causes = _dx_mistakes(dx, dy, x, gamma, eps, ref_dx, dtype, tol, rms_norm_backward)
    if causes:
        return causes
    return ("dx is off: compare term by term with dx = (g - mean(g * x_hat) * x_hat) / r, "
            "g = gamma * dy, all means over axis=-1 with keepdims=True.")


def _dx_mistakes(dx, dy, x, gamma, eps, ref_dx, dtype, tol, rms_norm_backward):
    ones = np.ones_like(gamma)
    if not np.allclose(gamma, 1.0):
        if relative_error(dx, oracles.rms_norm_grads(dy, x, ones, eps)[0]) < tol:
            return [tag("dx ignores gamma: the gradient reaching x_hat is g = gamma * dy, not dy.",
                        "rms.dx_gamma_missing")]
        if relative_error(dx, oracles.rms_norm_grads(dy * gamma, x, gamma, eps)[0]) < tol:
            return [tag("gamma was applied twice in dx: g = gamma * dy, with gamma once.", "rms.dx_gamma_twice")]
        # g = dy / gamma: the oracle multiplies its dy by gamma, so it gets dy / gamma**2 (dy / gamma would
        # give g = dy, which is "gamma ignored" again)
        if np.all(gamma != 0) and relative_error(dx, oracles.rms_norm_grads(dy / gamma**2, x, gamma, eps)[0]) < tol:
            return [tag("dx divides by gamma; the gradient reaching x_hat is g = gamma * dy.",
                        "rms.dx_divides_by_gamma")]
    d = x.shape[-1]
    size = float(np.max(np.abs(dx))) or 1.0
    if d > 1 and np.max(np.abs(np.sum(dx, axis=-1))) <= 1e-6 * size * d \
            and np.max(np.abs(np.sum(ref_dx, axis=-1))) > 1e-3 * size:
        return [tag("each token's dx sums to zero, like LayerNorm's: you kept the -mean(g) term (or centred "
                    "x). RMSNorm has no mean, so its backward has no -mean(g) term: "
                    "dx = (g - mean(g * x_hat) * x_hat) / r.", "rms.backward_mean_term", "rms.mean_subtracted")]
    if d > 2:
        offset = dx - ref_dx
        per_token = offset.mean(axis=-1, keepdims=True)
        if np.max(np.abs(offset - per_token)) <= 1e-6 * size and np.max(np.abs(per_token)) > 1e-6 * size:
            return [tag("dx differs from the right answer by the same amount on every feature of a token: "
                        "a term along 1, such as LayerNorm's -mean(g), that RMSNorm does not have. "
                        "dx = (g - mean(g * x_hat) * x_hat) / r, and nothing else.", "rms.backward_mean_term")]
    cause, own_r = _probe_scale_cause(rms_norm_backward, x, gamma, eps, dtype, tol)
    if cause:
        # with r = sqrt(sum(x**2) + eps), the exact derivative of that forward has a projection term d times
        # the mean one: a sum there is consistent, not a second mistake
        summed = own_r is not None and _allclose_rel(own_r, np.sqrt(d * _mean_square(x) + eps), tol)
        second = _projection_cause(dx, dy, x, gamma, eps, tol, r=own_r, sum_is_consistent=summed) \
            if own_r is not None else None
        return [cause, second] if second else [cause]
    cause = _projection_cause(dx, dy, x, gamma, eps, tol) or _precision_cause(relative_error(dx, ref_dx),
                                                                              np.dtype(dtype))
    return [cause] if cause else []


def _finite_difference_grads(rms_norm, dy, x, gamma, eps):
    """Central differences of L = sum(dy * rms_norm(x, gamma, eps)) in x and gamma (float64, small inputs)."""
    def loss(xv, gv):
        out = _call(rms_norm, xv, gv, eps=eps, what=f"rms_norm(x, gamma, eps={eps}) for x of shape {x.shape}, in the "
                                                          "finite-difference check of rms_norm_backward")
        return float(np.sum(dy * np.asarray(out, dtype=np.float64)))

    h = 1e-6
    dx = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = h * max(1.0, abs(x[index]))
        dx[index] = (loss(x + step, gamma) - loss(x - step, gamma)) / (2 * step[index])
    dgamma = np.zeros_like(gamma)
    for j in range(gamma.size):
        step = np.zeros_like(gamma)
        step[j] = h
        dgamma[j] = (loss(x, gamma + step) - loss(x, gamma - step)) / (2 * h)
    return dx, dgamma


@check
def check_rms_norm_backward(rms_norm_backward, rms_norm=None, shape=(2, 3, 5), eps=1e-6, seed=0, gamma=None,
                            scale=2.0, offset=0.0, tiny_rows=False, dtype=np.float64):
    """Compare ``(dx, dgamma) = rms_norm_backward(dy, x, gamma, eps)`` with autograd for x: (..., d).

    The default input has RMS about 2 (``scale``), so that x and x_hat differ visibly. With
    ``rms_norm`` given, also checks that the backward agrees with central differences of
    that forward (float64 only).
    """
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    d = shape[-1]
    x = _input(shape, seed, scale, offset, tiny_rows).astype(dtype)
    dy = random_input(shape, seed=seed + 1).astype(dtype)
    gamma = (_gamma(d, seed + 2) if gamma is None else np.array(gamma, dtype=np.float64)).astype(dtype)
    x64, dy64, gamma64 = (a.astype(np.float64) for a in (x, dy, gamma))
    what = f"rms_norm_backward(dy, x, gamma, eps={eps}) for x of shape {shape}" + (
        "" if dtype == np.float64 else f", {dtype.name}")
    result = _call(rms_norm_backward, dy, x, gamma, eps=eps, what=what)
    if type(result) is not tuple or len(result) != 2:
        length = f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
        fail(f"{what} should return a tuple (dx, dgamma); it returned {type(result).__name__}{length}.",
             "rms.backward_not_a_pair")
    dx, dgamma = result
    if (len(shape) > 1 and isinstance(dx, np.ndarray) and isinstance(dgamma, np.ndarray) and dx.shape == (d,)
            and dgamma.shape == shape):
        fail(f"{what} returned (dgamma, dx): dx has shape {dx.shape} and dgamma {dgamma.shape}.\nLikely cause: the "
             "two gradients in the wrong order. Return dx first, then dgamma: return dx, dgamma.",
             "rms.backward_not_a_pair")
    if isinstance(dgamma, np.ndarray) and dgamma.shape != (d,) and len(shape) > 1:
        axes = tuple(range(len(shape) - 1))
        if dgamma.shape == shape:
            fail(f"{what}: dgamma has shape {dgamma.shape}, expected ({d},).\nLikely cause: not summed over the "
                 f"tokens. gamma is shared by every token, so dgamma sums over every leading axis: axis={axes}.",
                 "rms.dgamma_not_summed")
        partly = dgamma.shape in (shape[1:], shape[:1] + shape[2:]) or (len(shape) > 2 and dgamma.ndim > 1)
        if partly and dgamma.size > d:  # (1, 1, d): summed everywhere, keepdims=True; strict_array says so
            fail(f"{what}: dgamma has shape {dgamma.shape}, expected ({d},).\nLikely cause: summed over some "
                 f"leading axes only; sum over every one of them, axis={axes} (for any number of leading axes: "
                 "tuple(range(x.ndim - 1))).", "rms.dgamma_partly_summed")
    dx = _strict(dx, what + ": dx", shape, dtype)
    dgamma = _strict(dgamma, what + ": dgamma", (d,), dtype)
    reference = oracles.rms_norm_grads(dy64, x64, gamma64, eps)
    name, cause = _backward_causes(dx, dgamma, dy64, x64, gamma64, eps, reference, dtype, rms_norm_backward)
    if name is not None:
        actual = {"dx": dx, "dgamma": dgamma}[name]
        expected = dict(zip(("dx", "dgamma"), reference, strict=True))[name]
        index = ("dx", "dgamma").index(name)
        probe = Probe(lambda e, dt: oracles.in_precision(dt,
                                                         lambda: oracles.rms_norm_grads(dy64, x64, gamma64, e)[index]),
                      eps, eps_ids=("rms.eps_ignored", "rms.eps_ignored"),
                      precision_ids=("rms.float32_inside", "rms.low_precision_statistics"), input_dtype=dtype)
        assert_close(actual, expected, f"{what}: {name}", "torch autograd, float64", RTOL[dtype], cause, probe=probe)
    agree = ""
    if rms_norm is not None and dtype == np.float64:
        fd_dx, fd_dgamma = _finite_difference_grads(rms_norm, dy64, x64, gamma64, eps)
        for label, mine, numeric in (("dx", dx, fd_dx), ("dgamma", dgamma, fd_dgamma)):
            assert_close(mine, numeric, f"{what}: {label}", "central differences of YOUR rms_norm", FD_RTOL,
                         tag("your backward matches autograd but not your own forward, so rms_norm is the one that "
                             "is wrong: run its checks above.", "rms.forward_backward_mismatch"))
        agree = " and with central differences of your rms_norm"
    passed(f"rms_norm_backward matches autograd for x of shape {shape}, eps={eps}, {dtype.name}{agree}")


# ---------------------------------------------------------------------------- bfloat16 forward
# numpy has no bfloat16, so rms_norm_bf16 takes and returns float32 arrays that hold bfloat16 numbers (what
# tensor.float().numpy() gives); inside, the learner's code works on bfloat16 tensors. Values cross a grading
# sandbox as plain float32 arrays, so the check is the same in a notebook and under `grader grade`.
BF16_BITS = 8          # significant bits of bfloat16 (7 stored, 1 implicit)
BF16_TIE_MARGIN = 1 / 16  # of a spacing: within it of a rounding tie, float32 statistics may round either way
BF16_SHAPE_FIT = 2e-2  # relative residual of a per-token fit: bfloat16 rounding leaves ~2e-3
BF16_SCALE_FIT = 1e-2  # a per-token r within this of a candidate matches it (rounded statistics leave <= 6e-3)


def _bf16_grid(values):
    """The bfloat16 numbers around each value: (lower, upper, nearest, near_tie), all float64.

    lower <= |value| < upper in magnitude, with the value's sign; nearest is round to nearest, ties to even;
    near_tie: the value lies within BF16_TIE_MARGIN of a spacing of the tie between lower and upper.
    """
    v = np.asarray(values, dtype=np.float64)
    a = np.abs(v)
    _, exponent = np.frexp(a)
    spacing = np.ldexp(1.0, np.maximum(exponent - BF16_BITS, -133))  # -133: bfloat16's subnormal spacing
    steps = np.floor(a / spacing)
    frac = a / spacing - steps
    lower, upper = steps * spacing, (steps + 1) * spacing
    up = (frac > 0.5) | ((frac == 0.5) & (steps % 2 == 1))
    sign = np.where(v < 0, -1.0, 1.0)
    return sign * lower, sign * upper, sign * np.where(up, upper, lower), np.abs(frac - 0.5) <= BF16_TIE_MARGIN


def to_bf16(values) -> np.ndarray:
    """Round to the nearest bfloat16 number (ties to even), as float32: a test input, not the exercise."""
    return _bf16_grid(values)[2].astype(np.float32)


def _rounds_to(y, exact):
    """Whether each y is a bfloat16 rounding of ``exact`` (the nearest one, or either neighbour near a tie)."""
    lower, upper, nearest, near_tie = _bf16_grid(exact)
    return (y == nearest) | (near_tie & ((y == lower) | (y == upper)))


def _bf16_acceptable(y, x_hat, gamma):
    """Entry by entry: is y what correct rounding gives, in Gemma's order or in LLaMA's?

    Gemma's order: round(gamma * x_hat), one rounding (gamma applied in float32). LLaMA's: round(gamma * a)
    with a = round(x_hat), x_hat cast back to bfloat16 before the bfloat16 gain (the product of two bfloat16
    numbers is exact in float32, so only its final rounding counts). ``x_hat``: float64, exact.
    """
    ok = _rounds_to(y, gamma * x_hat)
    lower, upper, nearest, near_tie = _bf16_grid(x_hat)
    ok |= _rounds_to(y, gamma * nearest)
    ok |= near_tie & (_rounds_to(y, gamma * lower) | _rounds_to(y, gamma * upper))
    return ok


def _bf16_inputs(shape, seed, eps_rows):
    """x: bfloat16 numbers with a per-token offset and, with ``eps_rows``, token scales from 1e-6 to 10."""
    d = shape[-1]
    x = random_input(shape, seed=seed) + 0.3 * np.sign(random_input(shape[:-1] + (1,), seed=seed + 50))
    if eps_rows and len(shape) > 1:
        tokens = int(np.prod(shape[:-1]))
        x = x * np.logspace(-6, 1, tokens).reshape(shape[:-1] + (1,))
    return to_bf16(x), to_bf16(_gamma(d, seed + 1))


def _token_fit(y, basis):
    """Per token: the scale rho of the least-squares fit y ~ rho * basis, and its relative residual."""
    d = y.shape[-1]
    y, basis = y.reshape(-1, d), basis.reshape(-1, d)
    rho = np.sum(y * basis, axis=-1) / np.maximum(np.sum(basis * basis, axis=-1), 1e-300)
    residual = np.linalg.norm(y - rho[:, None] * basis, axis=-1) / np.maximum(np.linalg.norm(y, axis=-1), 1e-300)
    return rho, residual


NO_UPCAST = tag("your r (or 1/r) reached the division as a bfloat16 number: the statistics were computed on bfloat16 "
                "tensors (every operation on them rounds its result to bfloat16: the mean square, the square root, "
                "x / r), or r was cast back to bfloat16 before it was used. Upcast first: x.float(), compute the mean "
                "square, r and x / r in float32, and round only the normalised result.", "rms.no_upcast")
BF16_STALL = tag("your r is too small on the larger tokens: the sum of squares lost terms. A running sum kept in "
                 "bfloat16 (8 significant bits) stops growing once the total is about 256 times the next term. "
                 "Accumulate in float32: upcast x first.", "rms.low_precision_statistics")


def _bf16_cause(y, x, gamma, eps, x_hat):
    """The classic mistake behind a wrong bfloat16 result (y on the bfloat16 grid), or None."""
    d = x.shape[-1]
    centred = x - x.mean(axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        centred_hat = centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)
    shapes = [(gamma * x_hat, None), (x_hat, GAMMA_MISSING), (gamma * gamma * x_hat, GAMMA_TWICE),
              (gamma * centred_hat, tag("the outputs (divided by gamma) have mean zero in every token: you subtracted "
                                        "the mean. That is LayerNorm; RMSNorm divides x itself by "
                                        "sqrt(mean(x**2) + eps).", "rms.mean_subtracted"))]
    for basis, mistake in shapes:  # noqa: B007 - read after the loop: the shape that fit
        rho, residual = _token_fit(y, basis)
        if np.all(residual <= BF16_SHAPE_FIT):
            break
    else:
        return None
    if mistake is not None:
        return mistake
    ms = _mean_square(x).reshape(-1)
    r_true = np.sqrt(ms + eps)
    with np.errstate(all="ignore"):
        r_yours = r_true / rho
    maps = [(np.sqrt(ms) + eps, tag("eps is outside the square root: r must be sqrt(mean(x**2) + eps), not "
                                   "sqrt(mean(x**2)) + eps. The tokens with a small mean square show it.",
                                   "rms.eps_outside_sqrt")),
            (np.sqrt(d * ms + eps), tag(f"you summed the squares instead of averaging them, so r is sqrt(d) = "
                                        f"{np.sqrt(d):.4g} times too large.", "rms.sum_not_mean")),
            (ms + eps, tag("you divided by the mean square itself: the square root is missing.", "rms.sqrt_missing"))]
    if eps > 0:
        maps.append((np.sqrt(ms), tag(f"eps is ignored: your r is sqrt(mean(x**2)) but eps = {eps} was passed.",
                                      "rms.eps_ignored")))

    def deviation(candidate):
        with np.errstate(all="ignore"):
            return float(np.max(np.abs(r_yours / candidate - 1)))

    if deviation(r_true) <= BF16_SCALE_FIT:
        return NO_UPCAST
    fits = sorted((deviation(candidate), index) for index, (candidate, _) in enumerate(maps))
    if fits[0][0] <= BF16_SCALE_FIT:  # the closest of the candidates that fit
        return maps[fits[0][1]][1]
    ratio = r_yours / r_true
    if np.all(ratio <= 1 + BF16_SCALE_FIT) and np.min(ratio) < 1 - 2 * BF16_SCALE_FIT:
        return BF16_STALL
    return None


def _rms_norm_bf16_case(rms_norm_bf16, x, gamma, eps, label):
    what = f"rms_norm_bf16(x, gamma, eps={eps}) for {label}"
    value = _call(rms_norm_bf16, x, gamma, eps=eps, what=what)
    if (isinstance(value, np.ndarray) and value.shape == x.shape and value.dtype != np.float32
            and value.dtype.kind == "f"):
        fail(f"{what} returned a numpy array of dtype {value.dtype}; it must be float32 holding bfloat16 numbers.\n"
             "Likely cause: the conversion at the end. Keep the stub's last line: your bfloat16 result y, converted "
             "with y.float().numpy().", "common.wrong_dtype")
    y = _strict(value, what, x.shape, np.float32)
    x64, gamma64 = x.astype(np.float64), gamma.astype(np.float64)
    x_hat = oracles.rms_norm(x64, eps)
    reference = gamma64 * x_hat
    on_grid = _bf16_grid(y)[2] == y
    if np.all(on_grid) and np.all(_bf16_acceptable(y, x_hat, gamma64)):
        return
    if not np.all(on_grid):
        rounded = _bf16_grid(y)[2]
        cast = tag(f"{int(np.sum(~on_grid))} of your {y.size} outputs are not bfloat16 numbers: the result was not "
                   "cast back. Round the normalised result to bfloat16 (.to(torch.bfloat16)) before returning it; a "
                   "float32 gain or a float32 result left as it is keeps float32 precision.", "rms.no_cast_back")
        if np.all(_bf16_acceptable(rounded, x_hat, gamma64)):
            cause = cast
        else:
            other = _bf16_cause(rounded, x64, gamma64, eps, x_hat)
            cause = describe([[cast, other]]) if other else cast
    else:
        cause = _bf16_cause(y, x64, gamma64, eps, x_hat)
    wrong = ~(_bf16_acceptable(y, x_hat, gamma64) & on_grid)
    spacing = _bf16_grid(reference)[1] - _bf16_grid(reference)[0]
    worst = float(np.max(np.abs(y - reference)[wrong] / np.abs(spacing)[wrong]))
    index = tuple(int(i) for i in np.argwhere(wrong)[0])
    text = cause or "no classic mistake matched; compare each step with upcast, normalise in float32, round."
    fail(f"{what} is wrong in {int(wrong.sum())} of {y.size} entries.\n"
         f"  expected: a bfloat16 rounding of gamma * x / sqrt(mean(x**2) + eps) (float64 oracle), in Gemma's or "
         f"LLaMA's order\n"
         f"  e.g. at index {index}: exact {reference[index]:.6g}, got {y[index]:.6g}; the largest error is {worst:.3g} "
         "bfloat16 spacings (correct rounding stays within 1.5)\n"
         f"Likely cause: {text}", *ids_of(cause))


@check
def check_rms_norm_bf16(rms_norm_bf16, shape=None, eps=1e-6, seed=0):
    """Compare ``rms_norm_bf16(x, gamma, eps)`` with what rounding to bfloat16 allows, for x: (..., d).

    x and gamma are float32 arrays of bfloat16 numbers; so must the result be. Every entry must be a
    bfloat16 rounding of the float64 RMSNorm of those very numbers: gamma * x_hat rounded once (Gemma's
    order), or x_hat rounded and then multiplied by the bfloat16 gamma (LLaMA's order); within 1/16 of a
    spacing of a rounding tie, either neighbour. Without ``shape``: tokens of d = 1024 with RMS from 1e-6
    to 10 (eps matters on the smallest), a (5, 2, 48) batch and one token of d = 512.
    """
    if shape is None:
        cases = [((6, 1024), seed), ((5, 2, 48), seed + 10), ((512,), seed + 20)]
    else:
        cases = [(tuple(shape), seed)]
    for case_shape, case_seed in cases:
        x, gamma = _bf16_inputs(case_shape, case_seed, eps_rows=True)
        label = f"x of shape {case_shape}" + (", token RMS from 1e-6 to 10" if len(case_shape) > 1 else "")
        _rms_norm_bf16_case(rms_norm_bf16, x, gamma, eps, label)
    shapes = ", ".join(str(s) for s, _ in cases)
    passed(f"rms_norm_bf16 rounds like a float32-statistics bfloat16 RMSNorm for shape(s) {shapes}, eps={eps}")
