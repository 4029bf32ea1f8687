"""The 05_placement checks accept correct variants and diagnose classic mistakes."""
import numpy as np
import pytest

from grader.checks import placement as checks
from grader.compare import CheckFailed
from tests.implementations import placement as impl

HIDDEN_SHAPES = ((1, 3), (2, 2, 2, 4), (16, 32), (3, 1, 7))
# The hidden test cell's cases for qk_norm_logits (source/05_placement): the checks module keeps
# only the visible ones, so the grader a learner installs does not carry the hidden cases.
QK_HIDDEN = (((), 1, 1, 2, 1e-6), ((), 7, 7, 32, 1e-6), ((3,), 2, 5, 4, 1e-6), ((2, 3), 3, 3, 16, 1e-6),
             ((), 6, 6, 64, 1e-6))


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


# ---------------------------------------------------------------- qk_norm_logits
@pytest.mark.parametrize("function", impl.QK_CORRECT, ids=lambda f: f.__name__)
def test_qk_correct_implementations_pass(function):
    checks.check_qk_norm_logits(function)
    checks.check_qk_norm_logits(function, cases=QK_HIDDEN, seed=11)


@pytest.mark.parametrize("name", list(impl.QK_WRONG))
def test_qk_wrong_implementations_are_diagnosed(name):
    function, diagnosis = impl.QK_WRONG[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_qk_norm_logits(function)
    assert diagnosis in str(failure.value), str(failure.value)


def test_qk_eps_ignored_is_named():
    def no_eps(q, k, g_q, g_k, eps=1e-6):
        return impl.qk_matmul(q, k, g_q, g_k, 0.0)

    with pytest.raises(CheckFailed, match="eps = 1e-06 was not used"):
        checks.check_qk_norm_logits(no_eps)


def test_qk_oracle_meets_the_bound():
    """The oracle's logits never exceed max_i |g_q,i g_k,i| sqrt(d_k), and a query equal to a key
    along one axis reaches it: the bound the notebook asks for is tight."""
    q, k, g_q, g_k = checks._qk_inputs((), 6, 6, 8, 0)
    logits = checks._qk_oracle(q, k, g_q, g_k, 0.0)
    bound = np.max(np.abs(g_q * g_k)) * np.sqrt(8)
    assert np.max(np.abs(logits)) <= bound
    i = int(np.argmax(np.abs(g_q * g_k)))
    e = np.zeros((1, 8))
    e[0, i] = 1.0
    assert checks._qk_oracle(e, e, g_q, g_k, 0.0)[0, 0] == pytest.approx(bound)


def test_qk_stub_raises_not_implemented():
    def stub(q, k, g_q, g_k, eps=1e-6):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_qk_norm_logits(stub)


@pytest.mark.slow  # a subprocess importing torch
def test_qk_checks_import_torch_only_when_run():
    import subprocess
    import sys

    code = ("import sys, grader.checks.placement as c; from tests.implementations.placement import qk_matmul; "
            "print('torch' in sys.modules); c.check_qk_norm_logits(qk_matmul); print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split()[0] == "False" and result.stdout.split()[-1] == "True"


def test_hidden_qk_tests_reject_a_hard_coded_default_eps():
    """issue 42: every hidden case used eps = 1e-6, the default, so eps hard-coded to 1e-6 passed."""
    import inspect

    from tests.diagnosis_harness import diagnose, solution

    right = solution("05_placement", "qk_norm_logits")

    def qk_norm_logits(q, k, g_q, g_k, eps=1e-6):
        return right(q, k, g_q, g_k, 1e-6)

    assert str(inspect.signature(qk_norm_logits)) == str(inspect.signature(right))
    outcome = diagnose("05_placement", "qk_norm_logits", qk_norm_logits)
    assert not outcome.passed and outcome.ids == ("common.eps_not_used",), outcome
