"""The 03_backward checks accept correct variants and diagnose classic mistakes."""
import pytest

from grader.checks import backward as checks
from grader.compare import CheckFailed
from tests.implementations import backward as impl


@pytest.mark.parametrize("jacobian", impl.CORRECT_JACOBIANS, ids=lambda f: f.__name__)
def test_correct_jacobians_pass(jacobian):
    checks.check_layer_norm_jacobian(jacobian)
    checks.check_layer_norm_jacobian(jacobian, d=9, eps=1.0, seed=3)
    checks.check_layer_norm_jacobian(jacobian, d=5, seed=4, scale=1e-3, offset=5.0)
    checks.check_jacobian_is_projection(jacobian, d=7)


@pytest.mark.parametrize("name", list(impl.WRONG_JACOBIANS))
def test_wrong_jacobians_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_JACOBIANS[name]
    with pytest.raises(CheckFailed, match=None) as failure:
        checks.check_layer_norm_jacobian(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


@pytest.mark.parametrize("name", ["no mean term", "no variance term", "no division by s", "x instead of x_hat"])
def test_projection_check_rejects(name):
    with pytest.raises(CheckFailed):
        checks.check_jacobian_is_projection(impl.WRONG_JACOBIANS[name][0])


@pytest.mark.parametrize("vjp", impl.CORRECT_VJPS, ids=lambda f: f.__name__)
def test_correct_vjps_pass(vjp):
    checks.check_layer_norm_vjp(vjp, impl.jacobian_entrywise)
    checks.check_layer_norm_vjp(vjp, d=33, eps=1.0, seed=2, scale=1e-3, offset=-3.0)
    checks.check_vjp_memory(vjp, d=2048)


@pytest.mark.parametrize("name", list(impl.WRONG_VJPS))
def test_wrong_vjps_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_VJPS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_layer_norm_vjp(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


def test_vjp_that_builds_the_jacobian_fails_the_memory_check():
    with pytest.raises(CheckFailed, match="built the Jacobian"):
        checks.check_vjp_memory(impl.vjp_builds_jacobian, d=2048)


def test_vjp_disagreeing_with_jacobian_is_reported():
    with pytest.raises(CheckFailed, match="disagree"):
        checks.check_layer_norm_vjp(impl.vjp_means, impl.jacobian_eps_ignored, eps=1.0)


@pytest.mark.parametrize("backward", impl.CORRECT_BACKWARDS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(2, 3, 5), (7,), (4, 16), (2, 2, 3, 7)])
def test_correct_backwards_pass(backward, shape):
    checks.check_layer_norm_backward(backward, shape=shape)


@pytest.mark.parametrize("name", list(impl.WRONG_BACKWARDS))
def test_wrong_backwards_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_BACKWARDS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_layer_norm_backward(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


def test_stub_raises_not_implemented():
    def stub(x, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_layer_norm_jacobian(stub)
