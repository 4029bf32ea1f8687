"""Checks for 03_backward: LayerNorm's Jacobian, its fast VJP, and the full backward.

Oracles: torch.nn.functional.layer_norm with autograd (float64), float64 central finite
differences, and the algebraic properties of the Jacobian (symmetric, kills 1 and x_hat,
s*J is a rank d-2 orthogonal projection when eps = 0). When an answer is wrong, the
diagnosis comes from the same properties: they say which term of the formula is off.

Every diagnosis carries the ids of the mistakes it names (``grader.catalogue.backward``).
A wrong Jacobian or VJP is first read term by term (``_structure``): the scale it divided
by, the factor of its mean term and of its variance term, and the vectors its outer
product is built from; every mistake found is named, two at once included. Only what that
reading cannot explain falls back to the properties above.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader import oracles
from grader.checks._scales import Map, Statistic, describe, explain_scale
from grader.compare import (
    Probe,
    assert_close,
    call_learner,
    check,
    fail,
    ids_of,
    measure_learner_memory,
    passed,
    preview,
    strict_array,
    tag,
    unproven,
)
from grader.numerics import central_difference_jacobian, random_input, relative_error

WORKED_EXAMPLE = np.array([2.0, 4.0, 6.0, 8.0])
RTOL = 1e-7          # float64 formulas agree to ~1e-13; anything above 1e-7 is another formula
FD_RTOL = 1e-6       # central differences are good to ~1e-9 relative on these inputs
SAME = 1e-9          # a candidate formula "is" the answer when they agree this well (rounding: ~1e-13)
SCALE_MATCH = 1e-8   # the scale read off an answer is exact to ~1e-12; wrong answers differ by more than RTOL
TERM_MATCH = 1e-7    # the factors of the mean and variance terms, read off the answer
TOKEN_RULE = ("x is one token, a vector of shape (d,) (d can be anything from 1 up); g has the same shape. "
              "Use x.size or x.shape[-1] for d, and no fixed number of axes.")
BATCH_RULE = ("layer_norm_backward must accept any shape (..., d): per-token statistics over the last axis "
              "(axis=-1, keepdims=True), and dgamma, dbeta summed over every leading axis, "
              "axis=tuple(range(x.ndim - 1)), whatever their number.")

# ------------------------------------------------------------------ the mistakes, as sentences with ids
UNBIASED = tag("you used the unbiased variance (dividing by d - 1: np.var(ddof=1) or torch.var's default). LayerNorm "
               "divides by d.", "bwd.unbiased_variance")
OUTSIDE = tag("eps is outside the square root: s must be sqrt(var + eps), not sqrt(var) + eps.", "bwd.eps_outside_sqrt")
BY_VARIANCE = tag("you divided by the variance instead of s = sqrt(var + eps).", "bwd.divided_by_variance")
NO_DIVISION = tag("you did not divide by s = sqrt(var + eps).", "bwd.no_division_by_s")
SIGN = tag("the sign is flipped.", "bwd.sign_flipped")
TIMES_D = tag("the result is d times too large: a sum where a mean belongs (1/d missing).", "bwd.sum_not_mean")
OVER_D = tag("the result is d times too small: an extra 1/d factor.", "bwd.extra_one_over_d")
WRONG_FACTOR = "bwd.wrong_factor"


def _eps_ignored(eps: float) -> str:
    return tag(f"eps is ignored: s = sqrt(var) but eps = {eps} was passed; use sqrt(var + eps).", "bwd.eps_ignored")


def _eps_fixed(eps: float) -> str:
    return tag(f"eps is fixed at 1e-5 whatever eps is passed (here eps = {eps}): use the eps argument.",
               "bwd.eps_hardcoded")


# the terms of J = (I - (1/d) 1 1^T - (1/d) x_hat x_hat^T) / s, and of J g, in the words of each exercise
TERMS = {
    "jacobian": {
        "mean_missing": tag("the mean term -(1/d) 1 1^T, from d(mu)/dx_j = 1/d, is missing: the rows of J do not sum "
                            "to zero (J @ ones(d) should be 0).", "bwd.mean_term_missing"),
        "mean_sum": tag("the mean term is 1 1^T without its 1/d (a sum where a mean belongs): it is -(1/d) 1 1^T, "
                        "from d(mu)/dx_j = 1/d, and the rows of J do not sum to zero.", "bwd.sum_not_mean"),
        "mean_factor": tag("the mean term has the wrong factor: it is -(1/d) 1 1^T, from d(mu)/dx_j = 1/d, and the "
                           "rows of J do not sum to zero.", WRONG_FACTOR),
        "var_missing": tag("the variance term -(1/d) x_hat x_hat^T, from d(s)/dx_j = x_hat_j / d, is missing "
                           "(J @ x_hat should be almost 0).", "bwd.variance_term_missing"),
        "var_sum": tag("the variance term is x_hat x_hat^T without its 1/d (a sum where a mean belongs): it is "
                       "-(1/d) x_hat x_hat^T.", "bwd.sum_not_mean"),
        "var_factor": tag("the variance term has the wrong factor: it is -(1/d) x_hat x_hat^T, from d(s)/dx_j = "
                          "x_hat_j / d (the 2 of d(var)/dx_j cancels the 1/2 of the square root).", WRONG_FACTOR),
        "x_instead": tag("the outer product is built from x instead of x_hat: the variance term is -(1/d) x_hat "
                         "x_hat^T, with x_hat = (x - mu) / s on both sides.", "bwd.x_instead_of_x_hat"),
    },
    "vjp": {
        "mean_missing": tag("the -mean(g) term is missing, so the result does not sum to zero.",
                            "bwd.mean_term_missing"),
        "mean_sum": tag("you used sum(g) instead of mean(g), so the result does not sum to zero.", "bwd.sum_not_mean"),
        "mean_factor": tag("the -mean(g) term has the wrong factor, so the result does not sum to zero.", WRONG_FACTOR),
        "var_missing": tag("the -mean(g * x_hat) * x_hat term is missing, so the component along x_hat is wrong.",
                           "bwd.variance_term_missing"),
        "var_sum": tag("the last term uses a sum instead of a mean: it is -mean(g * x_hat) * x_hat.",
                       "bwd.sum_not_mean"),
        "var_factor": tag("the -mean(g * x_hat) * x_hat term has the wrong factor.", WRONG_FACTOR),
        "x_instead": tag("the last term uses x instead of x_hat: it is -mean(g * x_hat) * x_hat, with x_hat = "
                         "(x - mu) / s in both places.", "bwd.x_instead_of_x_hat"),
    },
    "dx": {
        "mean_missing": tag("each token's dx should sum to zero, and yours does not: the -mean(g) term is missing "
                            "(g = gamma * dy).", "bwd.mean_term_missing"),
        "mean_sum": tag("each token's dx should sum to zero, and yours does not: you used sum(g) instead of mean(g) "
                        "over the features (g = gamma * dy).", "bwd.sum_not_mean"),
        "mean_factor": tag("each token's dx should sum to zero, and yours does not: the -mean(g) term has the wrong "
                           "factor (g = gamma * dy).", WRONG_FACTOR),
        "var_missing": tag("the -mean(g * x_hat) * x_hat term of dx is missing (g = gamma * dy).",
                           "bwd.variance_term_missing"),
        "var_sum": tag("the last term of dx uses a sum instead of a mean: it is -mean(g * x_hat) * x_hat over the "
                       "features (g = gamma * dy).", "bwd.sum_not_mean"),
        "var_factor": tag("the -mean(g * x_hat) * x_hat term of dx has the wrong factor (g = gamma * dy).",
                          WRONG_FACTOR),
        "x_instead": tag("the last term of dx uses x instead of x_hat: it is -mean(g * x_hat) * x_hat, with x_hat "
                         "= (x - mu) / s in both places.", "bwd.x_instead_of_x_hat"),
    },
}


def _input(x, d, seed, scale=1.0, offset=0.0):
    if x is not None:
        return np.array(x, dtype=np.float64)
    return random_input((d,), seed=seed, scale=scale, offset=offset)


def _x_hat_and_s(x: np.ndarray, eps: float):
    """Normalised input (from torch) and scale s = sqrt(biased var + eps), per last axis."""
    s = np.sqrt(np.var(x, axis=-1, keepdims=True) + eps)
    return oracles.layer_norm(x, eps), s


# ------------------------------------------------------------------ reading the formula off the answer
@dataclass
class _Scale:
    """A scale a learner may have divided by, per token, and the mistakes it stands for."""

    value: np.ndarray
    slope: np.ndarray | None   # the variance-term factor K that autograd through this scale gives (see _structure)
    mistakes: list


def _scales(x: np.ndarray, eps: float, whole: bool = False) -> list[_Scale]:
    """Every statistic x map to the scale, per token of ``x`` (T, d); ``whole``: also a result d times off."""
    d = x.shape[-1]
    var = np.var(x, axis=-1)
    statistics = [(var, 1.0, [])]
    if d > 1:
        statistics.append((var * d / (d - 1), d / (d - 1), [UNBIASED]))
    maps = [(lambda w: np.sqrt(w + eps), lambda w: 0.5 / np.sqrt(w + eps), []),
            (lambda w: np.sqrt(w) + eps, lambda w: 0.5 / np.sqrt(w), [OUTSIDE]),
            (lambda w: w + eps, lambda w: np.ones_like(w), [BY_VARIANCE]),
            (lambda w: np.ones_like(w), lambda w: np.zeros_like(w), [NO_DIVISION])]
    if eps > 0:
        maps.append((lambda w: np.sqrt(w), lambda w: 0.5 / np.sqrt(w), [_eps_ignored(eps)]))
    if eps != 1e-5:
        maps.append((lambda w: np.sqrt(w + 1e-5), lambda w: 0.5 / np.sqrt(w + 1e-5), [_eps_fixed(eps)]))
    found = []
    with np.errstate(all="ignore"):
        for w, chain, first in statistics:
            for value, slope, second in maps:
                s = value(w)
                # autograd through x_hat = (x - mu) / s(w): d(s)/dx = s'(w) * 2 (x - mu) * chain / d
                found.append(_Scale(s, 2 * slope(w) * chain / s, first + second))
        if whole:  # the whole result d times too large or too small, on top of any scale
            found += [_Scale(scale.value / d, None, scale.mistakes + [TIMES_D]) for scale in found[:]] + \
                     [_Scale(scale.value * d, None, scale.mistakes + [OVER_D]) for scale in found[:]]
    return found


def _close(a, b, tol) -> bool:
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    if a.size == 0 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) or np.any(b == 0):
        return False
    return bool(np.max(np.abs(a / b - 1)) <= tol)


def _rows_close(a, table, tol) -> np.ndarray:
    """Which rows of ``table`` (candidates x tokens) agree with ``a`` (tokens) to ``tol`` relative, everywhere."""
    with np.errstate(all="ignore"):
        ratio = np.asarray(a, dtype=np.float64)[None, :] / table
        good = np.isfinite(ratio) & np.isfinite(table) & (table != 0) & (np.abs(ratio - 1) <= tol)
    return np.all(good, axis=1)


def _mean_mistakes(m, d, words) -> list:
    if _close(m, 1.0, TERM_MATCH):
        return []
    if np.max(np.abs(m)) <= TERM_MATCH:
        return [words["mean_missing"]]
    if _close(m, float(d), TERM_MATCH):
        return [words["mean_sum"]]
    return [words["mean_factor"]]


def _factor_mistakes(K, powers, real: list[_Scale], values: np.ndarray, d, words, head: list) -> list[list]:
    """``head`` plus the scale's mistakes, for each scale with K = factor / scale**power (power 0: K = factor)."""
    found = []
    for power in powers:
        for factor, extra in ((1.0, []), (float(d), [words["var_sum"]])):
            if power == 0:
                if _close(K, factor, TERM_MATCH):
                    found.append(head + extra)
                continue
            with np.errstate(all="ignore"):
                hits = _rows_close(K, factor / values ** power, TERM_MATCH)
            found += [head + real[i].mistakes + extra for i in np.flatnonzero(hits)]
    return found


def _unique(mistakes: list) -> list:
    seen, kept = set(), []
    for mistake in mistakes:
        if str(mistake) not in seen:
            seen.add(str(mistake))
            kept.append(mistake)
    return kept


def _explain(kind: str, implied, sign: float, fits: list, x2: np.ndarray, eps: float) -> list[list] | None:
    """The simplest explanations of an answer read as (scale, sign, mean factor m, variance factor K).

    ``fits``: (hypothesis, m, K, powers) per way of building the variance term: "x_hat" for
    an outer product of x - mu with itself (K = 1/s'^2 then says which x_hat, or K is what
    autograd through the scale divided by gives), "x" for one built from x (``powers``: the
    powers of a scale its factor K may carry, None when any K will do). Fewer mistakes of the
    catch-all "wrong factor" kind, then fewer mistakes, win; equally simple explanations are
    all returned (the diagnosis gives them as alternatives).
    """
    d = x2.shape[-1]
    words = TERMS[kind]
    scales = _scales(x2, eps, whole=True)
    real = [scale for scale in scales if scale.slope is not None]  # the scales an x_hat may be divided by
    values = np.array([scale.value for scale in real])
    var = np.var(x2, axis=-1) + eps
    negligible = lambda K: np.max(np.abs(K) * var) <= TERM_MATCH  # noqa: E731 - against the natural 1/(var + eps)
    per_fit = []  # what each fit says, whatever the scale divided by
    for hypothesis, m, K, powers in fits:
        mean = _mean_mistakes(m, d, words)
        if negligible(K):
            formula = [[words["var_missing"]]]
        elif hypothesis == "x_hat":
            formula = _factor_mistakes(K, (2,), real, values, d, words, [])
        elif powers is None:  # the vectors are known (a matrix fits exactly): any factor
            formula = [[words["x_instead"]]]
        else:  # one vector: x in the last term only if its factor is one x, x_hat or x / s would give
            formula = _factor_mistakes(K, powers, real, values, d, words, [words["x_instead"]])
        per_fit.append((hypothesis, m, K, mean, formula))
    candidates = []
    for index in np.flatnonzero(_rows_close(implied, np.array([scale.value for scale in scales]), SCALE_MATCH)):
        scale = scales[index]
        base = ([SIGN] if sign < 0 else []) + scale.mistakes
        through = scale.slope is not None  # autograd through a forward pass that divides by this scale
        for hypothesis, _, K, mean, formula in per_fit:
            alternatives = list(formula)
            if hypothesis == "x_hat" and through and not mean:
                if negligible(K) and np.all(scale.slope == 0):
                    alternatives = [[]]  # through x - mu alone: no variance term to have
                elif _close(K, scale.slope, TERM_MATCH):
                    alternatives.append([])
            if hypothesis == "x_hat" and not alternatives:
                alternatives = [[words["var_factor"]]]
            for variance in alternatives:
                candidates.append(_unique(base + mean + variance))
    if not candidates:
        return None
    rank = lambda mistakes: (sum(WRONG_FACTOR in ids_of(m) for m in mistakes), len(mistakes))  # noqa: E731 - a one-line sort key
    best = min(rank(c) for c in candidates)
    simplest = []
    for mistakes in candidates:
        if rank(mistakes) == best and {str(m) for m in mistakes} not in [{str(m) for m in s} for s in simplest]:
            simplest.append(mistakes)
    return simplest


def _jacobian_structure(J: np.ndarray, x: np.ndarray, eps: float) -> list[list] | None:
    """Read J as sign * (I - (m/d) 1 1^T - (K/d) u w^T) / S and explain S, m, K and u, w."""
    d = x.size
    if d < 3:
        return None
    centred = x - x.mean()
    norm = np.linalg.norm(centred)
    if norm == 0:
        return None
    v = random_input((d,), seed=99)
    for direction in (np.ones(d) / np.sqrt(d), centred / norm):
        v = v - direction * (direction @ v)
    Jv = J @ v
    a = float(v @ Jv) / float(v @ v)
    if not np.isfinite(a) or a == 0 or np.linalg.norm(Jv - a * v) > 1e-9 * abs(a) * np.linalg.norm(v):
        return None
    sign, implied = float(np.sign(a)), 1.0 / abs(a)
    R = J * (sign * implied) - np.eye(d)
    ones = np.ones(d)
    size = max(1.0, float(np.max(np.abs(R))))
    fits = []
    for hypothesis, u, w in (("x_hat", centred, centred), ("x", x, x), ("x", centred, x), ("x", x, centred)):
        basis = np.stack([np.outer(ones, ones).ravel() / d, np.outer(u, w).ravel() / d], axis=1)
        coef = np.linalg.lstsq(basis, -R.ravel(), rcond=None)[0]
        if np.max(np.abs(R.ravel() + basis @ coef)) <= 1e-8 * size:
            fits.append((hypothesis, coef[:1], coef[1:], None))
    if not fits:
        return None
    return _explain("jacobian", np.array([implied]), sign, fits, x[None, :], eps)


def _vjp_structure(v: np.ndarray, x: np.ndarray, g: np.ndarray, eps: float, kind: str = "vjp") -> list[list] | None:
    """Read each token's v as sign * (g - m mean(g) 1 - K mean(g * w) u) / S; explain S, m, K and u, w.

    x, g, v: (T, d). On the directions orthogonal to 1 and x - mu, v is g / S: that gives the
    scale; what is left lies in the plane of 1 and x - mu and gives m and K.
    """
    d = x.shape[-1]
    if d < 4:
        return None
    mu = x.mean(axis=-1, keepdims=True)
    centred = x - mu
    norm2 = np.sum(centred * centred, axis=-1, keepdims=True)
    if np.any(norm2 == 0):
        return None

    def perp(a):
        a = a - a.mean(axis=-1, keepdims=True)
        return a - centred * (np.sum(a * centred, axis=-1, keepdims=True) / norm2)

    pv, pg = perp(v), perp(g)
    gg = np.sum(pg * pg, axis=-1)
    if np.any(gg <= 1e-12 * np.sum(g * g, axis=-1)):
        return None
    a = np.sum(pv * pg, axis=-1) / gg
    if not np.all(np.isfinite(a)) or np.any(a == 0) or len(set(np.sign(a))) != 1:
        return None
    if np.any(np.linalg.norm(pv - a[:, None] * pg, axis=-1) > 1e-9 * np.abs(a) * np.sqrt(gg)):
        return None
    sign, implied = float(np.sign(a[0])), 1.0 / np.abs(a)
    R = v * (sign * implied)[:, None] - g
    alpha = R.mean(axis=-1)
    beta = np.sum(R * centred, axis=-1) / norm2[:, 0]
    g_mean = g.mean(axis=-1)
    rms = np.sqrt(np.mean(g * g, axis=-1))
    if np.any(np.abs(g_mean) < 1e-6 * rms):
        return None
    fits = []
    # (hypothesis, the last term's vector is x, the vector inside its mean, the powers of s its factor may have)
    for hypothesis, u_is_x, w, powers in (("x_hat", False, centred, None), ("x", True, x, (0, 2)),
                                          ("x", False, x, (1,)), ("x", True, centred, (1,))):
        gw = np.mean(g * w, axis=-1)
        if np.any(np.abs(gw) < 1e-6 * rms * np.sqrt(np.mean(w * w, axis=-1))):
            continue
        K = -beta / gw
        m = ((beta * mu[:, 0] if u_is_x else 0.0) - alpha) / g_mean
        fits.append((hypothesis, m, K, powers))
    if not fits:
        return None
    return _explain(kind, implied, sign, fits, x, eps)


def _structure_cause(explanations) -> str | None:
    if not explanations or explanations == [[]] or [] in explanations:
        return None
    return describe(explanations)


def _factor_cause(actual: np.ndarray, expected: np.ndarray, s: float, d: int) -> str | None:
    """If ``actual`` is a constant multiple of ``expected``, say what that constant means."""
    denom = float(np.sum(expected * expected))
    if denom == 0:
        return None
    c = float(np.sum(actual * expected)) / denom
    if relative_error(actual, c * expected) > 1e-6 or abs(c - 1) < 1e-9:
        return None
    known = [
        (s, tag("the whole result is s times too large: you did not divide by s = sqrt(var + eps).",
                "bwd.no_division_by_s")),
        (1 / s, tag("the whole result is 1/s times too small: you divided by s twice (or by the variance).",
                    "bwd.divided_by_variance")),
        (np.sqrt((d - 1) / d), tag("the result is sqrt((d-1)/d) times the right one: you used the unbiased variance "
                                   "(dividing by d - 1, np.var(ddof=1) or torch.var's default). LayerNorm divides "
                                   "by d.", "bwd.unbiased_variance")),
        (np.sqrt(d / (d - 1)) if d > 1 else np.nan,
         tag("the result is sqrt(d/(d-1)) times the right one: a d - 1 where a d belongs.", "bwd.unbiased_variance")),
        (-1.0, SIGN),
        (float(d), TIMES_D),
        (1 / d, OVER_D),
    ]
    for value, cause in known:
        if abs(c - value) <= 1e-6 * max(1.0, abs(value)):
            return cause
    return tag(f"the result is {c:.6g} times the right one everywhere: a constant factor is off.", WRONG_FACTOR)


def _implied_scale_cause(J: np.ndarray, x: np.ndarray, eps: float) -> str | None:
    """Read the learner's s off J and name the mistake if it is a classic wrong s.

    On any direction v orthogonal to both 1 and x - mu, the true Jacobian is v / s; so
    |v| / |J v| is the scale the learner's code divided by, whatever else it got wrong.
    """
    d = x.size
    if d < 3:
        return None
    centred = x - x.mean()
    v = random_input((d,), seed=99)
    for direction in (np.ones(d) / np.sqrt(d), centred / np.linalg.norm(centred)):
        v = v - direction * (direction @ v)
    Jv = J @ v
    if not np.all(np.isfinite(Jv)) or np.linalg.norm(Jv) == 0:
        return None
    implied = np.linalg.norm(v) / np.linalg.norm(Jv)
    var = np.var(x)
    true_scale = np.sqrt(var + eps)
    if abs(implied - true_scale) <= 1e-6 * true_scale:
        return None
    # every statistic x every map to s (grader.checks._scales): two mistakes at once are both named
    statistics = [Statistic(np.array(var)), Statistic(np.array(var * d / (d - 1)), [UNBIASED])]
    maps = [Map(lambda w: np.sqrt(w + eps)),
            Map(lambda w: np.sqrt(w) + eps, [OUTSIDE]),
            Map(lambda w: w + eps, [BY_VARIANCE]),
            Map(lambda w: np.ones_like(w), [NO_DIVISION])]
    if eps > 0:
        maps.append(Map(lambda w: np.sqrt(w), [_eps_ignored(eps)]))
    return describe(explain_scale(np.array(implied), statistics, maps, 1e-6))


def _jacobian_cause(J: np.ndarray, x: np.ndarray, eps: float) -> str:
    d = x.size
    x_hat, s = _x_hat_and_s(x, eps)
    s = float(s[0])
    reference = oracles.layer_norm_jacobian(x, eps)
    if eps > 0 and relative_error(J, oracles.layer_norm_jacobian(x, 0.0)) < 1e-9:
        return tag(f"your Jacobian is the one for eps = 0, but eps = {eps} was passed: use s = sqrt(var + eps) "
                   "everywhere, including inside x_hat.", "bwd.eps_ignored")
    structure = _structure_cause(_jacobian_structure(J, x, eps))
    if structure:
        return structure
    scale_cause = _implied_scale_cause(J, x, eps)
    if scale_cause:
        return scale_cause
    factor = _factor_cause(J, reference, s, d)
    if factor:
        return factor
    scale = float(np.max(np.abs(reference)))
    if np.max(np.abs(J @ np.ones(d))) > 1e-6 * scale:
        return tag("the rows of J do not sum to zero (J @ ones(d) should be 0). The mean term -(1/d) 1 1^T, "
                   "which comes from d(mu)/dx_j = 1/d, is missing or mis-scaled, or an outer product uses x (whose "
                   "entries do not sum to zero) instead of x_hat. See it: print(J @ np.ones(d)).",
                   "bwd.mean_term_missing", "bwd.sum_not_mean", "bwd.x_instead_of_x_hat")
    if relative_error(J @ x_hat, reference @ x_hat) > 1e-6:
        return tag("J @ x_hat is wrong (it should be about eps/(var+eps) * x_hat / s, i.e. almost 0). The variance "
                   "term -(1/d) x_hat x_hat^T, from d(s)/dx_j = x_hat_j / d, is missing, built from x instead of "
                   "x_hat, or x_hat uses the unbiased variance (ddof=1 or torch.var's default divides by d - 1; "
                   "LayerNorm divides by d). See it: print(J @ x_hat).",
                   "bwd.variance_term_missing", "bwd.x_instead_of_x_hat", "bwd.unbiased_variance")
    if np.max(np.abs(J - J.T)) > 1e-9 * scale:
        return tag("J is not symmetric: both factors of the outer product must be x_hat (not x and x_hat).",
                   "bwd.x_instead_of_x_hat")
    return None


@check
def check_layer_norm_jacobian(layer_norm_jacobian, x=None, eps=1e-5, d=6, seed=0, scale=1.0, offset=0.0):
    """Compare ``layer_norm_jacobian(x, eps)`` with finite differences and torch autograd.

    Without ``x``, checks the worked example (2, 4, 6, 8) and a random token of size ``d``.
    """
    cases = [WORKED_EXAMPLE, _input(None, d, seed, scale, offset)] if x is None else [_input(x, d, seed)]
    for x in cases:
        what = f"layer_norm_jacobian(x, eps={eps}) for x = {preview(x)}"
        J = strict_array(call_learner(layer_norm_jacobian, x, eps=eps, what=what, shape_rule=TOKEN_RULE), what,
                         (x.size, x.size))
        forward = lambda t: oracles.layer_norm(t, eps)  # noqa: E731 - a one-line function of t
        natural_size = 1.0 / np.sqrt(np.var(x) + eps)  # J's entries are O(1/s)
        numeric, autograd = central_difference_jacobian(forward, x), oracles.layer_norm_jacobian(x, eps)
        cause = None
        if (relative_error(J, numeric, natural_size) > FD_RTOL
                or relative_error(J, autograd, natural_size) > RTOL):
            cause = _jacobian_cause(J, x, eps)
        probe = Probe(lambda e, dtype, x=x: oracles.in_precision(dtype, oracles.layer_norm_jacobian, x, e), eps,
                      eps_ids=("bwd.eps_hardcoded", "bwd.eps_ignored"))
        assert_close(J, numeric, what, "central finite differences", FD_RTOL, cause, floor=natural_size, probe=probe)
        assert_close(J, autograd, what, "torch autograd", RTOL, cause, floor=natural_size, probe=probe)
    passed(f"layer_norm_jacobian matches finite differences and autograd ({len(cases)} input(s), eps={eps})")


@check
def check_jacobian_is_projection(layer_norm_jacobian, d=6, seed=0):
    """With eps = 0, ``s * J`` must be the orthogonal projection I - u u^T - w w^T of rank d - 2."""
    x = _input(None, d, seed)
    what = f"layer_norm_jacobian(x, eps=0.0) for a random x of size {d}"
    J = strict_array(call_learner(layer_norm_jacobian, x, eps=0.0, what=what, shape_rule=TOKEN_RULE), what, (d, d))
    s = float(np.std(x))
    x_hat = (x - x.mean()) / s
    P = s * J
    problems = [
        (np.max(np.abs(P - P.T)) > 1e-9, "s*J is not symmetric, so it is not an orthogonal projection; "
         "the outer products should be 1 1^T and x_hat x_hat^T.", ("bwd.x_instead_of_x_hat",)),
        (np.max(np.abs(P @ P - P)) > 1e-8, "s*J is not idempotent ((sJ)^2 != sJ): a term is mis-scaled "
         "(check the 1/d factors and that you divide by s exactly once).", (WRONG_FACTOR,)),
        (np.max(np.abs(P @ np.ones(d))) > 1e-8, "s*J does not remove the direction 1 (s*J @ ones != 0): "
         "the -(1/d) 1 1^T term is missing or wrong.", ("bwd.mean_term_missing",)),
        (np.max(np.abs(P @ x_hat)) > 1e-8, "s*J does not remove the direction x_hat: "
         "the -(1/d) x_hat x_hat^T term is missing or wrong.", ("bwd.variance_term_missing",)),
        # a symmetric idempotent s*J that removes 1 and x_hat but has another rank: no classic mistake
        (np.linalg.matrix_rank(P, tol=1e-8) != d - 2, f"s*J has rank {np.linalg.matrix_rank(P, tol=1e-8)}, "
         f"expected d - 2 = {d - 2}: the projection must remove exactly two directions, 1 and x_hat.", ()),
    ]
    for failed, message, ids in problems:
        if failed:
            fail(f"{what}: {message}", *ids)
    passed(f"s*J is a symmetric, idempotent projection of rank d-2 = {d - 2} that removes 1 and x_hat")


def _vjp_cause(v: np.ndarray, x: np.ndarray, g: np.ndarray, eps: float, reference: np.ndarray) -> str | None:
    d = x.size
    x_hat, s = _x_hat_and_s(x, eps)
    s = float(s[0])
    if eps > 0 and relative_error(v, oracles.layer_norm_grads(g, x, np.ones(d), 0.0)[0]) < 1e-9:
        return tag(f"your result is the eps = 0 one, but eps = {eps} was passed: use s = sqrt(var + eps).",
                   "bwd.eps_ignored")
    if relative_error(v, g / s) < 1e-9:
        return tag("you returned g (divided by s) without removing its mean and its component along x_hat.",
                   "bwd.mean_term_missing", "bwd.variance_term_missing")
    if relative_error(v, g) < 1e-9:
        return tag("you returned g (divided by s) without removing its mean and its component along x_hat.",
                   "bwd.mean_term_missing", "bwd.variance_term_missing", "bwd.no_division_by_s")
    structure = _structure_cause(_vjp_structure(v[None, :], x[None, :], g[None, :], eps))
    if structure:
        return structure
    factor = _factor_cause(v, reference, s, d)
    if factor:
        return factor
    scale = float(np.max(np.abs(reference))) or 1.0
    if abs(float(np.sum(v))) > 1e-6 * scale * d:
        return tag("the result does not sum to zero. The -mean(g) term is missing, you used sum(g) instead of "
                   "mean(g), or the last term uses x instead of x_hat (x's entries do not sum to zero). "
                   "See it: print(layer_norm_vjp(x, g).sum()).",
                   "bwd.mean_term_missing", "bwd.sum_not_mean", "bwd.x_instead_of_x_hat")
    if abs(float(v @ x_hat) - float(reference @ x_hat)) > 1e-6 * scale * d:
        return tag("the component along x_hat is wrong: the -mean(g * x_hat) * x_hat term is missing, uses x instead "
                   "of x_hat, or uses a sum instead of a mean.",
                   "bwd.variance_term_missing", "bwd.x_instead_of_x_hat", "bwd.sum_not_mean")
    return None


@check
def check_layer_norm_vjp(layer_norm_vjp, layer_norm_jacobian=None, x=None, g=None, eps=1e-5, d=6, seed=0,
                         scale=1.0, offset=0.0):
    """Compare ``layer_norm_vjp(x, g, eps)`` with autograd; if a Jacobian function is given, also J^T g."""
    x = _input(x, d, seed, scale, offset)
    g = random_input(x.shape, seed=seed + 1000) if g is None else np.array(g, dtype=np.float64)
    what = f"layer_norm_vjp(x, g, eps={eps}) for x = {preview(x)}"
    v = strict_array(call_learner(layer_norm_vjp, x, g, eps=eps, what=what, shape_rule=TOKEN_RULE), what, x.shape)
    reference = oracles.layer_norm_grads(g, x, np.ones(x.size), eps)[0]
    cause = _vjp_cause(v, x, g, eps, reference) if relative_error(v, reference) > RTOL else None
    assert_close(v, reference, what, "torch autograd", RTOL, cause,
                 probe=Probe(lambda e, dtype: oracles.in_precision(
                     dtype, lambda: oracles.layer_norm_grads(g, x, np.ones(x.size), e)[0]), eps,
                             eps_ids=("bwd.eps_hardcoded", "bwd.eps_ignored")))
    if layer_norm_jacobian is not None:
        J = strict_array(call_learner(layer_norm_jacobian, x, eps=eps, what=f"layer_norm_jacobian(x, eps={eps})",
                                      shape_rule=TOKEN_RULE),
                         "layer_norm_jacobian(x, eps)", (x.size, x.size))
        assert_close(v, J.T @ g, what, "your own layer_norm_jacobian(x, eps).T @ g", RTOL,
                     tag("your two functions disagree: one of them has a term the other lacks.",
                         "bwd.functions_disagree"))
    agree = " and agrees with layer_norm_jacobian" if layer_norm_jacobian is not None else ""
    passed(f"layer_norm_vjp matches autograd for d={x.size}, eps={eps}{agree}")


@check
def check_vjp_memory(layer_norm_vjp, d=4096, seed=0):
    """The VJP must not build a (d, d) matrix: peak memory O(d).

    numpy and Python allocations are measured with tracemalloc; torch's, which tracemalloc
    cannot see, by counting the storage of every tensor torch creates during the call.
    """
    x, g = random_input((d,), seed=seed), random_input((d,), seed=seed + 1)
    budget = 64 * d * 8  # 64 vectors of d float64: generous for any vector formula, far below d*d
    what = f"layer_norm_vjp(x, g) at d = {d}"
    v, report = measure_learner_memory(layer_norm_vjp, x.copy(), g.copy(), eps=1e-5, what=what,
                                       shape_rule=TOKEN_RULE, track_torch=True)
    v = strict_array(v, what, (d,))
    peak = report.peak
    matrix = d * d * 8
    if peak is not None and peak > budget:
        mistake = "bwd.builds_jacobian"
        if report.largest_shape is not None and report.largest_bytes >= matrix // 2:
            shape = "x".join(str(n) for n in report.largest_shape)
            seen = (f"your code builds a (d, d) matrix: a {report.largest_kind} of shape "
                    f"({', '.join(str(n) for n in report.largest_shape)}), {report.largest_bytes / 2**20:.0f} MiB "
                    f"({shape} float64 values)")
        elif peak >= matrix // 2:
            seen = (f"your code builds a (d, d) matrix: it allocated {peak / 2**20:.0f} MiB at once, at least one "
                    f"(d, d) matrix of {matrix / 2**20:.0f} MiB")
        else:
            seen, mistake = "your code keeps far more than a few vectors of size d", "common.memory_blowup"
        where = ""
        if report.torch_peak and report.python_peak is not None:
            where = f" ({report.python_peak / 2**20:.1f} MiB numpy/Python, {report.torch_peak / 2**20:.1f} MiB torch)"
        unproven(layer_norm_vjp, "memory",
                 f"{what} used {peak / 2**20:.1f} MiB at its peak{where}; a (d, d) matrix is {matrix / 2**20:.0f} MiB "
                 f"and the vector formula needs well under {budget / 2**20:.1f} MiB.\nLikely cause: {seen}. You built "
                 "the Jacobian or an outer product (np.outer, torch.outer, x[:, None] * x[None, :], "
                 "torch.autograd.functional.jacobian). Use the formula with mean(g) and mean(g * x_hat).", mistake)
    assert_close(v, oracles.layer_norm_grads(g, x, np.ones(d), 1e-5)[0], what, "torch autograd", RTOL, None)
    shown = f"{peak / 2**20:.2f} MiB" if peak is not None else "an unmeasured amount"
    passed(f"layer_norm_vjp at d={d} peaked at {shown} (a d x d matrix would be {matrix / 2**20:.0f} MiB)")


def _dgamma_cause(dgamma, dy, x, gamma, eps, lead) -> str:
    """Which x_hat, if any, the learner's dgamma = sum(dy * x_hat) was built from."""
    x_hat, _ = _x_hat_and_s(x, eps)
    if relative_error(dgamma, np.sum(dy * x, axis=lead)) < SAME:
        return tag("dgamma used x instead of x_hat: it is sum(dy * x_hat) over the leading axes.",
                   "bwd.x_instead_of_x_hat")
    if relative_error(dgamma, np.sum(dy * x_hat * gamma, axis=lead)) < SAME:
        return tag("dgamma was multiplied by gamma: it is sum(dy * x_hat), gamma does not appear.",
                   "bwd.dgamma_times_gamma")
    d = x.shape[-1]
    tokens, rows_dy = x.reshape(-1, d), dy.reshape(-1, d)
    centred = tokens - tokens.mean(axis=-1, keepdims=True)
    fitting = []
    with np.errstate(all="ignore"):
        for scale in _scales(tokens, eps):
            candidate = np.sum(rows_dy * centred / scale.value[:, None], axis=0)
            if scale.mistakes and relative_error(dgamma, candidate) < SAME:
                fitting.append(scale.mistakes)
    if fitting:
        fewest = min(len(m) for m in fitting)
        cause = describe([m for m in fitting if len(m) == fewest])
        return tag("dgamma = sum(dy * x_hat) needs the forward pass's x_hat, and yours was computed with the wrong "
                   "scale: " + cause, *ids_of(cause))
    if x.ndim > 1:
        for axes in {None, (0,), lead}:
            mu = x.mean(axis=axes, keepdims=True)
            wrong = (x - mu) / np.sqrt(np.var(x, axis=axes, keepdims=True) + eps)
            if relative_error(dgamma, np.sum(dy * wrong, axis=lead)) < SAME:
                return tag("dgamma = sum(dy * x_hat) needs the forward pass's x_hat, whose statistics are per token: "
                           "your mean and variance are taken over the wrong axes. Reduce over the features "
                           "(axis=-1, keepdims=True).", "bwd.stats_wrong_axis")
    return tag("dgamma should be sum(dy * x_hat) over every leading axis, with x_hat from the forward pass.",
               "bwd.dgamma_wrong")


def _dx_axis_cause(dx, g, x_hat, s, lead) -> str | None:
    """dx with the right x_hat and s, but mean(g) or mean(g * x_hat) taken over other axes than the features."""
    if g.ndim < 2:
        return None
    per_token = (g.mean(axis=-1, keepdims=True), np.mean(g * x_hat, axis=-1, keepdims=True))
    for axes in {None, (0,), lead}:
        wrong = (g.mean(axis=axes, keepdims=True), np.mean(g * x_hat, axis=axes, keepdims=True))
        for first, second in ((wrong[0], wrong[1]), (wrong[0], per_token[1]), (per_token[0], wrong[1])):
            if relative_error(dx, (g - first - second * x_hat) / s) < SAME:
                return tag("dx's means are taken over the wrong axes: mean(g) and mean(g * x_hat) are per token, "
                           "over the features (axis=-1, keepdims=True).", "bwd.stats_wrong_axis")
    return None


def _backward_causes(dx, dgamma, dbeta, dy, x, gamma, eps, reference):
    ref_dx, ref_dgamma, ref_dbeta = reference
    lead = tuple(range(x.ndim - 1))
    x_hat, s = _x_hat_and_s(x, eps)
    if relative_error(dbeta, ref_dbeta) > RTOL:
        return "dbeta", tag("dbeta is the sum of dy over every leading axis: dy.sum(axis=tuple(range(dy.ndim - 1))).",
                            "bwd.dbeta_wrong")
    if relative_error(dgamma, ref_dgamma) > RTOL:
        return "dgamma", _dgamma_cause(dgamma, dy, x, gamma, eps, lead)
    if relative_error(dx, ref_dx) > RTOL:
        if relative_error(dx, oracles.layer_norm_grads(dy, x, np.ones_like(gamma), eps)[0]) < 1e-9:
            return "dx", tag("dx ignores gamma: the gradient reaching x_hat is g = gamma * dy, not dy.",
                             "bwd.gamma_not_in_g")
        if relative_error(dx, oracles.layer_norm_grads(dy / gamma ** 2, x, gamma, eps)[0]) < 1e-9:  # g = dy / gamma
            return "dx", tag("dx divides by gamma or omits it twice; the gradient reaching x_hat is g = gamma * dy.",
                             "bwd.gamma_not_in_g")
        if relative_error(dx, gamma * oracles.layer_norm_grads(dy, x, np.ones_like(gamma), eps)[0]) < 1e-9:
            return "dx", tag("dx multiplies by gamma after the projection: gamma multiplies dy first, g = gamma * dy, "
                             "and the projection acts on g.", "bwd.gamma_not_in_g")
        if relative_error(dx, oracles.layer_norm_grads(dy * gamma, x, gamma, eps)[0]) < 1e-9:  # g = gamma**2 * dy
            return "dx", tag("dx multiplies by gamma twice; the gradient reaching x_hat is g = gamma * dy.",
                             "bwd.gamma_not_in_g")
        g = gamma * dy
        axis = _dx_axis_cause(dx, g, x_hat, s, lead)
        if axis:
            return "dx", axis
        d = x.shape[-1]
        structure = _structure_cause(_vjp_structure(dx.reshape(-1, d), x.reshape(-1, d), g.reshape(-1, d), eps, "dx"))
        if structure:
            return "dx", structure
        row_sums = np.sum(dx, axis=-1)
        if np.max(np.abs(row_sums)) > 1e-6 * np.max(np.abs(ref_dx)) * x.shape[-1]:
            return "dx", tag("each token's dx should sum to zero; the -mean(g) term is missing, or a mean/sum is taken "
                             "over the wrong axis (use axis=-1, keepdims=True).",
                             "bwd.mean_term_missing", "bwd.stats_wrong_axis")
        factor = _factor_cause(dx, ref_dx, float(np.mean(s)), x.shape[-1])
        return "dx", factor or tag("dx is off: check the -mean(g * x_hat) * x_hat term and that statistics are "
                                   "per token (axis=-1, keepdims=True).",
                                   "bwd.variance_term_missing", "bwd.stats_wrong_axis")
    return None, None


@check
def check_layer_norm_backward(layer_norm_backward, shape=(2, 3, 5), eps=1e-5, seed=0, gamma=None,
                              scale=1.0, offset=0.0):
    """Compare ``(dx, dgamma, dbeta) = layer_norm_backward(dy, x, gamma, eps)`` with autograd for x: (..., d)."""
    shape = tuple(shape)
    d = shape[-1]
    x = random_input(shape, seed=seed, scale=scale, offset=offset)
    dy = random_input(shape, seed=seed + 1)
    gamma = 1.0 + 0.5 * random_input((d,), seed=seed + 2) if gamma is None else np.array(gamma, dtype=np.float64)
    what = f"layer_norm_backward(dy, x, gamma, eps={eps}) for x of shape {shape}"
    result = call_learner(layer_norm_backward, dy, x, gamma, eps=eps, what=what, shape_rule=BATCH_RULE)
    if type(result) is not tuple or len(result) != 3:
        fail(f"{what} should return a tuple (dx, dgamma, dbeta); it returned {type(result).__name__}"
             f"{' of length ' + str(len(result)) if isinstance(result, (tuple, list)) else ''}.",
             "common.returned_none" if result is None else "bwd.not_a_triple")
    dx, dgamma, dbeta = result
    for name, value in (("dgamma", dgamma), ("dbeta", dbeta)):
        if isinstance(value, np.ndarray) and value.shape != (d,) and len(shape) > 1:
            if value.shape == shape:
                fail(f"{what}: {name} has shape {value.shape}, expected ({d},).\nLikely cause: not summed over the "
                     f"tokens. {name} is shared by every token, so sum over every leading axis: "
                     f"axis={tuple(range(len(shape) - 1))}.", "bwd.params_not_summed")
            if value.shape == shape[1:]:
                fail(f"{what}: {name} has shape {value.shape}, expected ({d},).\nLikely cause: summed over axis 0 "
                     f"only; sum over every leading axis, axis={tuple(range(len(shape) - 1))}.",
                     "bwd.summed_axis0_only")
    dx = strict_array(dx, what + ": dx", shape)
    dgamma = strict_array(dgamma, what + ": dgamma", (d,))
    dbeta = strict_array(dbeta, what + ": dbeta", (d,))
    reference = oracles.layer_norm_grads(dy, x, gamma, eps)
    name, cause = _backward_causes(dx, dgamma, dbeta, dy, x, gamma, eps, reference)
    if name is not None:
        actual = {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}[name]
        expected = dict(zip(("dx", "dgamma", "dbeta"), reference, strict=True))[name]
        index = ("dx", "dgamma", "dbeta").index(name)
        assert_close(actual, expected, f"{what}: {name}", "torch autograd", RTOL, cause,
                     probe=Probe(lambda e, dtype: oracles.in_precision(
                         dtype, lambda: oracles.layer_norm_grads(dy, x, gamma, e)[index]), eps,
                                 eps_ids=("bwd.eps_hardcoded", "bwd.eps_ignored")))
    passed(f"layer_norm_backward matches autograd for x of shape {shape}, eps={eps}")
