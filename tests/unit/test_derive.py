"""Derivation checks (grader.derive): right expressions pass, classic wrong ones are named, `...` never raises."""
import contextlib
import io

import numpy as np
import pytest

from grader import derive
from grader.compare import CheckFailed


# ------------------------------------------------------------------ the learner's side, right and wrong
def _s(x, eps):
    return np.sqrt(x.var() + eps)


def _r(x, eps):
    return np.sqrt(np.mean(x**2) + eps)


def _hat(x, eps, norm):
    return (x - x.mean()) / _s(x, eps) if norm == "layer" else x / _r(x, eps)


def _scale(x, eps, norm):
    return _s(x, eps) if norm == "layer" else _r(x, eps)


def right_scale(norm):
    return lambda x, eps: _hat(x, eps, norm) / x.size


def right_entry(norm):
    def entry(x, eps, i, j):
        h, d = _hat(x, eps, norm), x.size
        mean_term = 1.0 / d if norm == "layer" else 0.0
        return ((i == j) - mean_term - h[i] * h[j] / d) / _scale(x, eps, norm)
    return entry


def right_vjp(norm):
    def vjp(x, g, eps):
        h = _hat(x, eps, norm)
        mean_term = g.mean() if norm == "layer" else 0.0
        return (g - mean_term - np.mean(g * h) * h) / _scale(x, eps, norm)
    return vjp


NORMS = ["layer", "rms"]
CHECKS = [(derive.check_scale_gradient, right_scale, lambda f: (lambda x, eps: f(x, eps))),
          (derive.check_jacobian_entry, right_entry, lambda f: (lambda x, eps, i, j: f(x, eps, i, j))),
          (derive.check_vjp_expression, right_vjp, lambda f: (lambda x, g, eps: f(x, g, eps)))]


def quiet(check, expr, norm):
    out, err = io.StringIO(), io.StringIO()
    failure = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            check(expr, norm=norm)
        except CheckFailed as error:
            failure = error
    assert err.getvalue() == "", err.getvalue()
    return out.getvalue(), failure


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("index", range(3))
def test_right_expressions_pass(norm, index):
    check, right, _ = CHECKS[index]
    out, failure = quiet(check, right(norm), norm)
    assert failure is None, str(failure)
    assert "✔" in out


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("index", range(3))
def test_unwritten_expression_prints_and_never_raises(norm, index):
    check = CHECKS[index][0]
    for stub in (lambda *args: ..., lambda *args: None):
        out, failure = quiet(check, stub, norm)
        assert failure is None
        assert "write your expression first" in out


def _wrong(norm):
    """(check, wrong expression, phrase the diagnosis must contain)."""
    S, E, V = (CHECKS[k][0] for k in range(3))
    scale, entry, vjp = right_scale(norm), right_entry(norm), right_vjp(norm)
    cases = {
        "scale sign": (S, lambda x, eps: -scale(x, eps), "sign is flipped"),
        "scale factor d": (S, lambda x, eps: scale(x, eps) * x.size, "factor d too many"),
        "scale factor 2": (S, lambda x, eps: 2 * scale(x, eps), "factor 2 too many"),
        "scale eps ignored": (S, lambda x, eps: scale(x, 0.0), "eps is missing"),
        "entry sign": (E, lambda x, eps, i, j: -entry(x, eps, i, j), "sign is flipped"),
        "entry factor d": (E, lambda x, eps, i, j: entry(x, eps, i, j) / x.size, "factor d too few"),
        "entry missing x_hat term": (E, lambda x, eps, i, j: entry(x, eps, i, j)
                                     + _hat(x, eps, norm)[i] * _hat(x, eps, norm)[j] / x.size / _scale(x, eps, norm),
                                     "x_hat_i x_hat_j part is"),
        "entry missing delta": (E, lambda x, eps, i, j: entry(x, eps, i, j) - (i == j) / _scale(x, eps, norm),
                                "delta_ij part"),
        "vjp sign": (V, lambda x, g, eps: -vjp(x, g, eps), "sign is flipped"),
        "vjp factor d": (V, lambda x, g, eps: x.size * vjp(x, g, eps), "factor d too many"),
        "vjp missing x_hat term": (V, lambda x, g, eps: vjp(x, g, eps)
                                   + np.mean(g * _hat(x, eps, norm)) * _hat(x, eps, norm) / _scale(x, eps, norm),
                                   "term along x_hat is"),
    }
    if norm == "layer":
        cases["entry missing mean term"] = (E, lambda x, eps, i, j: entry(x, eps, i, j) + 1 / x.size / _s(x, eps),
                                            "term that comes from the mean")
        cases["vjp missing mean term"] = (V, lambda x, g, eps: vjp(x, g, eps) + g.mean() / _s(x, eps),
                                          "term that comes from the mean")
    else:
        cases["entry with LayerNorm's mean term"] = (E,
                                                     lambda x, eps, i, j: entry(x, eps, i, j) - 1 / x.size / _r(x, eps),
                                                     "RMSNorm has no mean")
        cases["vjp with LayerNorm's mean term"] = (V, lambda x, g, eps: vjp(x, g, eps) - g.mean() / _r(x, eps),
                                                   "RMSNorm has no mean")
    return cases


@pytest.mark.parametrize("norm, name", [(n, k) for n in NORMS for k in _wrong(n)])
def test_classic_mistakes_are_named(norm, name):
    check, expr, phrase = _wrong(norm)[name]
    _, failure = quiet(check, expr, norm)
    assert failure is not None, f"{name} passed"
    assert phrase in str(failure), str(failure)
    assert failure.check == check.__name__


def test_missing_term_is_called_missing():
    _, failure = quiet(derive.check_vjp_expression,
                       lambda x, g, eps: (g - g.mean()) / _s(x, eps), "layer")
    assert "term along x_hat is missing" in str(failure), str(failure)


def test_learner_errors_and_wrong_shapes_are_diagnosed_quietly():
    _, failure = quiet(derive.check_scale_gradient, lambda x, eps: x.no_such_thing, "layer")
    assert failure is not None and "AttributeError" in str(failure)
    _, failure = quiet(derive.check_scale_gradient, lambda x, eps: np.zeros(2), "rms")
    assert failure is not None and "shape" in str(failure)
    _, failure = quiet(derive.check_jacobian_entry, lambda x, eps, i, j: np.eye(x.size), "layer")
    assert failure is not None and "one number" in str(failure)
    _, failure = quiet(derive.check_vjp_expression, lambda x, g, eps: g / 0.0, "rms")
    assert failure is not None and "non-finite" in str(failure)


def test_no_derivative_is_written_in_the_module():
    """The oracle is finite differences: the module holds forwards only."""
    import inspect
    source = inspect.getsource(derive)
    for closed_form in ("/ x.size", "np.eye(d) -", "np.outer(xh, xh) /", "g.mean()", "x_hat / d"):
        assert closed_form not in source, closed_form
