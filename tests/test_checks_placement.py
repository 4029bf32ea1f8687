"""The 05_placement checks accept correct variants and diagnose classic mistakes."""
import numpy as np
import pytest

from grader.checks import placement as checks
from grader.compare import CheckFailed
from tests.implementations import placement as impl

HIDDEN_SHAPES = ((1, 3), (2, 2, 2, 4), (16, 32), (3, 1, 7))


@pytest.mark.parametrize("sublayer", impl.CORRECT, ids=lambda f: f.__name__)
@pytest.mark.parametrize("pair", checks.PAIRS)
def test_correct_implementations_pass(sublayer, pair):
    checks.check_residual_sublayer(sublayer, pair=pair)
    checks.check_residual_sublayer(sublayer, shapes=HIDDEN_SHAPES, pair=pair, seed=7)
    checks.check_residual_sublayer_rejects(sublayer, invalid_modes=checks.ALL_INVALID)


@pytest.mark.parametrize("name", list(impl.WRONG))
def test_wrong_implementations_are_diagnosed(name):
    function, diagnosis, which = impl.WRONG[name]
    check = checks.check_residual_sublayer if which == "modes" else checks.check_residual_sublayer_rejects
    with pytest.raises(CheckFailed) as failure:
        check(function)
    assert diagnosis in str(failure.value), str(failure.value)


@pytest.mark.parametrize("name", [n for n, (_, _, which) in impl.WRONG.items() if which == "modes"])
@pytest.mark.parametrize("pair", checks.PAIRS)
def test_wrong_orders_fail_with_every_pair(name, pair):
    """No pair of test functions lets a wrong composition pass by accident."""
    with pytest.raises(CheckFailed):
        checks.check_residual_sublayer(impl.WRONG[name][0], shapes=HIDDEN_SHAPES, pair=pair, seed=3)


@pytest.mark.parametrize("pair", checks.PAIRS)
def test_the_three_placements_differ(pair):
    """The test functions do not commute: the three formulas give three different arrays."""
    x = np.random.default_rng(0).standard_normal((3, 6))
    F, norm = checks._functions(pair, 6, 0)
    pre, post, output = x + F(norm(x)), norm(x + F(x)), x + norm(F(x))
    for a, b in [(pre, post), (pre, output), (post, output), (pre, F(norm(x))), (output, norm(F(x)))]:
        assert np.max(np.abs(a - b)) > 1e-3


@pytest.mark.parametrize("mode", checks.MODES)
def test_describe_composition_names_the_formula(mode):
    assert checks.describe_composition(impl.sublayer_if_chain, mode) == checks.EXPECTED[mode]
    assert checks.describe_composition(impl.pre_and_post_swapped, "pre") == "norm(x + F(x))"


def test_describe_composition_shows_repeated_calls():
    text = checks.describe_composition(impl.eager_all_three, "pre")
    assert text.startswith("x + F(norm(x))") and "then" in text


def test_stub_raises_not_implemented():
    def stub(x, F, norm, mode):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_residual_sublayer(stub)
    with pytest.raises(NotImplementedError):
        checks.check_residual_sublayer_rejects(stub)


def test_checks_do_not_import_torch():
    """The graded cells stay light: the placement checks never need torch."""
    import subprocess
    import sys

    code = "import sys, grader.checks.placement; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
