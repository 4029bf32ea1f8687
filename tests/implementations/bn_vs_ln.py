"""Implementations of the 01_bn_vs_ln exercises: several correct, many classic mistakes.

Each WRONG_* table maps a name to (function, substring the diagnosis must contain,
keyword arguments for the check that exposes it).
"""
import math

import numpy as np


# ---------------------------------------------------------------- layernorm
def ln_keepdims(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def ln_rows_fsum(x, gamma, beta, eps=1e-5):
    """One token at a time, with exactly rounded sums."""
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    out = np.empty_like(rows)
    for i, row in enumerate(rows):
        mu = math.fsum(row) / d
        var = math.fsum((v - mu) ** 2 for v in row) / d
        out[i] = (row - mu) / math.sqrt(var + eps)
    return out.reshape(x.shape) * gamma + beta


def ln_np_var_newaxis(x, gamma, beta, eps=1e-5):
    """np.var (biased by default) and indexing with None instead of keepdims."""
    mu = np.mean(x, axis=-1)[..., None]
    s = np.sqrt(np.var(x, axis=-1) + eps)[..., None]
    return np.multiply(gamma, np.divide(x - mu, s)) + beta


def ln_unbiased(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(x.var(axis=-1, ddof=1, keepdims=True) + eps) + beta


def ln_eps_outside(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / (x.std(axis=-1, keepdims=True) + eps) + beta


def ln_eps_ignored(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, gamma, beta, eps=0.0)


def ln_eps_hardcoded(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, gamma, beta)


def ln_over_axis0(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=0, keepdims=True)
    return gamma * (x - mu) / np.sqrt(x.var(axis=0, keepdims=True) + eps) + beta


def ln_over_everything(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean()) / np.sqrt(x.var() + eps) + beta


def ln_no_keepdims(x, gamma, beta, eps=1e-5):
    """Runs on 1-D and on square 2-D inputs, fails with a broadcasting error otherwise."""
    return gamma * (x - x.mean(axis=-1)) / np.sqrt(x.var(axis=-1) + eps) + beta


def ln_swapped(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, beta, gamma, eps)


def ln_affine_ignored(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, np.ones_like(gamma), np.zeros_like(beta), eps)


def ln_beta_ignored(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, gamma, np.zeros_like(beta), eps)


def ln_in_place(x, gamma, beta, eps=1e-5):
    x -= x.mean(axis=-1, keepdims=True)
    x /= np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    return gamma * x + beta


def ln_float32(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, gamma, beta, eps).astype(np.float32)


def ln_list(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, gamma, beta, eps).tolist()


def ln_no_centring(x, gamma, beta, eps=1e-5):
    return gamma * x / np.sqrt(x.var(axis=-1, keepdims=True) + eps) + beta


def ln_divide_by_variance(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / (x.var(axis=-1, keepdims=True) + eps) + beta


def ln_naive_variance(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = (x * x).mean(axis=-1, keepdims=True) - mu * mu
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def ln_over_leading_axes(x, gamma, beta, eps=1e-5):
    """BatchNorm's axes: for the worked example, a single token, that is no axis at all (every output 0)."""
    axes = tuple(range(x.ndim - 1))
    mu = x.mean(axis=axes, keepdims=True)
    return gamma * (x - mu) / np.sqrt(x.var(axis=axes, keepdims=True) + eps) + beta


def ln_zeros(x, gamma, beta, eps=1e-5):
    return np.zeros_like(x)


def ln_eps_fixed_small(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, gamma, beta, eps=1e-6)


def ln_torch_no_keepdim(x, gamma, beta, eps=1e-5):
    import torch

    t = torch.from_numpy(x)
    return (torch.from_numpy(gamma) * (t - t.mean(dim=-1)) / torch.sqrt(t.var(dim=-1, unbiased=False) + eps)
            + torch.from_numpy(beta)).numpy()


CORRECT_LAYERNORMS = [ln_keepdims, ln_rows_fsum, ln_np_var_newaxis]
WRONG_LAYERNORMS = {
    "unbiased variance": (ln_unbiased, "unbiased variance", {}),
    "eps outside the sqrt": (ln_eps_outside, "outside the square root", {}),
    "eps outside the sqrt, eps = 1": (ln_eps_outside, "outside the square root", {"shape": (3, 6), "eps": 1.0}),
    "eps ignored": (ln_eps_ignored, "eps is ignored", {"shape": (4, 5), "eps": 1.0}),
    "eps hard-coded": (ln_eps_hardcoded, "whatever eps was passed", {"shape": (4, 5), "eps": 1.0}),
    "statistics over axis 0": (ln_over_axis0, "that is BatchNorm", {"shape": (6, 5)}),
    "statistics over axis 0, 3-D": (ln_over_axis0, "axis 0 only", {"shape": (3, 4, 5)}),
    "statistics over everything": (ln_over_everything, "the whole array", {"shape": (3, 4, 5)}),
    "no keepdims, (2, 3, 5)": (ln_no_keepdims, "keepdims=True", {}),
    "no keepdims, square": (ln_no_keepdims, "one token at a time your function is right", {"shape": (5, 5)}),
    "gamma and beta swapped": (ln_swapped, "swapped", {}),
    "gamma and beta ignored": (ln_affine_ignored, "gamma and beta are ignored", {}),
    "beta ignored": (ln_beta_ignored, "beta is ignored", {}),
    "in-place": (ln_in_place, "in place", {}),
    "float32 result": (ln_float32, "dtype float32", {}),
    "list result": (ln_list, "builtins.list", {}),
    "not centred": (ln_no_centring, "did not subtract the mean", {}),
    "divides by the variance": (ln_divide_by_variance, "divided by the variance", {}),
    "naive variance, large offset": (ln_naive_variance, "cancels catastrophically",
                                     {"shape": (4, 16), "offset": 1e4, "scale": 1e-2}),
    "BatchNorm's axes, one token": (ln_over_leading_axes, "BatchNorm's axes", {}),
    "eps hard-coded to 1e-6": (ln_eps_fixed_small, "you used eps = 1e-6 whatever eps was passed", {}),
    "torch, no keepdim": (ln_torch_no_keepdim, "keepdims=True", {}),
}


# ---------------------------------------------------------------- batch_norm
def bn_axes_tuple(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - 1))
    mu = x.mean(axis=axes)
    var = x.var(axis=axes)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def bn_flatten(x, gamma, beta, eps=1e-5):
    """Flatten every leading axis into one, normalise the columns, restore the shape."""
    flat = x.reshape(-1, x.shape[-1])
    centred = flat - flat.sum(axis=0) / flat.shape[0]
    var = np.einsum("nd,nd->d", centred, centred) / flat.shape[0]
    return (centred / np.sqrt(var + eps) * gamma + beta).reshape(x.shape)


def bn_over_last_axis(x, gamma, beta, eps=1e-5):
    return ln_keepdims(x, gamma, beta, eps)


def bn_over_axis0(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + eps) + beta


def bn_unbiased(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - 1))
    return gamma * (x - x.mean(axis=axes)) / np.sqrt(x.var(axis=axes, ddof=1) + eps) + beta


def bn_eps_outside(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - 1))
    return gamma * (x - x.mean(axis=axes)) / (x.std(axis=axes) + eps) + beta


def bn_swapped(x, gamma, beta, eps=1e-5):
    return bn_axes_tuple(x, beta, gamma, eps)


def bn_gamma_ignored(x, gamma, beta, eps=1e-5):
    return bn_axes_tuple(x, np.ones_like(gamma), beta, eps)


def bn_in_place(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - 1))
    x -= x.mean(axis=axes)
    return gamma * x / np.sqrt(x.var(axis=axes) + eps) + beta


def bn_float32(x, gamma, beta, eps=1e-5):
    return bn_axes_tuple(x, gamma, beta, eps).astype(np.float32)


CORRECT_BATCH_NORMS = [bn_axes_tuple, bn_flatten]
WRONG_BATCH_NORMS = {
    "over the last axis (LayerNorm)": (bn_over_last_axis, "that is LayerNorm", {}),
    "over axis 0 only": (bn_over_axis0, "axis 0 only", {"shape": (3, 4, 5)}),
    "unbiased variance": (bn_unbiased, "unbiased variance", {}),
    "eps outside the sqrt": (bn_eps_outside, "outside the square root", {"shape": (2, 3, 4), "eps": 1.0}),
    "gamma and beta swapped": (bn_swapped, "swapped", {}),
    "gamma ignored": (bn_gamma_ignored, "gamma is ignored", {}),
    "in-place": (bn_in_place, "in place", {}),
    "float32 result": (bn_float32, "dtype float32", {}),
}


# ---------------------------------------------------------------- leaks_future
def probe_perturb_all(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0 + np.random.default_rng(0).standard_normal(changed[:, t + 1:].shape)
    return not np.array_equal(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])


def probe_truncate(norm, x, t):
    """Run norm without the future at all: the prefix must come out the same."""
    return not np.array_equal(norm(x)[:, : t + 1], norm(x[:, : t + 1]))


def probe_one_position_at_a_time(norm, x, t):
    before = norm(x)[:, : t + 1]
    for j in range(t + 1, x.shape[1]):
        changed = x.copy()
        changed[:, j] = changed[:, j] * -3.0 + 7.0
        if np.any(norm(changed)[:, : t + 1] != before):
            return True
    return False


def probe_tiny_change(norm, x, t):
    """Exact comparison after a change of 1e-3: any change counts, however small."""
    changed = x.copy()
    changed[:, t + 1:] += 1e-3
    return bool(np.any(norm(x)[:, : t + 1] != norm(changed)[:, : t + 1]))


def probe_always_false(norm, x, t):
    return False


def probe_always_true(norm, x, t):
    return True


def probe_only_position_t(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    return not np.array_equal(norm(x)[:, t], norm(changed)[:, t])


def probe_only_next_token(norm, x, t):
    changed = x.copy()
    if t + 1 < x.shape[1]:
        changed[:, t + 1] += 1.0
    return not np.array_equal(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])


def probe_off_by_one(norm, x, t):
    changed = x.copy()
    changed[:, t:] += 1.0
    return not np.array_equal(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])


def probe_compares_everything(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    return not np.array_equal(norm(x), norm(changed))


def probe_zero_fill(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] = 0.0
    return not np.array_equal(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])


def probe_allclose(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    return not np.allclose(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])


def probe_assert_close(norm, x, t):
    """torch.testing.assert_close: rtol = atol = 1e-7 in float64, a tolerance that hides small leaks."""
    import torch

    changed = x.copy()
    changed[:, t + 1:] += 1.0 + np.random.default_rng(0).standard_normal(changed[:, t + 1:].shape)
    try:
        torch.testing.assert_close(torch.from_numpy(norm(x)[:, : t + 1]), torch.from_numpy(norm(changed)[:, : t + 1]))
    except AssertionError:
        return True
    return False


def probe_allclose_huge_change(norm, x, t):
    """A tolerant comparison, made to work most of the time by a change a million times larger."""
    changed = x.copy()
    changed[:, t + 1:] += 1e6
    return not np.allclose(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])


def probe_isclose_relative(norm, x, t):
    """math.isclose's default: a relative tolerance of 1e-9 and no absolute one."""
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    before, after = norm(x)[:, : t + 1], norm(changed)[:, : t + 1]
    return not all(math.isclose(a, b) for a, b in zip(before.ravel(), after.ravel(), strict=True))


def probe_truncate_allclose(norm, x, t):
    return not np.allclose(norm(x)[:, : t + 1], norm(x[:, : t + 1]))


def probe_in_place(norm, x, t):
    before = norm(x)
    x[:, t + 1:] += 1.0
    return not np.array_equal(before[:, : t + 1], norm(x)[:, : t + 1])


def probe_per_position(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    return np.any(norm(x)[:, : t + 1] != norm(changed)[:, : t + 1], axis=(0, 2))


def probe_excludes_t(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    return not np.array_equal(norm(x)[:, :t], norm(changed)[:, :t])


CORRECT_PROBES = [probe_perturb_all, probe_truncate, probe_one_position_at_a_time, probe_tiny_change]
WRONG_PROBES = {
    "always False": (probe_always_false, "never called norm", {}),
    "always True": (probe_always_true, "never called norm", {}),
    "only position t": (probe_only_position_t, "not only", {}),
    "only the next token": (probe_only_next_token, "only changed token t + 1", {}),
    "off by one": (probe_off_by_one, "not after t", {}),
    "compares every position": (probe_compares_everything, "Compare only positions 0..t", {}),
    "zero fill": (probe_zero_fill, "zero padding", {}),
    "np.allclose": (probe_allclose, "too tolerant", {}),
    "torch.testing.assert_close": (probe_assert_close, "too tolerant", {}),
    "np.allclose after a huge change": (probe_allclose_huge_change, "too tolerant", {}),
    "math.isclose": (probe_isclose_relative, "too tolerant", {}),
    "truncated, np.allclose": (probe_truncate_allclose, "too tolerant", {}),
    "in-place": (probe_in_place, "in place", {}),
    "returns an array": (probe_per_position, "reduce it to one answer", {}),
    "excludes position t": (probe_excludes_t, "Check the slice you compare", {}),
}


# ---------------------------------------------------------------- right maths, fixed number of axes
# Correct on the inputs they were written for (course assignments, model code), but they stop with
# an exception on any other number of axes. The check must explain, not show a traceback.
def ln_unpacks_three_axes(x, gamma, beta, eps=1e-5):
    B, T, C = x.shape
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def ln_axis_one(x, gamma, beta, eps=1e-5):
    """Written for (N, d) batches: axis=1 is the features only there."""
    mu = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def ln_indexes_shape_one(x, gamma, beta, eps=1e-5):
    d = x.shape[1]
    mu = x.sum(axis=-1, keepdims=True) / d
    var = ((x - mu) ** 2).sum(axis=-1, keepdims=True) / d
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def bn_unpacks_two_axes(x, gamma, beta, eps=1e-5):
    N, d = x.shape
    mu = x.sum(axis=0) / N
    var = ((x - mu) ** 2).sum(axis=0) / N
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


# (function, substrings the diagnosis must contain, keyword arguments for the check)
SHAPE_LIMITED_LAYERNORMS = {
    "unpacks B, T, C": (ln_unpacks_three_axes, ["ValueError", "not enough values to unpack", "any shape (..., d)",
                                                "B, T, C = x.shape"], {}),
    "axis=1": (ln_axis_one, ["AxisError", "any shape (..., d)", "axis=-1"], {}),
    "x.shape[1]": (ln_indexes_shape_one, ["IndexError", "any shape (..., d)", "x.shape[-1]"], {}),
}
SHAPE_LIMITED_BATCH_NORMS = {
    "unpacks N, d": (bn_unpacks_two_axes, ["ValueError", "too many values to unpack", "any shape (..., d)",
                                           "every axis but the last"], {}),
}


# ---------------------------------------------------------------- two mistakes at once
def ln_unbiased_eps_outside(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / (x.std(axis=-1, ddof=1, keepdims=True) + eps) + beta


def ln_unbiased_eps_ignored(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / x.std(axis=-1, ddof=1, keepdims=True) + beta


def ln_unbiased_divides_by_variance(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / (x.var(axis=-1, ddof=1, keepdims=True) + eps) + beta


def ln_naive_eps_outside(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = (x * x).mean(axis=-1, keepdims=True) - mu * mu
    return gamma * (x - mu) / (np.sqrt(var) + eps) + beta


def bn_unbiased_eps_outside(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - 1))
    return gamma * (x - x.mean(axis=axes)) / (x.std(axis=axes, ddof=1) + eps) + beta


UNBIASED, OUTSIDE, IGNORED = "unbiased variance", "outside the square root", "eps is ignored"
BY_VARIANCE, CANCELS, HARDCODED = "divided by the variance", "cancels catastrophically", "whatever eps was passed"
LARGE_OFFSET = {"shape": (4, 16), "offset": 1e4, "scale": 1e-2}
ALL_NAMED = [UNBIASED, OUTSIDE, IGNORED, BY_VARIANCE, CANCELS, HARDCODED]
# name -> (function, what the diagnosis must name, keyword arguments); it must name nothing else of ALL_NAMED
MISTAKE_COMBINATIONS_LAYERNORM = {
    "unbiased + eps outside": (ln_unbiased_eps_outside, [UNBIASED, OUTSIDE], {}),
    "unbiased + eps outside, eps = 1": (ln_unbiased_eps_outside, [UNBIASED, OUTSIDE], {"shape": (3, 6), "eps": 1.0}),
    "unbiased + eps outside, large offset": (ln_unbiased_eps_outside, [UNBIASED, OUTSIDE], LARGE_OFFSET),
    "unbiased + eps ignored": (ln_unbiased_eps_ignored, [UNBIASED, IGNORED], {"shape": (4, 5), "eps": 1.0}),
    "unbiased + divides by the variance": (ln_unbiased_divides_by_variance, [UNBIASED, BY_VARIANCE], {}),
    "naive variance + eps outside, large offset": (ln_naive_eps_outside, [CANCELS, OUTSIDE],
                                                   {**LARGE_OFFSET, "eps": 1e-3}),
    # one mistake: only that one is named, with or without a large offset
    "unbiased, large offset": (ln_unbiased, [UNBIASED], LARGE_OFFSET),
    "eps outside, large offset": (ln_eps_outside, [OUTSIDE], LARGE_OFFSET),
    "naive variance, large offset": (ln_naive_variance, [CANCELS], LARGE_OFFSET),
    "eps hard-coded": (ln_eps_hardcoded, [HARDCODED], {"shape": (4, 5), "eps": 1.0}),
}
MISTAKE_COMBINATIONS_BATCH_NORM = {
    "unbiased + eps outside": (bn_unbiased_eps_outside, [UNBIASED, OUTSIDE], {"shape": (2, 3, 4), "eps": 1.0}),
    "unbiased + eps outside, eps = 1e-5": (bn_unbiased_eps_outside, [UNBIASED, OUTSIDE], {}),
}


# ---------------------------------------------------------------- batch_norm_train, batch_norm_eval
def _stats(x):
    leading = tuple(range(x.ndim - 1))
    mu = x.mean(axis=leading)
    return mu, ((x - mu) ** 2).mean(axis=leading), x.size // x.shape[-1]


def train_pure(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, n = _stats(x)
    y = gamma * (x - mu) / np.sqrt(var + eps) + beta
    return y, (1 - momentum) * running_mean + momentum * mu, (1 - momentum) * running_var + momentum * var * n / (n - 1)


def train_np_var_ddof(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """np.var twice: ddof=0 for the output, ddof=1 for the running variance."""
    flat = x.reshape(-1, x.shape[-1])
    mu = flat.mean(axis=0)
    y = (flat - mu) / np.sqrt(np.var(flat, axis=0) + eps) * gamma + beta
    new_mean = running_mean + momentum * (mu - running_mean)
    new_var = running_var + momentum * (np.var(flat, axis=0, ddof=1) - running_var)
    return y.reshape(x.shape), new_mean, new_var


def train_keras_momentum(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """Keras' convention: momentum weighs the old value."""
    mu, var, n = _stats(x)
    y = gamma * (x - mu) / np.sqrt(var + eps) + beta
    return y, momentum * running_mean + (1 - momentum) * mu, momentum * running_var + (1 - momentum) * var * n / (n - 1)


def train_biased_running(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, _ = _stats(x)
    y = gamma * (x - mu) / np.sqrt(var + eps) + beta
    return y, (1 - momentum) * running_mean + momentum * mu, (1 - momentum) * running_var + momentum * var


def train_in_place(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, n = _stats(x)
    running_mean *= 1 - momentum
    running_mean += momentum * mu
    running_var *= 1 - momentum
    running_var += momentum * var * n / (n - 1)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta, running_mean, running_var


def train_returns_y(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, n = _stats(x)
    running_mean = (1 - momentum) * running_mean + momentum * mu
    running_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta


def train_forgets_update(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, _ = _stats(x)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta, running_mean, running_var


def train_replaces(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, n = _stats(x)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta, mu, var * n / (n - 1)


def train_axis_zero(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """The output is right (every axis but the last), the running statistics use axis 0 only."""
    mu, var, _ = _stats(x)
    y = gamma * (x - mu) / np.sqrt(var + eps) + beta
    return y, (1 - momentum) * running_mean + momentum * x.mean(axis=0), \
        (1 - momentum) * running_var + momentum * x.var(axis=0, ddof=1)


def train_normalises_with_running(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, n = _stats(x)
    new_mean = (1 - momentum) * running_mean + momentum * mu
    new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    return gamma * (x - new_mean) / np.sqrt(new_var + eps) + beta, new_mean, new_var


def train_momentum_fixed(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    return train_pure(x, gamma, beta, running_mean, running_var, 0.1, eps)


def train_stores_std(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    mu, var, n = _stats(x)
    s = np.sqrt(var + eps)
    return gamma * (x - mu) / s + beta, (1 - momentum) * running_mean + momentum * mu, \
        (1 - momentum) * running_var + momentum * s


def eval_pure(x, gamma, beta, running_mean, running_var, eps=1e-5):
    return gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta


def eval_inverse_std(x, gamma, beta, running_mean, running_var, eps=1e-5):
    inv = 1.0 / np.sqrt(running_var + eps)
    return (x - running_mean) * inv * gamma + beta


def eval_batch_stats(x, gamma, beta, running_mean, running_var, eps=1e-5):
    """Training-mode code reused: the batch's own statistics."""
    leading = tuple(range(x.ndim - 1))
    mu = x.mean(axis=leading)
    return gamma * (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=leading) + eps) + beta


def eval_batch_mean(x, gamma, beta, running_mean, running_var, eps=1e-5):
    mu = x.reshape(-1, x.shape[-1]).mean(axis=0)
    return gamma * (x - mu) / np.sqrt(running_var + eps) + beta


def eval_eps_outside(x, gamma, beta, running_mean, running_var, eps=1e-5):
    return gamma * (x - running_mean) / (np.sqrt(running_var) + eps) + beta


def eval_updates(x, gamma, beta, running_mean, running_var, eps=1e-5):
    y = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta
    running_mean *= 0.9
    running_mean += 0.1 * x.reshape(-1, x.shape[-1]).mean(axis=0)
    return y


def eval_swapped(x, gamma, beta, running_mean, running_var, eps=1e-5):
    return beta * (x - running_mean) / np.sqrt(running_var + eps) + gamma


CORRECT_TRAINS = [train_pure, train_np_var_ddof]
CORRECT_EVALS = [eval_pure, eval_inverse_std]
# name -> (function, substring the diagnosis must contain, keyword arguments for the check)
WRONG_TRAINS = {
    "Keras' momentum": (train_keras_momentum, "weights are swapped", {}),
    "biased running variance": (train_biased_running, "biased batch variance", {}),
    "in place": (train_in_place, "updated in place", {}),
    "returns y only": (train_returns_y, "returned y alone", {}),
    "no update": (train_forgets_update, "came back unchanged", {}),
    "replaced": (train_replaces, "momentum is ignored", {}),
    "axis 0": (train_axis_zero, "axis=0", {}),
    "normalises with running": (train_normalises_with_running, "updated running statistics", {}),
    "momentum fixed": (train_momentum_fixed, "whatever momentum was passed", {}),
    "stores std": (train_stores_std, "standard deviation", {}),
}
WRONG_EVALS = {
    "batch statistics": (eval_batch_stats, "statistics of the batch", {}),
    "batch mean": (eval_batch_mean, "statistics of the batch", {}),
    "eps outside": (eval_eps_outside, "outside the square root", {}),
    "updates": (eval_updates, "changed the running statistics in place", {}),
    "swapped": (eval_swapped, "gamma and beta are swapped", {}),
}
