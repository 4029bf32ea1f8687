"""The 01_bn_vs_ln checks accept correct variants and diagnose classic mistakes."""
import numpy as np
import pytest

from grader.checks import bn_vs_ln as checks
from grader.compare import CheckFailed
from tests.check_helpers import assert_diagnosis_named, assert_ids_named, assert_mistakes_named_exactly, table_cases
from tests.implementations import bn_vs_ln as impl


@pytest.mark.parametrize("layernorm", impl.CORRECT_LAYERNORMS, ids=lambda f: f.__name__)
def test_correct_layernorms_pass(layernorm):
    checks.check_layernorm(layernorm)
    checks.check_layernorm(layernorm, shape=(7,), seed=1)
    checks.check_layernorm(layernorm, shape=(2, 3, 4, 5), seed=2, eps=1.0)
    checks.check_layernorm(layernorm, shape=(6, 32), seed=3, scale=1e-2, offset=1e4)
    checks.check_layernorm(layernorm, shape=(3, 1), seed=4)


@table_cases(impl.WRONG_LAYERNORMS)
def test_wrong_layernorms_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_layernorm, function, expected, kwargs)


@pytest.mark.parametrize("batch_norm", impl.CORRECT_BATCH_NORMS, ids=lambda f: f.__name__)
def test_correct_batch_norms_pass(batch_norm):
    checks.check_batch_norm(batch_norm)
    checks.check_batch_norm(batch_norm, shape=(2, 3, 2, 4), seed=1)
    checks.check_batch_norm(batch_norm, shape=(64, 3), seed=2, eps=1.0)
    checks.check_batch_norm(batch_norm, shape=(4, 5, 6), seed=3, scale=1e-2, offset=1e4)
    checks.check_batch_norm(batch_norm, shape=(1, 5, 3), seed=4)


@table_cases(impl.WRONG_BATCH_NORMS)
def test_wrong_batch_norms_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_batch_norm, function, expected, kwargs)


@pytest.mark.parametrize("probe", impl.CORRECT_PROBES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(2, 6, 4), (1, 7, 3), (3, 4, 1), (2, 2, 5), (4, 10, 8)])
def test_correct_probes_pass(probe, shape):
    checks.check_leaks_future(probe, shape=shape, seed=sum(shape))


@table_cases(impl.WRONG_PROBES)
def test_wrong_probes_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_leaks_future, function, expected, kwargs)


SEEDS = range(48)


@pytest.mark.parametrize("name", ["torch.testing.assert_close", "np.allclose", "np.allclose after a huge change",
                                  "math.isclose"])
def test_a_tolerant_probe_fails_the_visible_check_for_every_seed(name):
    """The faint leak sits far below any tolerance and far above rounding: the verdict does not depend on the data."""
    function, diagnosis, _ = impl.WRONG_PROBES[name]
    for seed in SEEDS:
        with pytest.raises(CheckFailed) as failure:
            checks.check_leaks_future(function, seed=seed)
        assert diagnosis in str(failure.value), (seed, str(failure.value))


@pytest.mark.parametrize("probe", impl.CORRECT_PROBES, ids=lambda f: f.__name__)
def test_a_correct_probe_passes_the_visible_check_for_every_seed(probe):
    for seed in SEEDS:
        checks.check_leaks_future(probe, seed=seed)


def test_probe_targets_behave_as_labelled():
    """The functions the probe is pointed at really are causal or leaky, as each case says."""
    for shape in [(2, 6, 4), (1, 7, 3)]:
        for case in checks._probe_cases(shape, seed=0):
            x, t = case.x, case.t
            changed = x.copy()
            changed[:, t + 1:] += 1.0 + np.arange(changed[:, t + 1:].size).reshape(changed[:, t + 1:].shape) / 7
            moved = not np.array_equal(case.norm(x)[:, : t + 1], case.norm(changed)[:, : t + 1])
            assert moved == case.leaks, case.description


@pytest.mark.parametrize("check, args", [
    (checks.check_layernorm, ()), (checks.check_batch_norm, ()), (checks.check_leaks_future, ()),
])
def test_stubs_raise_not_implemented(check, args):
    def stub(*_args, **_kwargs):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        check(stub, *args)


@table_cases(impl.MISTAKE_COMBINATIONS_LAYERNORM)
def test_layernorm_mistakes_are_all_named_and_only_those(function, expected, kwargs):
    assert_mistakes_named_exactly(checks.check_layernorm, function, expected, kwargs, impl.ALL_NAMED)


@table_cases(impl.MISTAKE_COMBINATIONS_BATCH_NORM)
def test_batch_norm_mistakes_are_all_named_and_only_those(function, expected, kwargs):
    assert_mistakes_named_exactly(checks.check_batch_norm, function, expected, kwargs, impl.ALL_NAMED)


def test_two_explanations_that_cannot_be_told_apart_are_both_given():
    """At offset 1e4 the rounding of E[x²] − μ² is larger than eps = 1e-5's effect: outside or ignored, both fit."""
    with pytest.raises(CheckFailed) as failure:
        checks.check_layernorm(impl.ln_naive_eps_outside, **impl.LARGE_OFFSET)
    text = str(failure.value)
    assert "Either" in text and impl.CANCELS in text and impl.OUTSIDE in text and impl.UNBIASED not in text, text


@pytest.mark.parametrize("check, function, kwargs, ids", [
    (checks.check_layernorm, impl.ln_unbiased_eps_outside, {}, {"ln.unbiased_variance", "ln.eps_outside_sqrt"}),
    (checks.check_layernorm, impl.ln_affine_ignored, {}, {"ln.gamma_ignored", "ln.beta_ignored"}),
    (checks.check_layernorm, impl.ln_over_leading_axes, {}, {"ln.over_batch"}),
    (checks.check_layernorm, impl.ln_no_keepdims, {}, {"ln.no_keepdims"}),
    (checks.check_layernorm, impl.ln_torch_no_keepdim, {}, {"ln.no_keepdims"}),
    (checks.check_layernorm, impl.ln_eps_fixed_small, {}, {"ln.eps_hardcoded"}),
    (checks.check_layernorm, impl.ln_zeros, {}, set()),  # no mistake matched: zeros are not BatchNorm's axes
    (checks.check_batch_norm, impl.bn_over_last_axis, {}, {"bn.over_features"}),
    (checks.check_batch_norm, impl.bn_unbiased_eps_outside, {}, {"bn.unbiased_variance", "bn.eps_outside_sqrt"}),
    (checks.check_leaks_future, impl.probe_allclose, {}, {"causal.tolerant_comparison"}),
    (checks.check_leaks_future, impl.probe_per_position, {}, {"causal.not_a_bool"}),
], ids=lambda value: getattr(value, "__name__", None))
def test_diagnoses_carry_the_ids_of_the_mistakes_they_name(check, function, kwargs, ids):
    assert_ids_named(check, function, kwargs, ids)


# ---------------------------------------------------------------- running statistics
@pytest.mark.parametrize("batch_norm_train", impl.CORRECT_TRAINS, ids=lambda f: f.__name__)
def test_correct_training_steps_pass(batch_norm_train):
    checks.check_batch_norm_train(batch_norm_train)
    checks.check_batch_norm_train(batch_norm_train, shape=(2, 3, 2, 4), seed=1, momentum=0.01)
    checks.check_batch_norm_train(batch_norm_train, shape=(2, 5), seed=2, momentum=0.7, eps=1.0)
    checks.check_batch_norm_train(batch_norm_train, shape=(4, 5, 6), seed=3, scale=1e-2, offset=1e4)


@table_cases(impl.WRONG_TRAINS)
def test_wrong_training_steps_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_batch_norm_train, function, expected, kwargs)


@pytest.mark.parametrize("batch_norm_eval", impl.CORRECT_EVALS, ids=lambda f: f.__name__)
def test_correct_evaluations_pass(batch_norm_eval):
    checks.check_batch_norm_eval(batch_norm_eval)
    checks.check_batch_norm_eval(batch_norm_eval, shape=(7,), seed=1)
    checks.check_batch_norm_eval(batch_norm_eval, shape=(2, 3, 4, 5), seed=2, eps=1.0)
    checks.check_batch_norm_eval(batch_norm_eval, shape=(6, 3), seed=3, scale=1e-2, offset=1e4)


@table_cases(impl.WRONG_EVALS)
def test_wrong_evaluations_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_batch_norm_eval, function, expected, kwargs)


@pytest.mark.parametrize("check, function, ids", [
    (checks.check_batch_norm_train, impl.train_keras_momentum, {"bn.momentum_reversed"}),
    (checks.check_batch_norm_train, impl.train_biased_running, {"bn.running_var_biased"}),
    (checks.check_batch_norm_train, impl.train_in_place, {"bn.running_in_place"}),
    (checks.check_batch_norm_train, impl.train_returns_y, {"bn.running_not_returned"}),
    (checks.check_batch_norm_train, impl.train_forgets_update, {"bn.running_not_updated"}),
    (checks.check_batch_norm_train, impl.train_replaces, {"bn.momentum_ignored"}),
    (checks.check_batch_norm_train, impl.train_axis_zero, {"bn.running_wrong_axes"}),
    (checks.check_batch_norm_train, impl.train_normalises_with_running, {"bn.train_uses_running"}),
    (checks.check_batch_norm_train, impl.train_momentum_fixed, {"bn.momentum_hardcoded"}),
    (checks.check_batch_norm_train, impl.train_stores_std, {"bn.running_std", "bn.running_var_biased",
                                                            "bn.running_var_eps"}),
    (checks.check_batch_norm_eval, impl.eval_batch_stats, {"bn.eval_uses_batch_stats"}),
    (checks.check_batch_norm_eval, impl.eval_batch_mean, {"bn.eval_uses_batch_stats"}),
    (checks.check_batch_norm_eval, impl.eval_eps_outside, {"bn.eps_outside_sqrt"}),
    (checks.check_batch_norm_eval, impl.eval_updates, {"bn.eval_updates_running"}),
    (checks.check_batch_norm_eval, impl.eval_swapped, {"bn.affine_swapped"}),
], ids=lambda value: getattr(value, "__name__", None))
def test_running_diagnoses_carry_their_ids(check, function, ids):
    assert_ids_named(check, function, {}, ids)


def test_the_callers_running_statistics_are_never_touched_by_the_check():
    """The check hands copies to the learner: an in-place update is seen, and the check's own arrays stay put."""
    seen = []

    def spy(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
        seen.append((running_mean, running_var))
        return impl.train_in_place(x, gamma, beta, running_mean, running_var, momentum, eps)

    with pytest.raises(CheckFailed):
        checks.check_batch_norm_train(spy)
    x = checks.random_input((2, 3, 5), seed=0)
    assert np.array_equal(checks._running_start(x, 0)[0], checks._running_start(x, 0)[0])
    assert seen


@pytest.mark.parametrize("check", [checks.check_batch_norm_train, checks.check_batch_norm_eval])
def test_running_stubs_raise_not_implemented(check):
    def stub(*_args, **_kwargs):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        check(stub)
