"""The 02_geometry checks accept correct variants and diagnose classic mistakes."""
import pytest

from grader.checks import geometry as checks
from grader.compare import CheckFailed
from tests.implementations import define_in_sandbox
from tests.implementations import geometry as impl


@pytest.mark.parametrize("centering_matrix", impl.CORRECT_CENTERINGS, ids=lambda f: f.__name__)
def test_correct_centering_matrices_pass(centering_matrix):
    for d in (1, 2, 3, 4, 17, 256):
        checks.check_centering_matrix(centering_matrix, d=d, seed=d)


@pytest.mark.parametrize("name", list(impl.WRONG_CENTERINGS))
def test_wrong_centering_matrices_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_CENTERINGS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_centering_matrix(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


@pytest.mark.parametrize("name", ["identity", "1/d missing", "divided by d twice", "d - 1 for d", "diagonal only",
                                  "running mean"])
def test_wrong_centering_matrices_fail_at_every_size(name):
    function = impl.WRONG_CENTERINGS[name][0]
    for d in (3, 9, 64):
        with pytest.raises(CheckFailed):
            checks.check_centering_matrix(function, d=d)


@pytest.mark.parametrize("gap", impl.CORRECT_GAPS, ids=lambda f: f.__name__)
def test_correct_gaps_pass(gap):
    checks.check_invariance_gap(gap)
    checks.check_invariance_gap(gap, "layer_norm", a=-2.0, c=0.5, shape=(2, 4, 8), seed=1)
    checks.check_invariance_gap(gap, "layer_norm", a=1e-3, c=0.0, shape=(5, 16), seed=2)
    checks.check_invariance_gap(gap, "rms_norm", a=0.25, c=-3.0, shape=(7,), seed=3, offset=10.0)
    checks.check_invariance_gap(gap, "layer_norm", a=10.0, c=100.0, shape=(4, 32), seed=4, eps=1.0)


@pytest.mark.parametrize("name", list(impl.WRONG_GAPS))
def test_wrong_gaps_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_GAPS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_invariance_gap(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


@pytest.mark.parametrize("name", ["shift not added", "signed maximum", "mean instead of max", "first token only"])
@pytest.mark.parametrize("seed", range(5))
def test_wrong_gaps_fail_for_other_seeds(name, seed):
    with pytest.raises(CheckFailed):
        checks.check_invariance_gap(impl.WRONG_GAPS[name][0], seed=seed)


def test_stubs_raise_not_implemented():
    def centering_stub(d):
        raise NotImplementedError()

    def gap_stub(norm, x, a, c):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_centering_matrix(centering_stub)
    with pytest.raises(NotImplementedError):
        checks.check_invariance_gap(gap_stub)


@pytest.mark.parametrize("name", ["x changed in place", "signed maximum", "shift not added", "first token only"])
def test_gap_diagnoses_survive_isolated_grading(name):
    """Under `grader grade` the learner's function runs in a sandbox and calls `norm` back."""
    sandbox_module = pytest.importorskip("grader.sandbox.client")
    function, diagnosis, kwargs = impl.WRONG_GAPS[name]
    with sandbox_module.Sandbox(mode="auto") as sandbox:
        checks.check_invariance_gap(define_in_sandbox(sandbox, impl.gap_per_token, "invariance_gap"))
        with pytest.raises(CheckFailed) as failure:
            checks.check_invariance_gap(define_in_sandbox(sandbox, function, "invariance_gap"), **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


def test_norm_squared_check_prints_and_never_raises(capsys):
    """The derivation check of 02: placeholder, right and wrong expressions, all without raising."""
    import numpy as np

    assert checks.check_norm_squared(lambda x, eps: ...) is False
    assert "write your expression first" in capsys.readouterr().out
    assert checks.check_norm_squared(None) is False
    right = lambda x, eps: x.size * x.var() / (x.var() + eps)  # noqa: E731
    assert checks.check_norm_squared(right) is True
    assert checks.check_norm_squared(lambda x, eps: x.var() / (x.var() + eps)) is False
    assert "multiply by d" in capsys.readouterr().out
    assert checks.check_norm_squared(lambda x, eps: float(x.size)) is False
    assert checks.check_norm_squared(lambda x, eps: 1 / 0) is False
    assert checks.check_norm_squared(lambda x, eps: np.ones(3)) is False
