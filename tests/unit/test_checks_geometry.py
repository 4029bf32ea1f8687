"""The 02_geometry checks accept correct variants and diagnose classic mistakes."""
import numpy as np
import pytest

from grader.checks import geometry as checks
from grader.compare import CheckFailed
from tests.implementations import define_in_sandbox
from tests.implementations import geometry as impl

HIDDEN_PROJECTION_CASES = ((1, (0,), 1, 0, False), (5, (0, 1, 2, 3, 4), 5, 1, True), (64, (0, 3, 7, 9), 4, 2, True),
                           (17, (1, 2, 5), 6, 3, True), (256, (0,), 1, 4, False), (8, (0, 1, 2), 3, 5, True))


@pytest.mark.parametrize("complement_projection", impl.CORRECT_PROJECTIONS, ids=lambda f: f.__name__)
def test_correct_projections_pass(complement_projection):
    checks.check_complement_projection(complement_projection)
    checks.check_complement_projection(complement_projection, cases=HIDDEN_PROJECTION_CASES)


@pytest.mark.parametrize("name", list(impl.WRONG_PROJECTIONS))
def test_wrong_projections_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_PROJECTIONS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_complement_projection(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


def test_test_matrices_have_the_span_they_claim():
    """The DCT columns are orthogonal, and V = B R spans exactly r directions (so trace d - r is the target)."""
    import numpy as np

    B = checks.dct_basis(9, range(9))
    G = B.T @ B
    np.testing.assert_allclose(G - np.diag(np.diag(G)), 0.0, atol=1e-12)
    np.testing.assert_allclose(B[:, 0], 1.0)
    for case in checks.STANDARD_PROJECTION_CASES + HIDDEN_PROJECTION_CASES:
        c = checks._Case(*case)
        assert np.linalg.matrix_rank(c.V) == c.r == np.linalg.matrix_rank(np.hstack([c.V, c.B]))
        assert c.dependent == (c.k > c.r)


def test_the_centring_matrix_is_the_first_case():
    """With V = the all-ones column, the projection is I - 1 1^T / d, and it centres (2, 4, 6, 8)."""
    import numpy as np

    P = impl.projection_gram_schmidt(np.ones((4, 1)))
    np.testing.assert_allclose(P, np.eye(4) - 0.25, atol=1e-15)
    np.testing.assert_allclose(P @ np.array([2.0, 4.0, 6.0, 8.0]), [-3.0, -1.0, 1.0, 3.0], atol=1e-14)


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
    def projection_stub(V):
        raise NotImplementedError()

    def gap_stub(norm, x, a, c):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_complement_projection(projection_stub)
    with pytest.raises(NotImplementedError):
        checks.check_invariance_gap(gap_stub)


@pytest.mark.slow  # each case graded in a real sandbox
@pytest.mark.parametrize("name", ["x changed in place", "signed maximum", "shift not added", "first token only"])
def test_gap_diagnoses_survive_isolated_grading(name):
    """Under `grader grade` the learner's function runs in a sandbox and calls `norm` back."""
    sandbox_module = pytest.importorskip("grader.grading.sandbox.client")
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
    right = lambda x, eps: x.size * x.var() / (x.var() + eps)  # noqa: E731 - a one-line reference
    assert checks.check_norm_squared(right) is True
    assert checks.check_norm_squared(lambda x, eps: x.var() / (x.var() + eps)) is False
    assert "multiply by d" in capsys.readouterr().out
    assert checks.check_norm_squared(lambda x, eps: float(x.size)) is False
    assert checks.check_norm_squared(lambda x, eps: 1 / 0) is False
    assert checks.check_norm_squared(lambda x, eps: np.ones(3)) is False


def test_hidden_tests_reject_a_special_case_on_the_first_entry():
    """issue 42: returning 0 whenever V[0, 0] == 0 passed every check; standard-basis, zero-first-row and
    rank-deficient bases in the hidden tests now catch it, and the correct implementations still pass."""
    from tests.diagnosis_harness import diagnose, solution

    right = solution("02_geometry", "complement_projection")

    def complement_projection(V):
        if V[0, 0] == 0:
            return np.zeros((V.shape[0], V.shape[0]))
        return right(V)

    outcome = diagnose("02_geometry", "complement_projection", complement_projection)
    assert not outcome.passed and outcome.test == "test_complement_projection", outcome
    assert diagnose("02_geometry", "complement_projection", right).passed
