"""Checks for 01_bn_vs_ln: layernorm, batch_norm in training mode, and the causality probe.

Oracles: ``torch.nn.functional.layer_norm`` and ``torch.nn.functional.batch_norm`` with
``training=True``, both in float64, and properties. When an answer is wrong the diagnosis
is read off the answer itself: along which axes it is centred, the scale it implies per
group of statistics (sqrt(var + eps) or a classic wrong one), whether the gain and shift
sit where they belong, whether each token comes out right when it is alone.

The probe ``leaks_future(norm, x, t)`` is pointed at a set of functions whose dependence
on later tokens is known by construction (causal ones and leaky ones, a leak that skips
position t, one that is tiny, one that hides behind zero padding). Those functions are test
inputs, not exercises. The probe is watched while it runs: every array it hands to ``norm``
is recorded, and a wrong answer is explained from what it changed and what it compared.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from grader import oracles
from grader.checks._scales import Map, Statistic, describe, explain_scale
from grader.compare import (
    LearnerError,
    Probe,
    assert_close,
    call_learner,
    check,
    fail,
    ids_of,
    passed,
    preview,
    run_learner,
    strict_array,
    tag,
)
from grader.numerics import random_input, relative_error

_PREFIX = {"LayerNorm": "ln", "BatchNorm": "bn"}  # catalogue id prefixes (grader.catalogue.bn_vs_ln)
RTOL = 1e-7          # float64 implementations agree with torch to ~1e-14; 1e-7 means another formula
MATCH = 1e-9         # how closely an implied scale must fit a known mistake to be named
WORKED_EXAMPLE = np.array([2.0, 4.0, 6.0, 8.0])
SHAPE_RULES = {  # the likely cause of a shape error raised by the learner's code
    "LayerNorm": "layernorm must accept any shape (..., d): normalise over the last axis (axis=-1, keepdims=True) "
                 "and keep the leading axes as they are, whatever their number (none, one, two, ...).",
    "BatchNorm": "batch_norm must accept any shape (..., d): its statistics are over every axis but the last, "
                 "axis=tuple(range(x.ndim - 1)), whatever their number.",
    "probe": "x has shape (B, T, d), time on axis 1, and B, T or d may be 1: change x[:, t + 1:] and compare "
             "out[:, :t + 1], with no other assumption about the sizes.",
}


# --------------------------------------------------------------------------- oracles


def _two_pass(x: np.ndarray, axes: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Mean and biased variance over ``axes`` (kept as size-1 axes), two passes in float64."""
    mu = np.mean(x, axis=axes, keepdims=True)
    return mu, np.mean((x - mu) ** 2, axis=axes, keepdims=True)


# ---------------------------------------------------------------- naming the mistake


def _axis_sets(ndim: int) -> list[tuple[tuple, str]]:
    """Candidate reduction axes of an (..., d) input, each with plain words for it."""
    last = (ndim - 1,)
    leading = tuple(range(ndim - 1))
    sets = [(last, "each token's own features (axis=-1): that is LayerNorm")]
    if ndim >= 2:
        sets.append((leading, f"every axis but the last (axis={leading}): that is BatchNorm"))
    if ndim >= 3:
        sets.append(((0,), "axis 0 only, the batch: for a (B, T, d) input BatchNorm averages over batch "
                           "and positions together"))
        sets.append(((ndim - 2,), f"the positions (axis={ndim - 2}) of each sequence, mixing past and future"))
    if ndim >= 2:
        sets.append((tuple(range(ndim)), "the whole array at once (no axis= at all)"))
    return sets


def _centred_over(z: np.ndarray, axes: tuple) -> bool:
    size = max(float(np.max(np.abs(z))), 1.0)
    return float(np.max(np.abs(np.mean(z, axis=axes)))) <= 1e-9 * size


def _affine_cause(y, x_hat, gamma, beta, prefix) -> str | None:
    """Name a misplaced gain or shift, given the right normalised x_hat (ids under ``prefix``: "ln" or "bn")."""
    candidates = [
        (x_hat * beta + gamma, "gamma and beta are swapped: you returned beta * x_hat + gamma. "
                               "The gain gamma multiplies, the shift beta is added.", ["affine_swapped"]),
        (x_hat, "gamma and beta are ignored: you returned x_hat. Return gamma * x_hat + beta.",
         ["gamma_ignored", "beta_ignored"]),
        (gamma * x_hat, "beta is ignored: add the shift, gamma * x_hat + beta.", ["beta_ignored"]),
        (x_hat + beta, "gamma is ignored: multiply by the gain, gamma * x_hat + beta.", ["gamma_ignored"]),
        (gamma * (x_hat + beta), "the shift is added before the gain: gamma * (x_hat + beta) instead of "
                                 "gamma * x_hat + beta.", ["shift_before_gain"]),
        (gamma * x_hat - beta, "beta is subtracted instead of added.", ["beta_subtracted"]),
    ]
    for value, cause, mistakes in candidates:
        if relative_error(y, value) < MATCH:
            return tag(cause, *(f"{prefix}.{m}" for m in mistakes))
    return None


U = 2.0**-53  # unit roundoff of float64
# eps values learners write into the body instead of using the argument (torch's default, then others'
# defaults); 1e-8 or smaller is not listed: next to a unit variance it cannot be told from no eps at all
FIXED_EPS = [(1e-5, "1e-5"), (1e-6, "1e-6"), (1e-3, "1e-3"), (1e-4, "1e-4")]


def _scale_cause(z, x, axes, eps, n, prefix) -> str | None:
    """Read the scale s' the learner divided by off z = (x - mu) / s', group by group.

    std(z) = std(x) / s' over each group of statistics, so s' = std(x) / std(z). Every
    combination of a statistic (biased or unbiased variance, exact or computed as
    E[x²] − μ²) and a map to the scale (sqrt(v + eps) or a classic wrong one) is tried, so
    two mistakes at once are both named (grader.checks._scales).
    """
    _, var = _two_pass(x, axes)
    _, var_z = _two_pass(z, axes)
    if np.any(var_z <= 0) or np.any(var <= 0):
        return None
    implied = np.sqrt(var) / np.sqrt(var_z)
    right = np.sqrt(var + eps)
    if np.max(np.abs(implied / right - 1)) <= MATCH:
        return None
    # E[x²] − μ² in float64, summed in any order, is off by at most about 2 (n + 4) u E[x²]
    band = 2 * (n + 4) * U * np.mean(x * x, axis=axes, keepdims=True)
    unbiased = tag(f"you used the unbiased variance, dividing by n - 1 = {n - 1} (np.var(..., ddof=1), or torch.var's "
                f"default). The normalisation divides by n = {n}, so every output is about sqrt((n-1)/n) = "
                f"{np.sqrt((n - 1) / n) if n > 1 else 0:.4f} times the right one.", f"{prefix}.unbiased_variance")
    statistics = [Statistic(var, [], band)]
    if n > 1:
        statistics.append(Statistic(var * n / (n - 1), [unbiased], band * n / (n - 1)))
    maps = [
        Map(lambda v: np.sqrt(v + eps)),
        Map(lambda v: np.sqrt(v) + eps, [tag("eps is outside the square root: s = sqrt(var) + eps instead of "
                                             "sqrt(var + eps). See it with eps=1.0 on a nearly constant input, where "
                                             "the two differ most.", f"{prefix}.eps_outside_sqrt")]),
        Map(lambda v: v + eps, [tag("you divided by the variance (plus eps) instead of its square root, "
                                    "s = sqrt(var + eps).", f"{prefix}.no_sqrt")]),
        Map(lambda v: v, [tag("you divided by the variance instead of s = sqrt(var + eps).",
                              f"{prefix}.no_sqrt", f"{prefix}.eps_ignored")]),
        Map(lambda v: np.ones_like(v), [tag("you did not divide by s = sqrt(var + eps) at all.",
                                            f"{prefix}.not_scaled")]),
    ]
    if eps > 0:
        maps.append(Map(lambda v: np.sqrt(v), [tag(f"eps is ignored: you divided by sqrt(var), but eps = {eps} was "
                                                   "passed; use sqrt(var + eps).", f"{prefix}.eps_ignored")]))
    for fixed, shown in FIXED_EPS:  # an eps written into the body: a library's default, whatever was passed
        if eps != fixed:
            maps.append(Map(lambda v, fixed=fixed: np.sqrt(v + fixed),
                            [tag(f"you used eps = {shown} whatever eps was passed (here eps = {eps}): use the eps "
                                 "argument.", f"{prefix}.eps_hardcoded")]))
    cancels = tag("the input has a large offset (|mean| much larger than the spread), and your variance is off by no "
                  "more than the rounding of mean(x**2) - mean(x)**2 there: that formula cancels catastrophically "
                  "(notebook 06). Use mean((x - mu)**2).", f"{prefix}.naive_variance")
    return describe(explain_scale(implied, statistics, maps, MATCH, band_mistake=cancels))


def _stats_cause(z, x, eps, axes, kind) -> str:
    """Why z, the output for gamma = 1 and beta = 0, differs from the right x_hat."""
    right_axes = ("each token's own features: axis=-1, keepdims=True." if kind == "LayerNorm"
                  else "every axis but the last: axis=tuple(range(x.ndim - 1)).")
    prefix = _PREFIX[kind]
    centred = _centred_over(z, axes)
    # Centred over some axes implies centred over every superset of them, so the smallest
    # set the output is centred over is the one the statistics were taken over.
    sets = sorted(_axis_sets(x.ndim), key=lambda item: int(np.prod([x.shape[a] for a in item[0]])))
    for other, words in sets:
        if _centred_over(z, other):
            if other != axes and not (centred and set(axes) <= set(other)):
                if kind == "LayerNorm" and other == tuple(range(x.ndim - 1)):
                    mistake = "ln.over_batch"      # BatchNorm's axes
                elif kind == "BatchNorm" and other == (x.ndim - 1,):
                    mistake = "bn.over_features"   # LayerNorm's axis
                else:
                    mistake = f"{prefix}.wrong_axis"
                return tag(f"your statistics are taken over {words}. {kind} needs {right_axes}", mistake)
            break
    if centred:
        n = int(np.prod([x.shape[a] for a in axes]))
        cause = _scale_cause(z, x, axes, eps, n, prefix)
        if cause:
            return cause
    else:
        _, var_z = _two_pass(z, axes)
        _, var = _two_pass(x, axes)
        if np.all(var_z > 0) and np.allclose(np.sqrt(var / var_z), np.sqrt(var + eps), rtol=1e-9, atol=0):
            return tag("the output is not centred: you divided by s = sqrt(var + eps) but did not subtract the "
                       "mean mu first.", f"{prefix}.not_centred")
    if centred:
        _, var = _two_pass(x, axes)
        _, var_z = _two_pass(z, axes)
        if np.all(var_z > 0):
            ratio = float(np.median(np.sqrt(var / var_z) / np.sqrt(var + eps)))
            return tag(f"the mean is right but the scale is not: you divided by about {ratio:.6g} times "
                       "sqrt(var + eps), where var is the biased variance.", f"{prefix}.wrong_scale")
    return "compare your statistics with the formula term by term: mean, biased variance, sqrt(var + eps)."


def _call(function, args, what, x_shape, kind):
    """call_learner, turning a broadcasting error (numpy's or torch's) into a keepdims diagnosis."""
    try:
        return call_learner(function, *args, what=what, shape_rule=SHAPE_RULES[kind])
    except LearnerError as error:
        if "broadcast" not in error.error_message and "must match the size of tensor" not in error.error_message:
            raise
        failure = error
    lead = x_shape[:-1]
    hint = (f"a reduction without keepdims=True: x.mean(axis=-1) has shape {lead}, which does not line up "
            f"with x of shape {x_shape} (numpy aligns shapes from the right). Use keepdims=True, giving "
            f"shape {lead + (1,)}." if kind == "LayerNorm" else
            "statistics whose shape does not broadcast against x; BatchNorm's mean over every axis but the last "
            f"has shape ({x_shape[-1]},) or, with keepdims=True, {(1,) * (len(x_shape) - 1) + (x_shape[-1],)}.")
    raise failure.with_cause(tag(hint, "ln.no_keepdims" if kind == "LayerNorm" else "common.broadcast_mismatch"))


def _params(d, seed, gamma, beta):
    if gamma is None:
        gamma = 1.0 + 0.5 * random_input((d,), seed=seed + 101)
    if beta is None:
        beta = random_input((d,), seed=seed + 202)
    return np.array(gamma, dtype=np.float64), np.array(beta, dtype=np.float64)


def _check_norm(function, name, kind, x, eps, gamma, beta, axes, oracle):
    """Shared flow of the two forward checks. Returns nothing; fails with a diagnosis."""
    d = x.shape[-1]
    ones, zeros = np.ones(d), np.zeros(d)
    what0 = f"{name}(x, gamma=ones, beta=zeros, eps={eps}) for x of shape {x.shape}"
    z = strict_array(_call(function, (x, ones, zeros, eps), what0, x.shape, kind), what0, x.shape)
    x_hat = oracle(x, eps, None, None)
    if relative_error(z, x_hat, floor=1.0) > RTOL:
        cause = _affine_cause(z, x_hat, ones, zeros, _PREFIX[kind]) or _stats_cause(z, x, eps, axes, kind)
        if kind == "LayerNorm" and x.ndim >= 2 and "statistics are taken over" not in cause:
            cause = _token_alone_cause(function, x, eps, x_hat) or cause
        if kind == "LayerNorm" and not np.any(z):
            cause = _no_axis_cause(function, x, eps) or cause
        assert_close(z, x_hat, what0, f"torch {kind.lower()}, float64", RTOL, cause, floor=1.0,
                     probe=_probe(lambda e: oracle(x, e, None, None), eps, _PREFIX[kind]))
    what = f"{name}(x, gamma, beta, eps={eps}) for x of shape {x.shape}"
    y = strict_array(_call(function, (x, gamma, beta, eps), what, x.shape, kind), what, x.shape)
    expected = oracle(x, eps, gamma, beta)
    cause = _affine_cause(y, x_hat, gamma, beta, _PREFIX[kind])
    assert_close(y, expected, what, f"torch {kind.lower()}, float64", RTOL,
                 cause if cause is not None else _probe(lambda e: oracle(x, e, gamma, beta), eps, _PREFIX[kind]).cause(
                     y, expected, RTOL, float(np.max(np.abs(beta)) + np.max(np.abs(gamma))), None)
                 or tag("with gamma = 1 and beta = 0 your output is right, so look at how gamma and beta are "
                        "used: y = gamma * x_hat + beta, both of shape (d,), applied to every token.",
                        f"{_PREFIX[kind]}.affine_misapplied"),
                 floor=float(np.max(np.abs(beta)) + np.max(np.abs(gamma))))


def _no_axis_cause(function, x, eps) -> str | None:
    """An all-zero layernorm output: BatchNorm's axes, which are none for a single token? Ask on three tokens.

    Each value centred on itself gives zeros, and so does a function that returns zeros: only the
    second call tells them apart. BatchNorm code centres three tokens over axis 0, not over each token.
    """
    first = x.reshape(-1, x.shape[-1])[0]
    tokens = np.stack([first, 2.0 * first[::-1] + 1.0, first * first - 3.0])
    d = tokens.shape[-1]
    what = "layernorm(x, ...) for three tokens"
    try:
        out = call_learner(function, tokens.copy(), np.ones(d), np.zeros(d), eps, what=what)
    except LearnerError:
        return None
    if (type(out) is not np.ndarray or out.shape != tokens.shape or not np.all(np.isfinite(out))
            or not np.any(out) or not _centred_over(out, (0,)) or _centred_over(out, (1,))):
        return None
    return tag("every output is 0: each value was centred on itself, as if the mean were taken over no axis at all. "
               "For a single token that is what BatchNorm's axes, every axis but the last, amount to: none (and on "
               "three tokens your function centres each feature over the tokens). LayerNorm needs each token's own "
               "features: axis=-1, keepdims=True.", "ln.over_batch")


def _token_alone_cause(function, x, eps, x_hat) -> str | None:
    """If single tokens come out right but the batch does not, the axis or the broadcasting is wrong."""
    d = x.shape[-1]
    rows, expected = x.reshape(-1, d), x_hat.reshape(-1, d)
    for i in sorted({0, rows.shape[0] - 1}):
        what = f"layernorm(x[{i}], ...) for one token"
        try:
            alone = call_learner(function, rows[i].copy(), np.ones(d), np.zeros(d), eps, what=what)
        except LearnerError:
            return None
        if type(alone) is not np.ndarray or alone.shape != (d,) or relative_error(alone, expected[i]) > RTOL:
            return None
    return tag("one token at a time your function is right, but not on the whole array: the statistics are "
               "computed over, or broadcast against, the wrong axis. A mean without keepdims=True on a square "
               "input lines up token i's mean with feature i instead of with token i (x - x.mean(axis=-1) "
               "runs without an error when T == d). Use axis=-1, keepdims=True.", "ln.no_keepdims")


# ---------------------------------------------------------------------- layernorm


@check
def check_layernorm(layernorm, shape=None, eps=1e-5, seed=0, scale=1.0, offset=0.0, gamma=None, beta=None):
    """Compare ``layernorm(x, gamma, beta, eps)`` with torch's layer_norm for x: (..., d).

    Without ``shape``: the worked example (2, 4, 6, 8), a (2, 3, 5) batch with random gain and
    shift, a square (4, 4) input, and a nearly constant (3, 4) input with eps = 1.0.
    """
    if shape is None:
        cases = [(WORKED_EXAMPLE, 1e-5), (random_input((2, 3, 5), seed=seed), 1e-5),
                 (random_input((4, 4), seed=seed + 1), 1e-5),
                 (random_input((3, 4), seed=seed + 2, scale=1e-2, offset=3.0), 1.0)]
    else:
        cases = [(random_input(tuple(shape), seed=seed, scale=scale, offset=offset), eps)]
    for x, eps_case in cases:
        g, b = _params(x.shape[-1], seed, gamma, beta)
        _check_norm(layernorm, "layernorm", "LayerNorm", x, eps_case, g, b, (x.ndim - 1,), oracles.layer_norm)
        shown = "(2, 4, 6, 8)" if x is WORKED_EXAMPLE else f"shape {x.shape}"
        passed(f"layernorm matches torch.nn.functional.layer_norm for x of {shown}, eps={eps_case}")


# ---------------------------------------------------------------------- batch_norm


@check
def check_batch_norm(batch_norm, shape=None, eps=1e-5, seed=0, scale=1.0, offset=0.0, gamma=None, beta=None):
    """Compare ``batch_norm(x, gamma, beta, eps)`` with torch's batch_norm(training=True).

    Statistics over every axis but the last. Without ``shape``: a (2, 3, 5) batch of
    sequences, an (8, 4) batch of vectors, and a nearly constant (3, 2, 4) input with eps = 1.0.
    """
    if shape is None:
        cases = [(random_input((2, 3, 5), seed=seed), 1e-5), (random_input((8, 4), seed=seed + 1), 1e-5),
                 (random_input((3, 2, 4), seed=seed + 2, scale=1e-2, offset=-2.0), 1.0)]
    else:
        cases = [(random_input(tuple(shape), seed=seed, scale=scale, offset=offset), eps)]
    for x, eps_case in cases:
        if x.ndim < 2:
            raise ValueError("batch_norm needs at least two axes: (N, d)")
        g, b = _params(x.shape[-1], seed, gamma, beta)
        _check_norm(batch_norm, "batch_norm", "BatchNorm", x, eps_case, g, b, tuple(range(x.ndim - 1)),
                    oracles.batch_norm)
        passed(f"batch_norm matches torch.nn.functional.batch_norm(training=True) for x of shape {x.shape}, "
               f"eps={eps_case}")


# ------------------------------------------------------------------ the probe's targets
# Functions (B, T, d) -> (B, T, d) whose dependence on later positions is known by
# construction. They are what the probe is pointed at, not solutions of an exercise.


def _target_layer_norm(x):
    return oracles.layer_norm(np.asarray(x, dtype=np.float64), 1e-5)


def _target_batch_norm(x):
    return oracles.batch_norm(np.asarray(x, dtype=np.float64), 1e-5)


def _target_time_norm(x):
    """Each sequence and feature standardised over its positions (axis 1): a classic leak."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=1, keepdims=True)
    return centred / np.sqrt(np.mean(centred**2, axis=1, keepdims=True) + 1e-5)


def _target_prefix_norm(x):
    """Causal: position t standardised with the mean and variance of positions 0..t (per feature)."""
    x = np.asarray(x, dtype=np.float64)
    count = np.arange(1, x.shape[1] + 1).reshape(1, -1, 1)
    mean = np.cumsum(x, axis=1) / count
    mean_sq = np.cumsum(x * x, axis=1) / count
    return (x - mean) / np.sqrt(np.maximum(mean_sq - mean * mean, 0.0) + 1e-5)


def _target_lookahead(k):
    def lookahead(x):
        """Position s reads the token k places ahead (zero past the end): a leak of reach k."""
        x = np.asarray(x, dtype=np.float64)
        ahead = np.zeros_like(x)
        ahead[:, : max(x.shape[1] - k, 0)] = x[:, k:]
        return x - ahead
    return lookahead


FAINT_LEAK = 1e-11  # far below any tolerance (np.allclose, assert_close, math.isclose), far above rounding


def _target_faint_leak(reference: np.ndarray):
    """A leak of exactly FAINT_LEAK, whatever change a probe makes, on outputs between 1 and 3.

    Position s outputs 2 + tanh(x[:, s]) (causal, never near zero), plus FAINT_LEAK when any
    token after s differs from ``reference`` (or is missing). So the earlier outputs move by
    1e-11 however large or small the probe's change: an exact comparison always sees it
    (float64 resolves ~4e-16 at 3), any absolute or relative tolerance above 1e-11 never does.
    """
    reference = np.array(reference, dtype=np.float64, copy=True)

    def faint_leak(x):
        x = np.asarray(x, dtype=np.float64)
        out = 2.0 + np.tanh(x)
        if x.ndim != 3:
            return out + FAINT_LEAK
        for s in range(x.shape[1]):
            later, expected = x[:, s + 1:], reference[:, s + 1:]
            if later.shape != expected.shape or not np.array_equal(later, expected):
                out[:, s] += FAINT_LEAK
        return out

    return faint_leak


def _target_tanh(x):
    return np.tanh(np.asarray(x, dtype=np.float64))


@dataclass
class _Case:
    norm: Callable
    description: str
    x: np.ndarray
    t: int
    leaks: bool


class _Recorder:
    """Wraps a target so that the check sees every array the probe passed to it."""

    def __init__(self, norm):
        self.norm, self.inputs = norm, []

    def __call__(self, x):
        self.inputs.append(np.array(x, dtype=np.float64, copy=True))
        return self.norm(x)


def _probe_cases(shape, seed) -> list[_Case]:
    B, T, d = shape
    if T < 2:
        raise ValueError("the probe needs at least two positions, T >= 2")
    mid = min(T // 2, T - 2)  # a position with at least one token after it
    x = random_input(shape, seed=seed)
    padded = x.copy()
    cut = max(T // 2 - 1, 0)
    padded[:, cut + 1:] = 0.0  # every sequence ends at position cut; the rest is zero padding
    cases = [
        _Case(_target_layer_norm, "LayerNorm (statistics per token)", x, mid, False),
        _Case(_target_batch_norm, "BatchNorm over batch and positions", x, mid, True),
        _Case(_target_time_norm, "statistics over positions, per sequence", x, 0, True),
        _Case(_target_prefix_norm, "causal statistics over positions 0..t", x, mid, False),
        _Case(_target_tanh, "tanh, elementwise", x, 1, False),
        _Case(_target_batch_norm, "BatchNorm over batch and positions, at the last position", x, T - 1, False),
    ]
    if T >= 3:
        cases += [
            _Case(_target_lookahead(2), "a function whose position s reads position s + 2", x, 0, True),
            _Case(_target_lookahead(2), "a function whose position s reads position s + 2", x, T - 2, True),
            _Case(_target_lookahead(1), "a function whose position s reads position s + 1", x, T - 2, True),
        ]
    cases += [
        _Case(_target_batch_norm, "BatchNorm, on sequences zero-padded after position t", padded, cut, True),
        _Case(_target_faint_leak(x), f"a function whose outputs move by {FAINT_LEAK:.0e} when a later token changes",
              x, 0, True),
    ]
    return cases


def _changed_positions(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Positions (axis 1) where two (B, T, d) arrays differ anywhere."""
    return np.flatnonzero(np.any(a != b, axis=(0, 2)))


def _probe_cause(case: _Case, answer: bool, recorder: _Recorder) -> str:
    x, t, T = case.x, case.t, case.x.shape[1]
    calls = recorder.inputs
    if not calls:
        return tag("your probe never called norm, so its answer cannot depend on norm. Run norm on x and on a copy "
                   "of x whose tokens after t are changed, then compare the outputs at positions 0..t.",
                   "causal.norm_not_called")
    same = [c for c in calls if c.shape == x.shape]
    past = sorted({int(p) for c in same for p in _changed_positions(c, x) if p <= t})
    if past:
        return tag(f"your probe changed x at position(s) {past}, which are not after t = {t}. The future starts at "
                   f"t + 1: change x[:, t + 1:] only. (Changing position t changes output t even for LayerNorm.)",
                   "causal.changed_past")
    future = sorted({int(p) for c in same for p in _changed_positions(c, x) if p > t})
    shorter = [c for c in calls if c.shape != x.shape]
    if case.leaks and not answer:
        if not future and not shorter:
            padded = bool(t + 1 < T and np.all(x[:, t + 1:] == 0))
            return tag("none of the arrays your probe passed to norm differs from x after position t, so nothing "
                       "could change." + (" Here the tokens after t are zero padding: setting them to zero changes "
                                          "nothing. Add something nonzero instead (e.g. 1 + random noise)."
                                          if padded else " Did you modify x in place and then run norm on x twice?"),
                       "causal.change_can_be_zero" if padded else "causal.no_change")
        if future == [t + 1] and t + 2 < T and not shorter:
            return tag(f"your probe only changed token t + 1 = {t + 1}, but a leak can come from any later position "
                       f"(here {case.description}). Change every token after t: x[:, t + 1:].",
                       "causal.only_next_token")
        baseline = case.norm(x)
        change = np.zeros(t + 1)
        # every call the outputs 0..t can be compared from: the same shape, or a prefix such as x[:, :t + 1]
        prefixes = [c for c in calls if c.ndim == 3 and c.shape[0] == x.shape[0] and c.shape[2] == x.shape[2]
                    and c.shape[1] > t]
        for c in prefixes:
            diff = np.abs(case.norm(c)[:, : t + 1] - baseline[:, : t + 1])
            change = np.maximum(change, diff.max(axis=(0, 2)))
        if prefixes and np.any(change > 0):
            where = [int(p) for p in np.flatnonzero(change > 0)]
            biggest = float(change.max())
            if biggest < 1e-5:
                return tag(f"with the inputs your probe built, the outputs at positions <= t moved by up to "
                           f"{biggest:.1e}, yet it answered False: your comparison is too tolerant (np.allclose's "
                           "default atol is 1e-8 plus 1e-5 relative; torch.testing.assert_close's 1e-7 and 1e-7; "
                           "math.isclose's 1e-9 relative). Any change counts: compare exactly (np.array_equal). A "
                           "larger change to the future does not help: this leak stays the same size.",
                           "causal.tolerant_comparison")
            if t not in where:
                return tag(f"with the inputs your probe built, outputs moved at position(s) {where} but not at "
                           f"t = {t}, yet it answered False. Compare every position 0..t (out[:, :t + 1]), not only "
                           "position t or the last one you kept.", "causal.earlier_positions_skipped")
            return tag(f"with the inputs your probe built, outputs moved at position(s) {where} <= t, yet it answered "
                       "False. Check the slice you compare: out[:, :t + 1] (positions 0..t).",
                       "causal.position_t_skipped")
        return f"norm here is {case.description}, which does read tokens after t; your probe missed it."
    if t == T - 1:
        return tag("t is the last position: there are no tokens after it, so nothing can leak and the answer is "
                   "False.", "causal.last_position")
    baseline = case.norm(x)
    moved = sorted({int(p) for c in same for p in _changed_positions(case.norm(c), baseline)})
    if moved and max(moved) > t and all(p > t for p in moved):
        return tag(f"norm here is {case.description}, which never reads the future; the outputs that moved are at "
                   f"positions {moved}, all after t = {t}. Compare only positions 0..t: out[:, :t + 1].",
                   "causal.compares_future")
    return (f"norm here is {case.description}, which never reads tokens after t. Check that you compare the "
            "outputs at positions 0..t only, after changing only the tokens after t.")


@check
def check_leaks_future(leaks_future, shape=(2, 6, 4), seed=0):
    """Point ``leaks_future(norm, x, t)`` at functions with known answers; diagnose wrong ones.

    x has ``shape`` (B, T, d). The functions: LayerNorm, BatchNorm, statistics over positions,
    causal prefix statistics, tanh, look-ahead functions of reach 1 and 2, BatchNorm on
    zero-padded sequences, and a leak of size 1e-11 (far below any tolerance, whatever the change).
    """
    shape = tuple(shape)
    cases = _probe_cases(shape, seed)
    for case in cases:
        recorder = _Recorder(case.norm)
        what = f"leaks_future(norm, x, t={case.t}) for norm = {case.description}, x of shape {shape}"
        answer = call_learner(leaks_future, recorder, case.x, case.t, what=what, shape_rule=SHAPE_RULES["probe"])
        if not isinstance(answer, (bool, np.bool_)):
            kind = type(answer).__module__ + "." + type(answer).__name__
            hint, mistake = "", "causal.not_a_bool"
            if isinstance(answer, np.ndarray):
                hint = f" (an array of shape {answer.shape}): reduce it to one answer, e.g. bool(np.any(changed))"
            elif answer is None:
                hint, mistake = ": did you forget the return statement?", "common.returned_none"
            fail(f"{what} should return True or False, but returned {kind}{hint}.", mistake)
        if bool(answer) != case.leaks:
            cause = _probe_cause(case, bool(answer), recorder)
            fail(f"{what} returned {bool(answer)}, expected {case.leaks}.\n"
                 f"  x = {preview(case.x)}\n"
                 f"Likely cause: {cause}", *ids_of(cause))
    passed(f"leaks_future answers all {len(cases)} cases right for x of shape {shape} (causal and leaky functions, "
           "a leak that skips t, a leak of 1e-11, zero padding)")


# ------------------------------------------------------------ running statistics (train / eval)
# The oracle is torch.nn.functional.batch_norm with running buffers, in float64: training=True
# updates the buffers in place (momentum convention running = (1 - m) running + m batch_stat,
# unbiased batch variance) and normalises with the batch's biased statistics; training=False
# normalises with the buffers alone. The learner's functions return new buffers instead.

TRAIN_SHAPE_RULE = ("batch_norm_train must accept any shape (..., d) with at least two axes: its statistics are over "
                    "every axis but the last: axis=tuple(range(x.ndim - 1)), and the running statistics have shape "
                    "(d,).")
EVAL_SHAPE_RULE = ("batch_norm_eval must accept any shape (..., d), a single token (d,) included: running_mean and "
                   "running_var have shape (d,) and line up with the last axis of x without any reshaping.")
RUNNING_MATCH = 1e-9  # how closely new running statistics must fit a candidate mistake to be named


def _probe(reference, eps, prefix):
    """A Probe of ``reference(eps)`` at other eps values and in lower precision, with this notebook's eps ids."""
    return Probe(lambda e, dtype: oracles.in_precision(dtype, reference, e), eps,
                 eps_ids=(f"{prefix}.eps_hardcoded", f"{prefix}.eps_ignored"))


def _torch_running(x, gamma, beta, running_mean, running_var, training, momentum, eps):
    """(y, new running mean, new running var) from torch's batch_norm on x: (..., d), float64
    (or in the precision of ``oracles.in_precision``)."""
    import torch

    d = x.shape[-1]
    flat = oracles._tensor(np.asarray(x, dtype=np.float64).reshape(-1, d))
    mean = oracles._tensor(np.array(running_mean, dtype=np.float64))
    var = oracles._tensor(np.array(running_var, dtype=np.float64))
    weight = None if gamma is None else oracles._tensor(gamma)
    bias = None if beta is None else oracles._tensor(beta)
    with torch.no_grad():
        y = torch.nn.functional.batch_norm(flat, mean, var, weight, bias, training=training, momentum=momentum, eps=eps)
    return oracles._out(y).reshape(x.shape), oracles._out(mean), oracles._out(var)


def _running_start(x, seed):
    """Running statistics far from the batch's own: a mix-up of the two can never pass unseen."""
    d = x.shape[-1]
    mu, var = _two_pass(x.reshape(-1, d), (0,))
    mu, var = mu.reshape(d), var.reshape(d)
    rng = np.random.default_rng(seed + 303)
    sign = np.where(rng.random(d) < 0.5, -1.0, 1.0)
    running_mean = mu + sign * (0.5 + rng.random(d)) * (np.sqrt(var) + 1.0)
    running_var = (2.0 + rng.random(d)) * var + 0.5 + rng.random(d)
    return running_mean, running_var


def _call_tracking(function, args, names, what, shape_rule):
    """The learner's result on private copies, and the names of the arguments it changed in place."""
    originals = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    result = run_learner(function, copies, {}, what=what, shape_rule=shape_rule)
    changed = [name for name, original, copy in zip(names, originals, copies, strict=True)
               if isinstance(original, np.ndarray) and not np.array_equal(original, copy)]
    return result, changed


TRAIN_NAMES = ("x", "gamma", "beta", "running_mean", "running_var", "momentum", "eps")
EVAL_NAMES = ("x", "gamma", "beta", "running_mean", "running_var", "eps")


def _in_place_failure(what, changed, cause):
    """Fail for arguments the learner's function changed in place; ``cause`` explains a running statistic."""
    running = [name for name in changed if name.startswith("running_")]
    others = [name for name in changed if not name.startswith("running_")]
    if others:
        fail(f"{what} modified its input {', '.join(others)} in place (e.g. x -= mu).\n"
             "The caller still needs it: work on a new array instead.", "common.modified_input")
    if running:
        fail(f"{what} changed the caller's {' and '.join(running)} in place.\n"
             f"Likely cause: {cause}", *ids_of(cause))


def _train_result(result, what, x_shape, changed):
    """Validate (y, new_mean, new_var); a missing tuple or an in-place update is named first."""
    d = x_shape[-1]
    in_place = tag("the running statistics were updated in place (running_mean *= ..., running_mean[...] = ..., or "
                   "+=), so the caller's arrays changed. batch_norm_train must leave its inputs as they are and "
                   "return new arrays: y, new_mean, new_var.", "bn.running_in_place")
    if not isinstance(result, tuple) or len(result) != 3:
        if isinstance(result, np.ndarray) and result.shape == tuple(x_shape):
            not_returned = tag("your function returned y alone: the new running statistics never reach the caller. "
                               "Return the three results as a tuple: y, new_mean, new_var (new arrays, computed from "
                               "the inputs, which stay unchanged).", "bn.running_not_returned")
            if any(name.startswith("running_") for name in changed):
                fail(f"{what} returned only y, and changed the caller's running statistics in place.\n"
                     f"Likely cause: {not_returned} And {in_place}", "bn.running_not_returned", "bn.running_in_place")
            fail(f"{what} returned one array of shape {result.shape}, expected a tuple (y, new_mean, new_var).\n"
                 f"Likely cause: {not_returned}", *ids_of(not_returned))
        kind = type(result).__module__ + "." + type(result).__name__
        size = f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
        mistake = "common.returned_none" if result is None else "common.not_an_array"
        fail(f"{what} returned {kind}{size}, expected a tuple of three arrays (y, new_mean, new_var): y of shape "
             f"{tuple(x_shape)}, the two running statistics of shape ({d},).", mistake)
    if changed:
        _in_place_failure(what, changed, in_place)
    y = strict_array(result[0], f"y, the first result of {what}", x_shape)
    stats = []
    for index, label in ((1, "new_mean"), (2, "new_var")):
        value = result[index]
        if isinstance(value, np.ndarray) and value.shape != (d,):
            fail(f"{label}, result {index + 1} of {what}, has shape {value.shape}, expected ({d},).\n"
                 f"Likely cause: {_running_shape_cause(value.shape, x_shape)}",
                 *ids_of(_running_shape_cause(value.shape, x_shape)))
        stats.append(strict_array(value, f"{label}, result {index + 1} of {what}", (d,)))
    return y, stats[0], stats[1]


def _running_shape_cause(shape, x_shape):
    """Why running statistics came back with another shape than (d,)."""
    ndim = len(x_shape)
    d = x_shape[-1]
    reductions = {}
    for axes in [(0,), tuple(range(ndim)), (ndim - 1,), tuple(range(1, ndim))]:
        if not axes or max(axes) >= ndim:
            continue
        kept = tuple(s for i, s in enumerate(x_shape) if i not in axes)
        reductions.setdefault(kept, axes)
    if tuple(shape) in reductions and tuple(shape) != (d,):
        axes = reductions[tuple(shape)]
        return tag(f"the running statistics are taken over axis={axes if len(axes) > 1 else axes[0]}, which leaves "
                   f"shape {tuple(shape)}. One running mean and one running variance per feature come from every "
                   f"axis but the last: axis=tuple(range(x.ndim - 1)), shape ({d},).", "bn.running_wrong_axes")
    return tag(f"one running mean and one running variance per feature: shape ({d},). Statistics over "
               "tuple(range(x.ndim - 1)) have that shape.", "bn.running_wrong_axes")


def _weights(momentum):
    """Candidate weights of the batch statistic in the update, with the mistakes each one means."""
    found = [(momentum, [])]
    reversed_ = tag(f"the weights are swapped: you kept {1 - momentum:g} of the batch statistic and {momentum:g} of "
                    f"the old running value. In PyTorch's convention (the one this exercise uses), momentum = "
                    f"{momentum:g} is the weight of the NEW batch statistic: running = (1 - momentum) * running + "
                    "momentum * batch_stat. Keras' momentum means the opposite.", "bn.momentum_reversed")
    ignored = tag("the running statistics were replaced by the batch statistics (a weight of 1 on the batch): "
                  "momentum is ignored. Keep (1 - momentum) of the old running value.", "bn.momentum_ignored")
    not_updated = tag("the running statistics came back unchanged: the batch statistics were never mixed into them. "
                      "Return (1 - momentum) * running + momentum * batch_stat.", "bn.running_not_updated")
    hardcoded = tag(f"you used momentum = 0.1 whatever momentum was passed (here momentum = {momentum:g}): use the "
                    "momentum argument.", "bn.momentum_hardcoded")
    if abs(momentum - 0.5) > 1e-12:
        found.append((1 - momentum, [reversed_]))
    if abs(momentum - 1.0) > 1e-12:
        found.append((1.0, [ignored]))
    if momentum > 1e-12:
        found.append((0.0, [not_updated]))
    if abs(momentum - 0.1) > 1e-12 and abs(momentum - 0.9) > 1e-12:
        found.append((0.1, [hardcoded]))
        if abs(momentum - 0.5) > 1e-12:
            found.append((0.9, [hardcoded, reversed_]))
    return found


def _explain_update(new, old, statistics, momentum):
    """The simplest (weight, statistic) pair that explains a learner's new running statistic."""
    matches = []
    for weight, weight_mistakes in _weights(momentum):
        for value, stat_mistakes in statistics:
            if weight == 0.0 and stat_mistakes:
                continue  # with weight 0 the statistic cannot be seen
            predicted = (1 - weight) * old + weight * value
            if relative_error(new, predicted, floor=1.0) <= RUNNING_MATCH:
                matches.append(weight_mistakes + stat_mistakes)
    if not matches:
        return None
    fewest = min(len(m) for m in matches)
    return [m for m in matches if len(m) == fewest][0]


def _running_causes(x, eps, momentum, running_mean, running_var, new_mean, new_var, mean_ok, var_ok):
    """Plain words (tagged) for what is wrong with the new running statistics."""
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    n = flat.shape[0]
    mu, var = (a.reshape(d) for a in _two_pass(flat, (0,)))
    unbiased = var * n / (n - 1)
    whole_mean, whole_var = float(np.mean(x)), float(np.mean((x - np.mean(x)) ** 2))
    wrong_axes = tag("the batch statistics in the update are taken over the whole array at once (no axis=), one "
                     "number for every feature. Take them per feature, over every axis but the last.",
                     "bn.running_wrong_axes")
    biased = tag(f"the running variance is updated with the biased batch variance (dividing by n = {n}). PyTorch "
                 f"stores the unbiased one, dividing by n - 1 = {n - 1}: the biased variance times n / (n - 1), even "
                 "though the normalisation itself uses the biased one.", "bn.running_var_biased")
    std = tag("the running variance is updated with a standard deviation (a square root) instead of a variance: "
              "running_var keeps variances, and only the normalisation takes the square root.", "bn.running_std")
    with_eps = tag("eps was added to the variance before it was stored: eps belongs to the normalisation only, "
                   "inside its square root; the running variance keeps the plain unbiased batch variance.",
                   "bn.running_var_eps")
    causes = []
    if not mean_ok:
        found = _explain_update(new_mean, running_mean, [(mu, []), (np.full(d, whole_mean), [wrong_axes])], momentum)
        causes.append(("new_mean", found))
    if not var_ok:
        statistics = [(unbiased, []), (var, [biased]), (np.full(d, whole_var * n / (n - 1)), [wrong_axes]),
                      (np.full(d, whole_var), [wrong_axes, biased]), (np.sqrt(unbiased), [std]),
                      (np.sqrt(var), [std, biased]), (np.sqrt(var + eps), [std, biased, with_eps]),
                      (np.sqrt(unbiased + eps), [std, with_eps]), (unbiased + eps, [with_eps]),
                      (var + eps, [biased, with_eps])]
        causes.append(("new_var", _explain_update(new_var, running_var, statistics, momentum)))
    texts, ids = [], []
    for label, found in causes:
        if found is None:
            texts.append(f"{label}: no classic mistake matched; the update is "
                         "(1 - momentum) * old + momentum * batch_stat, per feature.")
            continue
        for mistake in found:
            if mistake not in texts:
                texts.append(mistake)
                ids.extend(ids_of(mistake))
    if not texts:
        return None
    return tag(" ".join(f"({i}) {t}" for i, t in enumerate(texts, 1)) if len(texts) > 1 else texts[0], *ids)


def _uses_running_cause(z, x, eps, pairs) -> str | None:
    """A training output normalised with running statistics instead of the batch's."""
    for mean, var, words in pairs:
        with np.errstate(all="ignore"):
            candidate = (x - mean) / np.sqrt(var + eps)
        if np.all(np.isfinite(candidate)) and relative_error(z, candidate, floor=1.0) <= MATCH:
            return tag(f"in training mode your output is normalised with {words}. Training mode normalises with the "
                       "statistics of the current batch (mean and biased variance over every axis but the last) and "
                       "only updates the running statistics; they are used in evaluation mode.",
                       "bn.train_uses_running")
    return None


def _identity_affine(d, gamma, beta):
    """The gain and shift handed to the learner (ones and zeros for None), and how ``what`` shows them."""
    if gamma is None:
        return np.ones(d), np.zeros(d), "gamma=ones, beta=zeros"
    return gamma, beta, "gamma, beta"


def _train_call(batch_norm_train, x, gamma, beta, running_mean, running_var, momentum, eps):
    """One call of the learner's batch_norm_train on x: (..., d), next to torch's answer.

    ``gamma`` and ``beta``: (d,) arrays, or None for the identity (the learner gets ones and
    zeros, torch no affine). Returns (what, (y, new_mean, new_var), torch's (y, new_mean,
    new_var)); a failing call, a malformed result or an in-place update fails here.
    """
    g, b, shown = _identity_affine(x.shape[-1], gamma, beta)
    what = (f"batch_norm_train(x, {shown}, running_mean, running_var, momentum={momentum:g}, eps={eps:g}) "
            f"for x of shape {x.shape}")
    result, changed = _call_tracking(batch_norm_train, (x, g, b, running_mean, running_var, momentum, eps),
                                     TRAIN_NAMES, what, TRAIN_SHAPE_RULE)
    learner = _train_result(result, what, x.shape, changed)
    return what, learner, _torch_running(x, gamma, beta, running_mean, running_var, True, momentum, eps)


def _eval_call(batch_norm_eval, x, gamma, beta, running_mean, running_var, eps):
    """One call of the learner's batch_norm_eval on x: (..., d), next to torch's answer.

    ``gamma`` and ``beta``: as in ``_train_call``. Returns (what, the raw result, the names of
    the arguments changed in place, torch's y); the caller validates the result, because an
    in-place update is explained from the output when it can be.
    """
    g, b, shown = _identity_affine(x.shape[-1], gamma, beta)
    what = f"batch_norm_eval(x, {shown}, running_mean, running_var, eps={eps:g}) for x of shape {x.shape}"
    result, changed = _call_tracking(batch_norm_eval, (x, g, b, running_mean, running_var, eps),
                                     EVAL_NAMES, what, EVAL_SHAPE_RULE)
    expected, _, _ = _torch_running(x, gamma, beta, running_mean, running_var, False, 0.1, eps)
    return what, result, changed, expected


def _assert_affine(y, expected, x_hat, gamma, beta, what, oracle, probe=None):
    """y for the real gain and shift, once the output for gamma = 1 and beta = 0 was right.

    x_hat: the right normalised output; a wrong y is a misplaced gain or shift (bn ids), or what ``probe`` finds.
    """
    floor = float(np.max(np.abs(beta)) + np.max(np.abs(gamma)))
    cause = _affine_cause(y, x_hat, gamma, beta, "bn")
    if cause is None and probe is not None and relative_error(y, expected, floor) > RTOL:
        cause = probe.cause(y, expected, RTOL, floor, None)
    assert_close(y, expected, what, oracle, RTOL,
                 cause or tag("with gamma = 1 and beta = 0 your output is right, so look at how gamma and "
                              "beta are used: "
                              "y = gamma * x_hat + beta.", "bn.affine_misapplied"),
                 floor=floor)


@check
def check_batch_norm_train(batch_norm_train, shape=None, momentum=0.1, eps=1e-5, seed=0, scale=1.0, offset=0.0,
                           gamma=None, beta=None):
    """Compare ``batch_norm_train(x, gamma, beta, running_mean, running_var, momentum, eps)`` with torch.

    Oracle: torch.nn.functional.batch_norm(training=True) with running buffers: the output, and
    the buffers it updates (momentum convention running = (1 - m) running + m batch_stat,
    unbiased batch variance). The learner returns (y, new_mean, new_var) and must leave its
    inputs unchanged. Without ``shape``: a (2, 3, 5) batch of sequences, an (8, 4) batch with
    momentum 0.3, and a nearly constant (3, 2, 4) input with eps = 1.0.
    """
    if shape is None:
        cases = [(random_input((2, 3, 5), seed=seed), 1e-5, 0.1), (random_input((8, 4), seed=seed + 1), 1e-5, 0.3),
                 (random_input((3, 2, 4), seed=seed + 2, scale=1e-2, offset=-2.0), 1.0, 0.1)]
    else:
        cases = [(random_input(tuple(shape), seed=seed, scale=scale, offset=offset), eps, momentum)]
    for x, eps_case, m in cases:
        if x.ndim < 2 or x.size // x.shape[-1] < 2:
            raise ValueError("batch_norm_train needs at least two tokens per feature: (N, d) with N >= 2")
        d = x.shape[-1]
        running_mean, running_var = _running_start(x, seed)
        ones, zeros = np.ones(d), np.zeros(d)
        what0, (z, new_mean, new_var), (x_hat, right_mean, right_var) = _train_call(
            batch_norm_train, x, None, None, running_mean, running_var, m, eps_case)
        if relative_error(z, x_hat, floor=1.0) > RTOL:
            axes = tuple(range(x.ndim - 1))
            cause = (_uses_running_cause(z, x, eps_case, [
                (running_mean, running_var, "the running statistics it was given (running_mean, running_var)"),
                (right_mean, right_var, "the updated running statistics"),
                (new_mean, new_var, "the new running statistics it returns")])
                or _affine_cause(z, x_hat, ones, zeros, "bn") or _stats_cause(z, x, eps_case, axes, "BatchNorm"))
            assert_close(z, x_hat, f"y from {what0}", "torch batch_norm(training=True), float64", RTOL, cause,
                         floor=1.0, probe=_probe(lambda e, x=x: oracles.batch_norm(x, e), eps_case, "bn"))
        mean_ok = relative_error(new_mean, right_mean, floor=1.0) <= RTOL
        var_ok = relative_error(new_var, right_var, floor=1.0) <= RTOL
        if not (mean_ok and var_ok):
            cause = _running_causes(x, eps_case, m, running_mean, running_var, new_mean, new_var, mean_ok, var_ok)
            label, got, expected = (("new_mean", new_mean, right_mean) if not mean_ok else
                                    ("new_var", new_var, right_var))
            both = "" if mean_ok or var_ok else (f"\n  (new_var is wrong too: expected {preview(right_var)}, "
                                                 f"got {preview(new_var)})")
            fail(f"{label} from {what0} is wrong.\n"
                 f"  running_mean, running_var passed in: {preview(running_mean)}, {preview(running_var)}\n"
                 f"  expected (torch batch_norm's updated buffers, float64): {preview(expected)}\n"
                 f"  got:{' ' * 52}{preview(got)}{both}\n"
                 f"Likely cause: {cause or 'no classic mistake matched.'}", *ids_of(cause))
        g, b = _params(d, seed, gamma, beta)
        what, (y, _, _), (expected, _, _) = _train_call(batch_norm_train, x, g, b, running_mean, running_var, m,
                                                        eps_case)
        _assert_affine(y, expected, x_hat, g, b, f"y from {what}", "torch batch_norm(training=True), float64",
                       _probe(lambda e, x=x, g=g, b=b: oracles.batch_norm(x, e, g, b), eps_case, "bn"))
        passed(f"batch_norm_train matches torch's batch_norm(training=True) and its updated running statistics for x "
               f"of shape {x.shape}, momentum={m:g}, eps={eps_case:g}; the inputs are unchanged")


def _eval_cause(z, x, eps, running_mean, running_var) -> str | None:
    """Read the centre and the scale the learner used off z = (x - c) / s, per feature."""
    d = x.shape[-1]
    flat_x, flat_z = x.reshape(-1, d), z.reshape(-1, d)
    if flat_x.shape[0] < 2:
        return None
    mx, mz = flat_x.mean(axis=0), flat_z.mean(axis=0)
    vx = np.mean((flat_x - mx) ** 2, axis=0)
    if np.any(vx <= 0):
        return None
    slope = np.mean((flat_x - mx) * (flat_z - mz), axis=0) / vx
    intercept = mz - slope * mx
    size = max(float(np.max(np.abs(flat_z))), 1.0)
    if float(np.max(np.abs(flat_z - (slope * flat_x + intercept)))) > 1e-9 * size or np.any(slope <= 0):
        return None  # not one affine map per feature: not a normalisation with fixed statistics
    centre, implied = -intercept / slope, 1.0 / slope
    n = flat_x.shape[0]
    mu, var = (a.reshape(d) for a in _two_pass(flat_x, (0,)))
    batch = tag("in evaluation mode your function normalises with statistics of the batch it is given. Evaluation "
                "mode uses running_mean and running_var alone, whatever batch (or single token) comes in: the "
                "batch's own statistics must not enter.", "bn.eval_uses_batch_stats")
    not_centred = tag("you did not subtract running_mean: the output is x divided by the scale.", "bn.not_centred")
    centres = [(running_mean, []), (mu, [batch]), (np.zeros(d), [not_centred])]
    centre_mistakes = None
    for value, mistakes in centres:
        if relative_error(centre, value, floor=1.0) <= 1e-7:
            centre_mistakes = mistakes
            break
    if centre_mistakes is None:
        return None
    statistics = [Statistic(running_var), Statistic(var, [batch])]
    if n > 1:
        statistics.append(Statistic(var * n / (n - 1), [batch]))
    maps = [
        Map(lambda v: np.sqrt(v + eps)),
        Map(lambda v: np.sqrt(v) + eps, [tag("eps is outside the square root: sqrt(running_var) + eps instead of "
                                             "sqrt(running_var + eps).", "bn.eps_outside_sqrt")]),
        Map(lambda v: v + eps, [tag("you divided by the variance (plus eps) instead of its square root.",
                                    "bn.no_sqrt")]),
        Map(lambda v: v, [tag("you divided by the variance instead of sqrt(running_var + eps).", "bn.no_sqrt",
                              "bn.eps_ignored")]),
        Map(lambda v: np.ones_like(v), [tag("you did not divide by sqrt(running_var + eps) at all.",
                                            "bn.not_scaled")]),
    ]
    if eps > 0:
        maps.append(Map(lambda v: np.sqrt(v), [tag(f"eps is ignored: you divided by sqrt(running_var), but eps = "
                                                   f"{eps} was passed.", "bn.eps_ignored")]))
    for fixed, shown in FIXED_EPS:
        if eps != fixed:
            maps.append(Map(lambda v, fixed=fixed: np.sqrt(v + fixed),
                            [tag(f"you used eps = {shown} whatever eps was passed (here eps = {eps}): use the eps "
                                 "argument.", "bn.eps_hardcoded")]))
    explanations = explain_scale(implied, statistics, maps, RUNNING_MATCH)
    if explanations is None:
        return None
    merged = []
    for mistakes in explanations:
        combined = []
        for mistake in centre_mistakes + mistakes:
            if str(mistake) not in [str(c) for c in combined]:
                combined.append(mistake)
        merged.append(combined)
    return describe(merged)


@check
def check_batch_norm_eval(batch_norm_eval, shape=None, eps=1e-5, seed=0, scale=1.0, offset=0.0, gamma=None,
                          beta=None):
    """Compare ``batch_norm_eval(x, gamma, beta, running_mean, running_var, eps)`` with torch's eval mode.

    Oracle: torch.nn.functional.batch_norm(training=False): the running statistics alone, for any
    shape (..., d). They are chosen far from the batch's own statistics, so a batch statistic in
    the formula cannot pass. Without ``shape``: a (2, 3, 5) batch, a (6, 4) batch with eps = 1.0
    and a single token of shape (5,).
    """
    if shape is None:
        cases = [(random_input((2, 3, 5), seed=seed), 1e-5), (random_input((6, 4), seed=seed + 1), 1.0),
                 (random_input((5,), seed=seed + 2), 1e-5)]
    else:
        cases = [(random_input(tuple(shape), seed=seed, scale=scale, offset=offset), eps)]
    for x, eps_case in cases:
        d = x.shape[-1]
        running_mean, running_var = _running_start(x, seed)
        ones, zeros = np.ones(d), np.zeros(d)
        what0, result, changed, x_hat = _eval_call(batch_norm_eval, x, None, None, running_mean, running_var, eps_case)
        updates = tag("evaluation mode changed the running statistics in place. Evaluation only reads "
                      "running_mean and running_var; they change in training mode only, and there as new arrays.",
                      "bn.eval_updates_running")
        z = None
        if not changed:
            z = strict_array(result, what0, x.shape)
        if changed:
            also = ""
            if type(result) is np.ndarray and result.shape == x.shape and np.all(np.isfinite(result)):
                extra = _eval_cause(np.array(result, dtype=np.float64), x, eps_case, running_mean, running_var)
                if extra is None and relative_error(result, x_hat, floor=1.0) > RTOL and x.ndim >= 2:
                    extra = tag("the output does not come from the running statistics you were given: normalise "
                                "with them as they are.", "bn.eval_uses_batch_stats")
                if extra:
                    also = f" Also: {extra}"
                    updates = tag(str(updates) + also, *ids_of(updates, extra))
            _in_place_failure(what0, changed, updates)
        if relative_error(z, x_hat, floor=1.0) > RTOL:
            cause = (_affine_cause(z, x_hat, ones, zeros, "bn")
                     or _eval_cause(z, x, eps_case, running_mean, running_var))
            if cause is None and x.ndim == 1:
                cause = tag("on a single token the output is wrong; if your function takes statistics of x at all, "
                            "those are batch statistics. Evaluation mode uses running_mean and running_var alone.",
                            "bn.eval_uses_batch_stats") if not np.any(z) else None
            assert_close(z, x_hat, what0, "torch batch_norm(training=False), float64", RTOL, cause, floor=1.0,
                         probe=_probe(lambda e, x=x, mean=running_mean, var=running_var:
                                      _torch_running(x, None, None, mean, var, False, 0.1, e)[0], eps_case, "bn"))
        g, b = _params(d, seed, gamma, beta)
        what, result, changed, expected = _eval_call(batch_norm_eval, x, g, b, running_mean, running_var, eps_case)
        if changed:
            _in_place_failure(what, changed, updates)
        y = strict_array(result, what, x.shape)
        _assert_affine(y, expected, x_hat, g, b, what, "torch batch_norm(training=False), float64",
                       _probe(lambda e, x=x, g=g, b=b, mean=running_mean, var=running_var:
                              _torch_running(x, g, b, mean, var, False, 0.1, e)[0], eps_case, "bn"))
        passed(f"batch_norm_eval matches torch's batch_norm(training=False) for x of shape {x.shape}, "
               f"eps={eps_case:g}, using the running statistics only; the inputs are unchanged")
