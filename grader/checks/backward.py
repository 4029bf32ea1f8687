"""Checks for 03_backward: LayerNorm's Jacobian, its fast VJP, and the full backward.

Oracles: torch.nn.functional.layer_norm with autograd (float64), float64 central finite
differences, and the algebraic properties of the Jacobian (symmetric, kills 1 and x_hat,
s*J is a rank d-2 orthogonal projection when eps = 0). When an answer is wrong, the
diagnosis comes from the same properties: they say which term of the formula is off.
"""
from __future__ import annotations

import numpy as np

from grader import oracles
from grader.checks._scales import Map, Statistic, describe, explain_scale
from grader.compare import (
    assert_close, call_learner, check, fail, measure_learner_memory, passed, preview, strict_array,
)
from grader.numerics import central_difference_jacobian, random_input, relative_error

WORKED_EXAMPLE = np.array([2.0, 4.0, 6.0, 8.0])
RTOL = 1e-7          # float64 formulas agree to ~1e-13; anything above 1e-7 is another formula
FD_RTOL = 1e-6       # central differences are good to ~1e-9 relative on these inputs
TOKEN_RULE = ("x is one token, a vector of shape (d,) (d can be anything from 1 up); g has the same shape. "
              "Use x.size or x.shape[-1] for d, and no fixed number of axes.")
BATCH_RULE = ("layer_norm_backward must accept any shape (..., d): per-token statistics over the last axis "
              "(axis=-1, keepdims=True), and dgamma, dbeta summed over every leading axis, "
              "axis=tuple(range(x.ndim - 1)), whatever their number.")


def _input(x, d, seed, scale=1.0, offset=0.0):
    if x is not None:
        return np.array(x, dtype=np.float64)
    return random_input((d,), seed=seed, scale=scale, offset=offset)


def _x_hat_and_s(x: np.ndarray, eps: float):
    """Normalised input (from torch) and scale s = sqrt(biased var + eps), per last axis."""
    s = np.sqrt(np.var(x, axis=-1, keepdims=True) + eps)
    return oracles.layer_norm(x, eps), s


def _factor_cause(actual: np.ndarray, expected: np.ndarray, s: float, d: int) -> str | None:
    """If ``actual`` is a constant multiple of ``expected``, say what that constant means."""
    denom = float(np.sum(expected * expected))
    if denom == 0:
        return None
    c = float(np.sum(actual * expected)) / denom
    if relative_error(actual, c * expected) > 1e-6 or abs(c - 1) < 1e-9:
        return None
    known = [
        (s, "the whole result is s times too large: you did not divide by s = sqrt(var + eps)."),
        (1 / s, "the whole result is 1/s times too small: you divided by s twice (or by the variance)."),
        (np.sqrt((d - 1) / d), "the result is sqrt((d-1)/d) times the right one: you used the unbiased variance "
         "(dividing by d - 1, np.var(ddof=1) or torch.var's default). LayerNorm divides by d."),
        (np.sqrt(d / (d - 1)), "the result is sqrt(d/(d-1)) times the right one: a d - 1 where a d belongs."),
        (-1.0, "the sign is flipped."),
        (float(d), "the result is d times too large: a sum where a mean belongs (1/d missing)."),
        (1 / d, "the result is d times too small: an extra 1/d factor."),
    ]
    for value, cause in known:
        if abs(c - value) <= 1e-6 * max(1.0, abs(value)):
            return cause
    return f"the result is {c:.6g} times the right one everywhere: a constant factor is off."


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
    statistics = [Statistic(np.array(var)),
                  Statistic(np.array(var * d / (d - 1)), ["you used the unbiased variance (dividing by d - 1: "
                                                          "np.var(ddof=1) or torch.var's default). LayerNorm divides "
                                                          "by d."])]
    maps = [Map(lambda w: np.sqrt(w + eps)),
            Map(lambda w: np.sqrt(w) + eps, ["eps is outside the square root: s must be sqrt(var + eps), not "
                                             "sqrt(var) + eps."]),
            Map(lambda w: w + eps, ["you divided by the variance instead of s = sqrt(var + eps)."]),
            Map(lambda w: np.ones_like(w), ["you did not divide by s = sqrt(var + eps)."])]
    if eps > 0:
        maps.append(Map(lambda w: np.sqrt(w), [f"eps is ignored: s = sqrt(var) but eps = {eps} was passed; use "
                                               "sqrt(var + eps)."]))
    return describe(explain_scale(np.array(implied), statistics, maps, 1e-6))


def _jacobian_cause(J: np.ndarray, x: np.ndarray, eps: float) -> str:
    d = x.size
    x_hat, s = _x_hat_and_s(x, eps)
    s = float(s[0])
    reference = oracles.layer_norm_jacobian(x, eps)
    if eps > 0 and relative_error(J, oracles.layer_norm_jacobian(x, 0.0)) < 1e-9:
        return (f"your Jacobian is the one for eps = 0, but eps = {eps} was passed: use s = sqrt(var + eps) "
                "everywhere, including inside x_hat.")
    scale_cause = _implied_scale_cause(J, x, eps)
    if scale_cause:
        return scale_cause
    factor = _factor_cause(J, reference, s, d)
    if factor:
        return factor
    scale = float(np.max(np.abs(reference)))
    if np.max(np.abs(J @ np.ones(d))) > 1e-6 * scale:
        return ("the rows of J do not sum to zero (J @ ones(d) should be 0). The mean term -(1/d) 1 1^T, "
                "which comes from d(mu)/dx_j = 1/d, is missing or mis-scaled, or an outer product uses x (whose entries do not sum to zero) instead of "
                "x_hat. See it: print(J @ np.ones(d)).")
    if relative_error(J @ x_hat, reference @ x_hat) > 1e-6:
        return ("J @ x_hat is wrong (it should be about eps/(var+eps) * x_hat / s, i.e. almost 0). The variance term "
                "-(1/d) x_hat x_hat^T, from d(s)/dx_j = x_hat_j / d, is missing, built from x instead of x_hat, or "
                "x_hat uses the unbiased variance (ddof=1 or torch.var's default divides by d - 1; LayerNorm "
                "divides by d). See it: print(J @ x_hat).")
    if np.max(np.abs(J - J.T)) > 1e-9 * scale:
        return "J is not symmetric: both factors of the outer product must be x_hat (not x and x_hat)."
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
        forward = lambda t: oracles.layer_norm(t, eps)  # noqa: E731
        natural_size = 1.0 / np.sqrt(np.var(x) + eps)  # J's entries are O(1/s)
        cause = _jacobian_cause(J, x, eps)
        assert_close(J, central_difference_jacobian(forward, x), what, "central finite differences", FD_RTOL,
                     cause, floor=natural_size)
        assert_close(J, oracles.layer_norm_jacobian(x, eps), what, "torch autograd", RTOL, cause, floor=natural_size)
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
         "the outer products should be 1 1^T and x_hat x_hat^T."),
        (np.max(np.abs(P @ P - P)) > 1e-8, "s*J is not idempotent ((sJ)^2 != sJ): a term is mis-scaled "
         "(check the 1/d factors and that you divide by s exactly once)."),
        (np.max(np.abs(P @ np.ones(d))) > 1e-8, "s*J does not remove the direction 1 (s*J @ ones != 0): "
         "the -(1/d) 1 1^T term is missing or wrong."),
        (np.max(np.abs(P @ x_hat)) > 1e-8, "s*J does not remove the direction x_hat: "
         "the -(1/d) x_hat x_hat^T term is missing or wrong."),
        (np.linalg.matrix_rank(P, tol=1e-8) != d - 2, f"s*J has rank {np.linalg.matrix_rank(P, tol=1e-8)}, "
         f"expected d - 2 = {d - 2}: the projection must remove exactly two directions, 1 and x_hat."),
    ]
    for failed, message in problems:
        if failed:
            fail(f"{what}: {message}")
    passed(f"s*J is a symmetric, idempotent projection of rank d-2 = {d - 2} that removes 1 and x_hat")


def _vjp_cause(v: np.ndarray, x: np.ndarray, g: np.ndarray, eps: float, reference: np.ndarray) -> str | None:
    d = x.size
    x_hat, s = _x_hat_and_s(x, eps)
    s = float(s[0])
    if eps > 0 and relative_error(v, oracles.layer_norm_jacobian(x, 0.0) @ g) < 1e-9:
        return f"your result is the eps = 0 one, but eps = {eps} was passed: use s = sqrt(var + eps)."
    if relative_error(v, g / s) < 1e-9 or relative_error(v, g) < 1e-9:
        return "you returned g (divided by s) without removing its mean and its component along x_hat."
    factor = _factor_cause(v, reference, s, d)
    if factor:
        return factor
    scale = float(np.max(np.abs(reference))) or 1.0
    if abs(float(np.sum(v))) > 1e-6 * scale * d:
        return ("the result does not sum to zero. The -mean(g) term is missing, you used sum(g) instead of "
                "mean(g), or the last term uses x instead of x_hat (x's entries do not sum to zero). "
                "See it: print(layer_norm_vjp(x, g).sum()).")
    if abs(float(v @ x_hat) - float(reference @ x_hat)) > 1e-6 * scale * d:
        return ("the component along x_hat is wrong: the -mean(g * x_hat) * x_hat term is missing, uses x instead "
                "of x_hat, or uses a sum instead of a mean.")
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
    assert_close(v, reference, what, "torch autograd", RTOL, _vjp_cause(v, x, g, eps, reference))
    if layer_norm_jacobian is not None:
        J = strict_array(call_learner(layer_norm_jacobian, x, eps=eps, what=f"layer_norm_jacobian(x, eps={eps})",
                                      shape_rule=TOKEN_RULE),
                         "layer_norm_jacobian(x, eps)", (x.size, x.size))
        assert_close(v, J.T @ g, what, "your own layer_norm_jacobian(x, eps).T @ g", RTOL,
                     "your two functions disagree: one of them has a term the other lacks.")
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
        if report.largest_shape is not None and report.largest_bytes >= matrix // 2:
            shape = "x".join(str(n) for n in report.largest_shape)
            seen = (f"your code builds a (d, d) matrix: a {report.largest_kind} of shape "
                    f"({', '.join(str(n) for n in report.largest_shape)}), {report.largest_bytes / 2**20:.0f} MiB "
                    f"({shape} float64 values)")
        elif peak >= matrix // 2:
            seen = (f"your code builds a (d, d) matrix: it allocated {peak / 2**20:.0f} MiB at once, at least one "
                    f"(d, d) matrix of {matrix / 2**20:.0f} MiB")
        else:
            seen = "your code keeps far more than a few vectors of size d"
        where = ""
        if report.torch_peak and report.python_peak is not None:
            where = f" ({report.python_peak / 2**20:.1f} MiB numpy/Python, {report.torch_peak / 2**20:.1f} MiB torch)"
        fail(f"{what} used {peak / 2**20:.1f} MiB at its peak{where}; a (d, d) matrix is {matrix / 2**20:.0f} MiB and "
             f"the vector formula needs well under {budget / 2**20:.1f} MiB.\nLikely cause: {seen}. You built the "
             "Jacobian or an outer product (np.outer, torch.outer, x[:, None] * x[None, :], "
             "torch.autograd.functional.jacobian). Use the formula with mean(g) and mean(g * x_hat).")
    assert_close(v, oracles.layer_norm_grads(g, x, np.ones(d), 1e-5)[0], what, "torch autograd", RTOL, None)
    shown = f"{peak / 2**20:.2f} MiB" if peak is not None else "an unmeasured amount"
    passed(f"layer_norm_vjp at d={d} peaked at {shown} (a d x d matrix would be {matrix / 2**20:.0f} MiB)")


def _backward_causes(dx, dgamma, dbeta, dy, x, gamma, eps, reference):
    ref_dx, ref_dgamma, ref_dbeta = reference
    lead = tuple(range(x.ndim - 1))
    x_hat, s = _x_hat_and_s(x, eps)
    if relative_error(dbeta, ref_dbeta) > RTOL:
        return "dbeta", "dbeta is the sum of dy over every leading axis: dy.sum(axis=tuple(range(dy.ndim - 1)))."
    if relative_error(dgamma, ref_dgamma) > RTOL:
        if relative_error(dgamma, np.sum(dy * x, axis=lead)) < 1e-9:
            return "dgamma", "dgamma used x instead of x_hat: it is sum(dy * x_hat) over the leading axes."
        if relative_error(dgamma, np.sum(dy * x_hat * gamma, axis=lead)) < 1e-9:
            return "dgamma", "dgamma was multiplied by gamma: it is sum(dy * x_hat), gamma does not appear."
        return "dgamma", "dgamma should be sum(dy * x_hat) over every leading axis, with x_hat from the forward pass."
    if relative_error(dx, ref_dx) > RTOL:
        if relative_error(dx, oracles.layer_norm_grads(dy, x, np.ones_like(gamma), eps)[0]) < 1e-9:
            return "dx", "dx ignores gamma: the gradient reaching x_hat is g = gamma * dy, not dy."
        if relative_error(dx, oracles.layer_norm_grads(dy / gamma, x, gamma, eps)[0]) < 1e-9:
            return "dx", "dx divides by gamma or omits it twice; the gradient reaching x_hat is g = gamma * dy."
        row_sums = np.sum(dx, axis=-1)
        if np.max(np.abs(row_sums)) > 1e-6 * np.max(np.abs(ref_dx)) * x.shape[-1]:
            return "dx", ("each token's dx should sum to zero; the -mean(g) term is missing, or a mean/sum is taken "
                          "over the wrong axis (use axis=-1, keepdims=True).")
        factor = _factor_cause(dx, ref_dx, float(np.mean(s)), x.shape[-1])
        return "dx", factor or ("dx is off: check the -mean(g * x_hat) * x_hat term and that statistics are "
                                "per token (axis=-1, keepdims=True).")
    return None, None


@check
def check_layer_norm_backward(layer_norm_backward, shape=(2, 3, 5), eps=1e-5, seed=0, gamma=None, scale=1.0, offset=0.0):
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
             f"{' of length ' + str(len(result)) if isinstance(result, (tuple, list)) else ''}.")
    dx, dgamma, dbeta = result
    for name, value in (("dgamma", dgamma), ("dbeta", dbeta)):
        if isinstance(value, np.ndarray) and value.shape != (d,) and len(shape) > 1:
            if value.shape == shape:
                fail(f"{what}: {name} has shape {value.shape}, expected ({d},).\nLikely cause: not summed over the "
                     f"tokens. {name} is shared by every token, so sum over every leading axis: "
                     f"axis={tuple(range(len(shape) - 1))}.")
            if value.shape == shape[1:]:
                fail(f"{what}: {name} has shape {value.shape}, expected ({d},).\nLikely cause: summed over axis 0 "
                     f"only; sum over every leading axis, axis={tuple(range(len(shape) - 1))}.")
    dx = strict_array(dx, what + ": dx", shape)
    dgamma = strict_array(dgamma, what + ": dgamma", (d,))
    dbeta = strict_array(dbeta, what + ": dbeta", (d,))
    reference = oracles.layer_norm_grads(dy, x, gamma, eps)
    name, cause = _backward_causes(dx, dgamma, dbeta, dy, x, gamma, eps, reference)
    if name is not None:
        actual = {"dx": dx, "dgamma": dgamma, "dbeta": dbeta}[name]
        expected = dict(zip(("dx", "dgamma", "dbeta"), reference))[name]
        assert_close(actual, expected, f"{what}: {name}", "torch autograd", RTOL, cause)
    passed(f"layer_norm_backward matches autograd for x of shape {shape}, eps={eps}")
