"""The 06_welford checks accept correct variants and diagnose classic mistakes."""
import numpy as np
import pytest

from grader.checks import welford as checks
from grader.compare import CheckFailed
from tests.implementations import define_in_sandbox
from tests.implementations import welford as impl

# The hidden tests' inputs: single and two elements, integers, constants, offsets of both signs.
SPECIAL_INPUTS = [
    np.array([3.25]),
    np.array([1e8 + 0.5]),
    np.array([1e8, 1e8 + 1.0]),
    np.array([2281.5, 2281.25]),
    np.arange(1, 11),
    np.full(50, 0.1),
    np.array([7], dtype=np.int32),
    10**9 + np.random.default_rng(3).integers(0, 100, size=300),
]


@pytest.mark.parametrize("mean_var", impl.CORRECT_MEAN_VARS, ids=lambda f: f.__name__)
def test_correct_mean_vars_pass(mean_var):
    checks.check_welford_mean_var(mean_var)
    checks.check_welford_mean_var(mean_var, n=300, offset=-1e10, seed=1)
    checks.check_welford_mean_var(mean_var, n=200, offset=1e6, scale=1e-3, seed=2)
    for x in SPECIAL_INPUTS:
        checks.check_welford_mean_var(mean_var, x=x)


@pytest.mark.parametrize("mean_var", impl.CORRECT_MEAN_VARS, ids=lambda f: f.__name__)
def test_correct_mean_vars_make_one_pass(mean_var):
    checks.check_welford_one_pass(mean_var)
    checks.check_welford_one_pass(mean_var, n=1, seed=1)
    checks.check_welford_one_pass(mean_var, n=300, offset=10**9, dtype=np.int64, seed=2)


@pytest.mark.parametrize("name", list(impl.WRONG_MEAN_VARS))
def test_wrong_mean_vars_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_MEAN_VARS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_welford_mean_var(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


# the misconception id each one-pass diagnosis names (grader/catalogue/welford.py)
ONE_PASS_IDS = {"two loops": "welford.two_passes", "sum(x) then a generator": "welford.two_passes",
                "np.mean and np.var": "welford.whole_array_ops", "x.mean() and x.var()": "welford.whole_array_ops",
                "np.asarray first": "welford.whole_array_ops", "keeps a list": "welford.keeps_elements",
                "x - mean": "welford.whole_array_ops", "catches the error": "welford.whole_array_ops"}


@pytest.mark.parametrize("name", list(impl.WRONG_ONE_PASS))
def test_wrong_one_pass_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_ONE_PASS[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_welford_one_pass(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)
    assert failure.value.misconceptions == (ONE_PASS_IDS[name],)


def _rounded_mean(x):
    mean, var = impl.welford_classic(x)
    return float(mean // 1), var


def _std_ddof1(x):
    mean, var = impl.welford_classic(x)
    return mean, (var * len(x) / (len(x) - 1)) ** 0.5


def _sum_and_m2(x):
    mean, var = impl.welford_classic(x)
    return mean * len(x), var * len(x)


def _average_everything(a, b):
    n, _, _ = impl.combine_chan(a, b)
    if a[0] == 0 or b[0] == 0:
        return impl.combine_chan(a, b)
    return n, (a[1] + b[1]) / 2, a[2] + b[2]


@pytest.mark.parametrize("check, function, diagnosis, ids", [
    (checks.check_welford_mean_var, impl.unbiased, "unbiased variance", ("welford.unbiased_variance",)),
    (checks.check_welford_mean_var, impl.naive_sums, "cancels catastrophically", ("welford.naive_variance",)),
    (checks.check_welford_mean_var, impl.mean_updated_after_use, "old mean twice", ("welford.old_mean_twice",)),
    (checks.check_welford_mean_var, impl.divides_by_total_length, "depends on the order",
     ("welford.total_count_in_update",)),
    (checks.check_welford_mean_var, _rounded_mean, "rounded to a whole number", ("welford.integer_division",)),
    (checks.check_welford_mean_var, _std_ddof1, "2 mistakes together",
     ("welford.unbiased_variance", "welford.std_returned")),
    (checks.check_welford_mean_var, _sum_and_m2, "2 mistakes together", ("welford.sum_not_mean",
                                                                         "welford.m2_returned")),
    (checks.check_welford_combine, _average_everything, "2 mistakes together",
     ("welford.unweighted_mean", "welford.no_between_term")),
    (checks.check_welford_combine, impl.combine_no_empty_guard, "empty partial", ("welford.empty_partial",)),
], ids=lambda value: getattr(value, "__name__", None) if callable(value) else None)
def test_diagnoses_name_their_misconceptions(check, function, diagnosis, ids):
    with pytest.raises(CheckFailed) as failure:
        check(function)
    assert diagnosis in str(failure.value), str(failure.value)
    assert set(failure.value.misconceptions) == set(ids), failure.value.misconceptions


@pytest.mark.parametrize("kwargs", [
    {},                                                        # the visible check: n = 20000 near 1e8
    {"n": 5000, "offset": -1e8, "seed": 4},
    {"n": 2, "offset": 0.0, "seed": 2},                        # the hidden ones
    {"n": 300, "offset": 10**9, "dtype": np.int64, "seed": 3},
    {"n": 60000, "offset": 1e10, "seed": 5, "memory": False},
])
def test_one_pass_check_catches_the_unbiased_variance_for_every_n(kwargs):
    """n/(n-1) is within the offset's rounding tolerance at large n: the check must still see ddof=1."""
    with pytest.raises(CheckFailed) as failure:
        checks.check_welford_one_pass(impl.unbiased, **kwargs)
    assert "unbiased variance" in str(failure.value), str(failure.value)


def test_one_pass_check_explains_the_unbiased_variance_of_one_element():
    with pytest.raises(CheckFailed, match="n - 1"):
        checks.check_welford_one_pass(impl.unbiased, n=1, seed=1)


@pytest.mark.parametrize("name", ["two loops", "sum(x) then a generator", "np.mean and np.var", "keeps a list"])
def test_two_pass_answers_are_accurate_so_only_the_stream_catches_them(name):
    checks.check_welford_mean_var(impl.WRONG_ONE_PASS[name][0])


def test_naive_formula_passes_without_an_offset():
    """E[x²] − μ² is fine when |μ| is comparable to σ: only the offset exposes it."""
    checks.check_welford_mean_var(impl.naive_sums, offset=0.0)


def test_naive_formula_gives_a_wrong_float32_pair():
    x = np.array([2281.5, 2281.25], dtype=np.float32)
    naive = np.mean(x * x) - np.mean(x) ** 2
    assert checks.exact_mean_var(x) == (2281.375, 0.015625)
    assert naive != np.float32(0.015625)


def test_exact_oracle():
    assert checks.exact_mean_var(np.array([2.0, 4.0, 6.0, 8.0])) == (5.0, 5.0)
    x = 1e8 + np.random.default_rng(0).standard_normal(500)
    mean, var = checks.exact_mean_var(x)
    assert abs(var - float(np.var(x - 1e8))) < 1e-12  # x - 1e8 is exact, the variance is shift invariant
    assert checks.exact_moments(np.array([], dtype=np.float64))[0] == 0


def test_stream_behaves_like_a_one_dimensional_array_read_once():
    values = np.array([1.0, 2.0, 4.0])
    stream = checks.CountingStream(values)
    assert len(stream) == 3 and stream.shape == (3,) and stream.size == 3 and stream.ndim == 1
    assert stream.dtype == np.float64
    assert stream[-1] == 4.0 and list(stream[:2]) == [1.0, 2.0]
    with pytest.raises(CheckFailed, match="second time"):
        list(stream)
    with pytest.raises(CheckFailed, match="whole array"):
        checks.CountingStream(values) * 2.0
    with pytest.raises(CheckFailed, match="whole array"):
        np.float64(1.0) - checks.CountingStream(values)
    with pytest.raises(CheckFailed, match="np.asarray"):
        np.asarray(checks.CountingStream(values))
    with pytest.raises(CheckFailed, match="x.sum"):
        np.sum(checks.CountingStream(values))


@pytest.mark.parametrize("combine", impl.CORRECT_COMBINES, ids=lambda f: f.__name__)
def test_correct_combines_pass(combine):
    checks.check_welford_combine(combine)
    checks.check_welford_combine(combine, impl.welford_classic)
    checks.check_welford_combine(combine, sizes=(1, 1), offset=0.0, seed=1)
    checks.check_welford_combine(combine, sizes=(0, 0, 300, 1, 0, 2, 77), offset=-1e8, seed=2)
    checks.check_welford_combine(combine, impl.welford_float_count, sizes=(64,) * 16, offset=1e4, seed=3)


@pytest.mark.parametrize("name", list(impl.WRONG_COMBINES))
def test_wrong_combines_are_diagnosed(name):
    function, diagnosis, kwargs = impl.WRONG_COMBINES[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_welford_combine(function, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)


@pytest.mark.parametrize("combine", [impl.combine_floats, impl.combine_branches_on_equal_means],
                         ids=lambda f: f.__name__)
def test_a_combine_written_for_numbers_only_fails_the_visible_and_the_hidden_checks(combine):
    """06 says: plain arithmetic, because section 6 merges arrays of means. Both checks pass it arrays too."""
    visible = ((combine, impl.welford_classic), {})
    hidden = [((combine,), {"sizes": (1, 1), "offset": 0.0, "seed": 1}),
              ((combine,), {"sizes": (0, 0, 300, 1, 0, 2, 77), "offset": -1e8, "seed": 2}),
              ((combine,), {"sizes": (1000, 1), "offset": 1e8, "seed": 4})]
    for args, kwargs in [visible, *hidden]:
        with pytest.raises(CheckFailed) as failure:
            checks.check_welford_combine(*args, **kwargs)
        assert failure.value.misconceptions == ("welford.scalar_only",), str(failure.value)
        assert "arrays of 3 means" in str(failure.value) and "in your code, line" in str(failure.value)


def test_combine_of_arrays_returning_one_number_is_named():
    def collapses(a, b):
        n, mean, m2 = impl.combine_chan(a, b)
        return n, np.float64(np.mean(mean)), np.float64(np.mean(m2))  # one number where an array came in

    def collapses_fine_on_numbers(a, b):
        return collapses(a, b) if np.ndim(a[1]) or np.ndim(b[1]) else impl.combine_chan(a, b)

    with pytest.raises(CheckFailed, match=r"should be an array of shape \(3,\)") as failure:
        checks.check_welford_combine(collapses_fine_on_numbers)
    assert failure.value.misconceptions == ("welford.scalar_only",)


def test_array_merges_compare_every_data_set():
    def wrong_in_one_row(a, b):
        n, mean, m2 = impl.combine_chan(a, b)
        if np.ndim(mean) and a[0] and b[0]:
            mean = mean.copy()
            mean[2] += 1e-3 * (abs(mean[2]) + 1.0)
        return n, mean, m2

    with pytest.raises(CheckFailed, match="data set 2"):
        checks.check_welford_combine(wrong_in_one_row)


def test_combine_disagreeing_with_one_pass_is_reported():
    with pytest.raises(CheckFailed, match="one of your two functions"):
        checks.check_welford_combine(impl.combine_chan, impl.unbiased)


def test_stubs_raise_not_implemented():
    def stub(*args):
        raise NotImplementedError()

    for check in (checks.check_welford_mean_var, checks.check_welford_one_pass, checks.check_welford_combine):
        with pytest.raises(NotImplementedError):
            check(stub)


@pytest.mark.slow  # a fresh interpreter in a subprocess
def test_checks_do_not_import_torch():
    import subprocess
    import sys

    code = "import sys, grader.checks.welford; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def sandbox():
    client = pytest.importorskip("grader.grading.sandbox.client")
    with client.Sandbox(mode="auto") as box:
        yield box


@pytest.mark.slow  # a grading sandbox
@pytest.mark.parametrize("mean_var", [impl.welford_classic, impl.welford_indexed, impl.welford_first_element],
                         ids=lambda f: f.__name__)
def test_one_pass_check_passes_through_a_grading_sandbox(sandbox, mean_var):
    """Under `grader grade` the stream stays with the grader; the sandbox reads it through a proxy."""
    proxy = define_in_sandbox(sandbox, mean_var, "welford_mean_var")
    checks.check_welford_one_pass(proxy)
    checks.check_welford_one_pass(proxy, n=1, seed=1)
    checks.check_welford_one_pass(proxy, n=300, offset=10**9, dtype=np.int64, seed=2)


@pytest.mark.slow  # a grading sandbox
@pytest.mark.parametrize("name", list(impl.WRONG_ONE_PASS))
def test_one_pass_diagnoses_survive_a_grading_sandbox(sandbox, name, capsys):
    """What the grader counts itself (the stream's reads) fails there as here; memory, measured in the learner's
    own process, is evidence under grading (the sandbox notes it, the test output says so), never a verdict."""
    function, diagnosis, kwargs = impl.WRONG_ONE_PASS[name]
    helpers = [impl.two_pass_loops, impl.welford_classic]  # called by two of the wrong variants
    proxy = define_in_sandbox(sandbox, function, "welford_mean_var", helpers)
    sandbox.evidence.clear()
    if ONE_PASS_IDS[name] == "welford.keeps_elements":
        checks.check_welford_one_pass(proxy, **kwargs)
        assert [e["check"] for e in sandbox.evidence] == ["memory"], sandbox.evidence
        assert diagnosis in capsys.readouterr().out
        return
    with pytest.raises(CheckFailed) as failure:
        checks.check_welford_one_pass(proxy, **kwargs)
    assert diagnosis in str(failure.value), str(failure.value)
    assert failure.value.misconceptions == (ONE_PASS_IDS[name],)


# ----------------------------------------------------------------------------- derive it: the M2 update
def _m2_product(m2, mean_old, mean_new, x):
    return m2 + (x - mean_old) * (x - mean_new)


def _m2_product_reordered(m2, mean_old, mean_new, x):
    return m2 + (mean_new - x) * (mean_old - x)


def _m2_numpy_scalar(m2, mean_old, mean_new, x):
    return np.float64(m2) + np.float64(x - mean_new) * (x - mean_old)


WRONG_M2_UPDATES = {
    "expanded product (cancels)": (lambda m2, mo, mn, x: m2 + x * x - x * mn - x * mo + mo * mn, "cancellation"),
    "old mean twice": (lambda m2, mo, mn, x: m2 + (x - mo) ** 2, "the old mean in both places"),
    "new mean twice": (lambda m2, mo, mn, x: m2 + (x - mn) ** 2, "the new mean in both places"),
    "increment only": (lambda m2, mo, mn, x: (x - mo) * (x - mn), "returned only the increment"),
    "wrong sign": (lambda m2, mo, mn, x: m2 - (x - mo) * (x - mn), "wrong sign"),
    "difference of means": (lambda m2, mo, mn, x: m2 + (mn - mo) * (x - mo), "1/(k−1) of the true one"),
}


@pytest.mark.parametrize("update", [_m2_product, _m2_product_reordered, _m2_numpy_scalar], ids=lambda f: f.__name__)
def test_right_m2_updates_pass(update, capsys):
    checks.check_m2_update(update)
    checks.check_m2_update(update, n=50, offset=-1e6, seed=3)
    assert "✔" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(WRONG_M2_UPDATES))
def test_wrong_m2_updates_are_diagnosed(name):
    update, diagnosis = WRONG_M2_UPDATES[name]
    with pytest.raises(CheckFailed) as failure:
        checks.check_m2_update(update)
    assert diagnosis in str(failure.value), str(failure.value)


@pytest.mark.parametrize("placeholder", [None, ...])
def test_m2_placeholder_asks_for_an_expression_without_raising(placeholder, capsys):
    checks.check_m2_update(lambda m2, mean_old, mean_new, x: placeholder)
    assert "write your expression first" in capsys.readouterr().out


def test_m2_check_is_fast():
    import time
    start = time.process_time()  # this process's CPU: a busy machine stretches wall time, not this
    checks.check_m2_update(_m2_product)
    assert time.process_time() - start < 1.5


def test_m2_check_holds_no_closed_form_answer():
    """The check compares with exact sums of squared deviations, never with the update it asks for."""
    import inspect
    source = inspect.getsource(checks.check_m2_update) + inspect.getsource(checks._m2_step_cause)
    for answer in ["(x - mean_old) * (x - mean_new)", "(x - mo) * (x - mn)", "delta * (x - mean"]:
        assert answer not in source


def test_welford_demo_has_its_own_oracle():
    """normlab's demo imports no check module; its exact variance is the checks' exact variance."""
    import ast
    import inspect

    import normlab.welford_demo as demo

    tree = ast.parse(inspect.getsource(demo))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and m.startswith("grader")], imported
    rng = np.random.default_rng(5)
    for x in SPECIAL_INPUTS[:6] + [1e8 + rng.standard_normal(500), (3000 + rng.standard_normal(64)).astype(np.float32)]:
        assert demo.exact_variance(x) == checks.exact_mean_var(x)[1]
