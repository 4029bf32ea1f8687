"""Derive before you see it: checks for a learner's derivative, written as a small expression.

A derivation step in notebooks 03 and 04 asks for one expression, e.g.
``def my_ds_dx(x, eps): return ...``. The checks here call it on a few float64 inputs and
compare what comes back with **central finite differences of the forward pass**, computed
inside the check. The forward (the mean, the variance, the RMS, the normalised token) is the
only formula in this module: no derivative is written down anywhere, so nothing here can be
read as the answer.

When the expression is wrong, the diagnosis comes from the difference itself:

* a constant ratio between the answer and the differences names a factor (the sign, d, 2, or
  the scale s or r of the forward);
* an answer equal to the differences taken with ``eps = 0`` means eps was dropped;
* a difference that lies along a few named directions (the ones vector, the normalised token,
  the identity) says which term is missing or has the wrong coefficient.

An unwritten expression (``...`` or None) prints "write your expression first" and never raises.
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np

from grader.compare import check, fail, passed, preview, run_learner

TOL = 1e-7       # central differences of these float64 forwards are good to ~1e-10 relative
FIT = 1e-6       # how exactly a named pattern must explain a wrong answer
NOT_YET = "✎ {what}: write your expression first (replace the ... in the cell above), then run this cell again."
NORMS = ("layer", "rms")


# ------------------------------------------------------------------ the forwards (the only formulas here)
def _scale(x, eps, norm):
    """s = sqrt(var(x) + eps) for LayerNorm, r = sqrt(mean(x**2) + eps) for RMSNorm."""
    centred = x - np.mean(x) if norm == "layer" else x
    second_moment = float(np.mean(centred * centred))
    return (second_moment + eps) ** 0.5


def _x_hat(x, eps, norm):
    centred = x - np.mean(x) if norm == "layer" else x
    return centred / _scale(x, eps, norm)


def _step(x):
    return 1e-5 * max(1.0, float(np.max(np.abs(x))))


def _fd_gradient(f, x):
    """Central differences of a scalar f at x: (d,)."""
    h = _step(x)
    out = np.empty(x.size)
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        out[j] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def _fd_jacobian(f, x):
    """Central differences of a vector f at x: (d, d), entry [i, j] = d f_i / d x_j."""
    h = _step(x)
    columns = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        columns.append((f(x + e) - f(x - e)) / (2 * h))
    return np.stack(columns, axis=1)


# ------------------------------------------------------------------ the inputs
def _cases(norm, d_min=4):
    """A few float64 tokens (x, eps): the worked example, an offset one, one where eps matters."""
    rng = np.random.default_rng(3 if norm == "layer" else 4)
    cases = [(np.array([2.0, 4.0, 6.0, 8.0]), 1e-5),
             (1.5 + 2.0 * rng.standard_normal(6), 1e-5),
             (0.7 * rng.standard_normal(5), 0.5)]
    if d_min > 4:
        cases = [(np.concatenate([x, rng.standard_normal(d_min)]), eps) for x, eps in cases]
    return cases


def _norm_name(norm):
    if norm not in NORMS:
        raise ValueError(f"norm must be 'layer' or 'rms', got {norm!r}")
    return ("LayerNorm", "s", "s = sqrt(var(x) + eps)") if norm == "layer" else (
        "RMSNorm", "r", "r = sqrt(mean(x**2) + eps)")


def _unwritten(value):
    return value is None or value is Ellipsis


def _call(expr, args, what):
    """The learner's expression on one input, warnings silenced (nothing may reach stderr)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return run_learner(expr, args, {}, what=what)


def _as_vector(value, d, what):
    if isinstance(value, (list, tuple)):
        value = np.array(value, dtype=object)
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        fail(f"{what} returned {type(value).__name__}; it should return an array of {d} numbers, one per j.")
    if array.shape != (d,):
        fail(f"{what} returned shape {array.shape}; it should return shape ({d},), one number per j "
             "(numpy arrays of shape (d,) in, one array of shape (d,) out).")
    if not np.all(np.isfinite(array)):
        fail(f"{what} returned non-finite values {preview(array)}: a division by zero or an overflow.")
    return array


def _as_number(value, what):
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(())
    if isinstance(value, np.ndarray):
        fail(f"{what} returned an array of shape {value.shape}; it should return one number, the entry for "
             "the given i and j (use (i == j) for the Kronecker delta, x_hat[i] and x_hat[j] for entries).")
    try:
        number = float(value)
    except (TypeError, ValueError):
        fail(f"{what} returned {type(value).__name__}; it should return one number.")
    if not np.isfinite(number):
        fail(f"{what} returned {number}: a division by zero or an overflow.")
    return number


def _relative(a, b):
    """Largest |a - b| over the largest |b| (1 when b is all zero)."""
    scale = np.abs(b).max() or 1.0
    return float(np.abs(a - b).max() / scale)


# ------------------------------------------------------------------ the diagnoses
def _factor_cause(answers, references, scales, ds):
    """A product of (-1), d, 2 and the forward's scale that turns every reference into the answer, named."""
    found = None
    for total, (sign, pd, p2, ps) in sorted(
            ((abs(pd) + abs(p2) + abs(ps) + (sign < 0), (sign, pd, p2, ps))
             for sign, pd, p2, ps in itertools.product((1, -1), (0, 1, -1), (0, 1, -1), (0, 1, -1)))):
        if total == 0:
            continue
        if all(_relative(a, sign * d ** pd * 2.0 ** p2 * s ** ps * n) < FIT
               for a, n, s, d in zip(answers, references, scales, ds, strict=True)):
            found = (sign, pd, p2, ps)
            break
    return found


def _describe_factor(found, scale_name, norm_label):
    sign, pd, p2, ps = found
    parts = []
    if sign < 0:
        parts.append("the sign is flipped (your answer is minus the right one)")
    if pd:
        parts.append(f"a factor d {'too many' if pd > 0 else 'too few'} (your answer is "
                     f"{'d times' if pd > 0 else '1/d times'} the right one): count the 1/d that the mean "
                     "over the d features brings")
    if p2:
        parts.append(f"a factor 2 {'too many' if p2 > 0 else 'too few'}: the derivative of a square root, "
                     "d sqrt(u)/du = 1/(2 sqrt(u)), and of a square, d(u**2)/du = 2u")
    if ps:
        parts.append(f"a factor {scale_name} {'too many' if ps > 0 else 'too few'}, where {norm_label}: "
                     "the chain rule through the square root, or the division by the scale, is off")
    return "; ".join(parts)


def _pattern_cause(answers, references, bases, names):
    """Which named directions (bases: per case a list of arrays) explain answer - reference exactly.

    Returns [(name, missing)] for every direction with a real coefficient; ``missing`` is True when
    the learner's answer has no component along it at all. None when the directions do not explain it.
    """
    flagged = None
    for a, n, basis in zip(answers, references, bases, strict=True):
        diff = (a - n).ravel()
        if np.max(np.abs(diff)) == 0:
            continue
        B = np.stack([b.ravel() for b in basis], axis=1)
        coef, *_ = np.linalg.lstsq(B, diff, rcond=None)
        if np.max(np.abs(B @ coef - diff)) > FIT * np.max(np.abs(diff)):
            return None
        own, *_ = np.linalg.lstsq(B, a.ravel(), rcond=None)
        own_fits = np.max(np.abs(B @ own - a.ravel())) <= FIT * max(np.max(np.abs(a)), 1e-300)
        here = []
        for k, name in enumerate(names):
            if np.max(np.abs(coef[k] * B[:, k])) > 1e-3 * np.max(np.abs(diff)):
                size = np.max(np.abs(B[:, k]))
                here.append((name, bool(own_fits and abs(own[k]) * size <= 1e-9 * max(np.max(np.abs(a)), 1e-300))))
        if flagged is None or len(here) > len(flagged):
            flagged = here
    return flagged or None


def _report(what, step, answers, references, scales, ds, epsless, bases, names, norm, shown):
    """Fail with the most specific diagnosis of a wrong expression."""
    label, scale_name, norm_label = _norm_name(norm)
    worst = max(range(len(answers)), key=lambda k: _relative(answers[k], references[k]))
    x, eps = shown[worst]
    rows = " (the matrix row by row)" if np.ndim(references[worst]) == 2 else ""
    head = (f"{what} does not match central finite differences of the {label} forward.\n"
            f"  at x = {preview(x)}, eps = {eps:g}:\n"
            f"  finite differences: {preview(references[worst])}{rows}\n"
            f"  your expression:    {preview(answers[worst])}\n"
            f"  largest relative difference {_relative(answers[worst], references[worst]):.1e} "
            f"(a right expression agrees to about 1e-10)")
    if all(np.max(np.abs(a)) == 0 for a in answers):
        fail(head + "\nLikely cause: your expression returns zeros everywhere.")
    found = _factor_cause(answers, references, scales, ds)
    if found:
        fail(head + "\nLikely cause: " + _describe_factor(found, scale_name, norm_label) + ".")
    if all(_relative(a, n0) < FIT for a, n0 in zip(answers, epsless, strict=True)):
        fail(head + f"\nLikely cause: eps is missing. Your expression equals the derivative for eps = 0, but eps "
                    f"sits inside the square root of {scale_name} and moves every value that uses {scale_name} "
                    f"and x_hat.")
    pattern = _pattern_cause(answers, references, bases, names)
    if pattern:
        lines = []
        for (name, note), missing in pattern:
            lines.append(f"the {name} is {'missing' if missing else 'off (a wrong coefficient or sign)'}"
                         + (f": {note}" if note else ""))
        fail(head + "\nLikely cause: " + "; ".join(lines) + ".")
    fail(head + f"\nLikely cause: not one factor or one term, but a different expression. Re-derive {step} "
                "one line at a time, then open the worked derivation below the check.")


_MEAN_TERM = {"layer": ("term that comes from the mean, the same for every {index}",
                       "mu moves when any x_j moves; keep that contribution, with its sign"),
              "rms": ("term that is the same for every {index}",
                      "RMSNorm has no mean, so nothing of the form 'subtract mu' belongs in it")}


def _mean_term(norm, index):
    name, note = _MEAN_TERM[norm]
    return name.format(index=index), note


# ------------------------------------------------------------------ the public checks
@check
def check_scale_gradient(expr, norm="layer"):
    """``expr(x, eps)`` must return d s / d x_j for every j, shape (d,) (``norm="rms"``: d r / d x_j)."""
    label, scale_name, _ = _norm_name(norm)
    what = f"d{scale_name}/dx_j for {label}"
    cases = _cases(norm)
    first = _call(expr, (cases[0][0].copy(), cases[0][1]), what)
    if _unwritten(first):
        print(NOT_YET.format(what=what))
        return None
    answers, references, epsless, scales, ds, bases = [], [], [], [], [], []
    for k, (x, eps) in enumerate(cases):
        raw = first if k == 0 else _call(expr, (x.copy(), eps), what)
        answers.append(_as_vector(raw, x.size, f"your {what}"))
        references.append(_fd_gradient(lambda z, eps=eps: _scale(z, eps, norm), x))
        epsless.append(_fd_gradient(lambda z: _scale(z, 0.0, norm), x))
        scales.append(_scale(x, eps, norm))
        ds.append(x.size)
        bases.append([np.ones(x.size), _x_hat(x, eps, norm)])
    errors = [_relative(a, n) for a, n in zip(answers, references, strict=True)]
    if max(errors) > TOL:
        names = [_mean_term(norm, "j"), ("part along x_hat", "the deviations x_j - mu" if norm == "layer" else
                                         "x_j itself")]
        _report(f"your {what}", f"d{scale_name}/dx_j", answers, references, scales, ds, epsless, bases, names,
                norm, cases)
    passed(f"{what} matches central finite differences on {len(cases)} tokens "
           f"(largest relative difference {max(errors):.0e})")
    return True


@check
def check_jacobian_entry(expr, norm="layer"):
    """``expr(x, eps, i, j)`` must return the one number d x_hat_i / d x_j."""
    label, scale_name, _ = _norm_name(norm)
    what = f"Jacobian entry J_ij = d x_hat_i / d x_j of {label}"
    cases = _cases(norm)
    first = _call(expr, (cases[0][0].copy(), cases[0][1], 0, 1), what)
    if _unwritten(first):
        print(NOT_YET.format(what=what))
        return None
    answers, references, epsless, scales, ds, bases = [], [], [], [], [], []
    for x, eps in cases:
        d = x.size
        J = np.empty((d, d))
        for i in range(d):
            for j in range(d):
                J[i, j] = _as_number(_call(expr, (x.copy(), eps, i, j), what), f"your {what} at i={i}, j={j}")
        answers.append(J)
        references.append(_fd_jacobian(lambda z, eps=eps: _x_hat(z, eps, norm), x))
        epsless.append(_fd_jacobian(lambda z: _x_hat(z, 0.0, norm), x))
        scales.append(_scale(x, eps, norm))
        ds.append(d)
        xh = _x_hat(x, eps, norm)
        bases.append([np.eye(d), np.ones((d, d)), np.outer(xh, xh)])
    errors = [_relative(a, n) for a, n in zip(answers, references, strict=True)]
    if max(errors) > TOL:
        names = [("delta_ij part", "on the diagonal i = j only, what x_i itself contributes to x_hat_i"),
                 _mean_term(norm, "i and j"),
                 ("x_hat_i x_hat_j part", f"what moving {scale_name} in the denominator contributes")]
        _report(f"your {what}", "the entry", answers, references, scales, ds, epsless, bases, names, norm, cases)
    passed(f"{what} matches central finite differences for every i, j on {len(cases)} tokens "
           f"(largest relative difference {max(errors):.0e})")
    return True


@check
def check_vjp_expression(expr, norm="layer"):
    """``expr(x, g, eps)`` must return J^T g = dL/dx for L = g . x_hat(x), shape (d,)."""
    label, scale_name, _ = _norm_name(norm)
    what = f"J^T g for {label}"
    cases = _cases(norm, d_min=8)
    rng = np.random.default_rng(7)
    gs = [rng.standard_normal(x.size) for x, _ in cases]
    first = _call(expr, (cases[0][0].copy(), gs[0].copy(), cases[0][1]), what)
    if _unwritten(first):
        print(NOT_YET.format(what=what))
        return None
    answers, references, epsless, scales, ds, bases = [], [], [], [], [], []
    for k, ((x, eps), g) in enumerate(zip(cases, gs, strict=True)):
        raw = first if k == 0 else _call(expr, (x.copy(), g.copy(), eps), what)
        answers.append(_as_vector(raw, x.size, f"your {what}"))
        references.append(_fd_gradient(lambda z, eps=eps, g=g: float(g @ _x_hat(z, eps, norm)), x))
        epsless.append(_fd_gradient(lambda z, g=g: float(g @ _x_hat(z, 0.0, norm)), x))
        scales.append(_scale(x, eps, norm))
        ds.append(x.size)
        bases.append([g, np.ones(x.size), _x_hat(x, eps, norm)])
    errors = [_relative(a, n) for a, n in zip(answers, references, strict=True)]
    if max(errors) > TOL:
        names = [("g term", "the identity part of J, from delta_ij"), _mean_term(norm, "feature"),
                 ("term along x_hat", f"what moving {scale_name} contributes")]
        _report(f"your {what}", "J^T g", answers, references, scales, ds, epsless, bases, names, norm, cases)
    passed(f"{what} matches central finite differences of g . x_hat(x) on {len(cases)} tokens "
           f"(largest relative difference {max(errors):.0e})")
    return True
