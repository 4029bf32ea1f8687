"""The 04_rmsnorm checks accept correct variants and diagnose classic mistakes."""
import numpy as np
import pytest

from grader.checks import rmsnorm as checks
from grader.compare import CheckFailed
from tests.implementations import rmsnorm as impl


@pytest.mark.parametrize("forward", impl.CORRECT_FORWARDS, ids=lambda f: f.__name__)
def test_correct_forwards_pass(forward):
    checks.check_rms_norm(forward)
    checks.check_rms_norm(forward, shape=(4, 5, 16), seed=1)
    checks.check_rms_norm(forward, shape=(3, 9), eps=1.0, seed=2)
    checks.check_rms_norm(forward, shape=(7, 12), tiny_rows=True, seed=3)
    checks.check_rms_norm(forward, shape=(2,), seed=4, offset=3.0)
    checks.check_rms_norm(forward, shape=(5, 33), seed=5, gamma=np.linspace(-2.0, 3.0, 33))


@pytest.mark.parametrize("forward", impl.CORRECT_FORWARDS, ids=lambda f: f.__name__)
def test_correct_forwards_pass_in_float32(forward):
    checks.check_rms_norm(forward, dtype=np.float32)
    checks.check_rms_norm(forward, shape=(4, 4096), seed=6, dtype=np.float32)
    checks.check_rms_norm(forward, shape=(6, 16), tiny_rows=True, seed=7, dtype=np.float32)


@pytest.mark.parametrize("name", list(impl.WRONG_FORWARDS))
def test_wrong_forwards_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_FORWARDS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_rms_norm(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


@pytest.mark.parametrize("backward", impl.CORRECT_BACKWARDS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(2, 3, 5), (7,), (4, 16), (2, 2, 3, 7)])
def test_correct_backwards_pass(backward, shape):
    checks.check_rms_norm_backward(backward, shape=shape)


@pytest.mark.parametrize("backward", impl.CORRECT_BACKWARDS, ids=lambda f: f.__name__)
def test_correct_backwards_pass_harder_cases(backward):
    checks.check_rms_norm_backward(backward, impl.rms_per_token)
    checks.check_rms_norm_backward(backward, shape=(3, 9), eps=1.0, seed=2)
    checks.check_rms_norm_backward(backward, shape=(6, 8), tiny_rows=True, seed=3)
    checks.check_rms_norm_backward(backward, shape=(5, 33), seed=5, gamma=np.linspace(-2.0, 3.0, 33))
    checks.check_rms_norm_backward(backward, shape=(2, 3, 64), seed=6, dtype=np.float32)


@pytest.mark.parametrize("name", list(impl.WRONG_BACKWARDS))
def test_wrong_backwards_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_BACKWARDS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_rms_norm_backward(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


def test_backward_disagreeing_with_a_wrong_forward_is_reported():
    with pytest.raises(CheckFailed, match="not your own forward"):
        checks.check_rms_norm_backward(impl.backward_vectorised, impl.rms_eps_outside, eps=0.1)


def test_stubs_raise_not_implemented():
    def stub(x, gamma, eps=1e-6):
        raise NotImplementedError()

    def stub_backward(dy, x, gamma, eps=1e-6):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_rms_norm(stub)
    with pytest.raises(NotImplementedError):
        checks.check_rms_norm_backward(stub_backward)


@pytest.mark.parametrize("name", list(impl.MISTAKE_COMBINATIONS_FORWARD))
def test_forward_mistakes_are_all_named_and_only_those(name):
    function, named, kwargs = impl.MISTAKE_COMBINATIONS_FORWARD[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_rms_norm(function, **kwargs)
    text = str(failure.value).split("Likely cause:")[-1]
    for phrase in named:
        assert phrase in text, (phrase, text)
    for phrase in impl.ALL_NAMED:
        if phrase not in named and not any(phrase in n for n in named):
            assert phrase not in text, (f"names an absent mistake: {phrase}", text)
