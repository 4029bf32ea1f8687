"""The 04_rmsnorm checks accept correct variants and diagnose classic mistakes."""
import numpy as np
import pytest

from grader.checks import rmsnorm as checks
from grader.compare import CheckFailed
from tests.check_helpers import assert_diagnosis_named, assert_mistakes_named_exactly, table_cases
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


@table_cases(impl.WRONG_FORWARDS)
def test_wrong_forwards_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_rms_norm, function, expected, kwargs)


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


@table_cases(impl.WRONG_BACKWARDS)
def test_wrong_backwards_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_rms_norm_backward, function, expected, kwargs)


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


@table_cases(impl.MISTAKE_COMBINATIONS_FORWARD)
def test_forward_mistakes_are_all_named_and_only_those(function, expected, kwargs):
    assert_mistakes_named_exactly(checks.check_rms_norm, function, expected, kwargs, impl.ALL_NAMED)


# ---------------------------------------------------------------- rms_norm_bf16
BF16_CASES = [{}, dict(shape=(4, 4096), seed=41), dict(shape=(3, 2, 128), eps=1e-5, seed=42),
              dict(shape=(8, 256), eps=1e-4, seed=43), dict(shape=(16, 64), seed=44)]


@pytest.mark.parametrize("forward", impl.CORRECT_BF16, ids=lambda f: f.__name__)
def test_correct_bf16_forwards_pass(forward):
    """Both orders of the gain, and float64 statistics, sit on the rounding floor for every graded case."""
    for kwargs in BF16_CASES:
        checks.check_rms_norm_bf16(forward, **kwargs)


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_bf16_verdicts_do_not_depend_on_the_seed(seed):
    """Right answers pass and bfloat16 statistics fail on any input: the verdict is not luck."""
    for forward in impl.CORRECT_BF16:
        checks.check_rms_norm_bf16(forward, shape=(4, 256), seed=seed)
    for wrong in (impl.bf16_no_upcast, impl.bf16_r_cast_early):
        with pytest.raises(CheckFailed) as failure:
            checks.check_rms_norm_bf16(wrong, shape=(4, 256), seed=seed)
        assert failure.value.misconceptions == ("rms.no_upcast",)


@table_cases(impl.WRONG_BF16)
def test_wrong_bf16_forwards_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_rms_norm_bf16, function, expected, kwargs)


def test_bf16_grid_rounds_to_nearest_even_like_torch():
    """The check's own rounding (numpy) agrees with torch's float32 -> bfloat16 conversion, ties included."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.integers(-8, 8, 20000),
                             [1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -(1.0 + 2.0 ** -8), 0.0,
                              256.0 + 1.0]]).astype(np.float32)
    ours = checks.to_bf16(values)
    theirs = torch.from_numpy(values).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours, theirs)
    lower, upper, nearest, near_tie = checks._bf16_grid(np.array([1.0 + 2.0 ** -8, 1.0 + 2.0 ** -9]))
    assert list(near_tie) == [True, False] and list(nearest) == [1.0, 1.0]


def test_bf16_stub_raises_not_implemented():
    def stub(x, gamma, eps=1e-6):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_rms_norm_bf16(stub)


@pytest.mark.slow
def test_bf16_diagnosis_is_the_same_in_a_grading_sandbox():
    """Through a real sandbox (float32 arrays in and out), the same verdicts and ids as in-process."""
    import inspect
    from pathlib import Path

    client = pytest.importorskip("grader.grading.sandbox.client")
    with client.Sandbox(mode="auto") as box:
        reply = box.run_cell(Path(inspect.getsourcefile(impl)).read_text())
        assert not any(o.get("output_type") == "error" for o in reply["outputs"]), reply
        for function in [impl.bf16_llama, impl.bf16_no_upcast, impl.bf16_returns_float32, impl.bf16_eps_outside]:
            outcomes = []
            for candidate in (function, box.lookup(function.__name__)):
                try:
                    checks.check_rms_norm_bf16(candidate)
                    outcomes.append(("passed", ()))
                except CheckFailed as failure:
                    outcomes.append(("failed", failure.misconceptions))
            assert outcomes[0] == outcomes[1], (function.__name__, outcomes)
