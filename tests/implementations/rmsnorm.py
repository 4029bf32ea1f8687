"""Implementations of the 04_rmsnorm exercises: several correct, many classic mistakes.

Each WRONG_* table maps a name to (function, substring the diagnosis must contain,
keyword arguments for the check that exposes it).
"""
import numpy as np


def _r(x, eps, axis=-1):
    return np.sqrt(np.mean(x * x, axis=axis, keepdims=True) + eps)


# ---------------------------------------------------------------- rms_norm
def rms_vectorised(x, gamma, eps=1e-6):
    return gamma * (x / _r(x, eps))


def rms_upcast(x, gamma, eps=1e-6):
    """LLaMA's recipe: statistics in float64 (here), normalise, cast back to the input's dtype."""
    x64 = x.astype(np.float64)
    ms = np.einsum("...d,...d->...", x64, x64)[..., None] / x.shape[-1]
    return (gamma.astype(np.float64) * x64 / np.sqrt(ms + eps)).astype(x.dtype)


def rms_per_token(x, gamma, eps=1e-6):
    """Loop over the tokens with a reciprocal square root, the way a kernel reads."""
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    out = np.empty_like(rows)
    for t, row in enumerate(rows):
        inv_r = 1.0 / np.sqrt(np.dot(row, row) / d + eps)
        out[t] = row * inv_r * gamma
    return out.reshape(x.shape)


def rms_torch(x, gamma, eps=1e-6):
    import torch

    xt, gt = torch.from_numpy(x), torch.from_numpy(gamma)
    r = torch.sqrt(xt.pow(2).mean(-1, keepdim=True) + eps)
    return (gt * xt / r).numpy()


def rms_mean_subtracted(x, gamma, eps=1e-6):
    centred = x - x.mean(-1, keepdims=True)
    return gamma * centred / np.sqrt(np.mean(centred**2, -1, keepdims=True) + eps)


def rms_eps_outside(x, gamma, eps=1e-6):
    return gamma * x / (np.sqrt(np.mean(x * x, -1, keepdims=True)) + eps)


def rms_eps_ignored(x, gamma, eps=1e-6):
    return rms_vectorised(x, gamma, eps=0.0)


def rms_sum_not_mean(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(np.sum(x * x, -1, keepdims=True) + eps)


def rms_l2_normalise(x, gamma, eps=1e-6):
    return gamma * x / np.linalg.norm(x, axis=-1, keepdims=True)


def rms_no_sqrt(x, gamma, eps=1e-6):
    return gamma * x / (np.mean(x * x, -1, keepdims=True) + eps)


def rms_std(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(x.var(-1, keepdims=True) + eps)


def rms_gamma_forgotten(x, gamma, eps=1e-6):
    return x / _r(x, eps)


def rms_gamma_twice(x, gamma, eps=1e-6):
    return gamma * gamma * x / _r(x, eps)


def rms_axis0(x, gamma, eps=1e-6):
    return gamma * x / _r(x, eps, axis=0)


def rms_axis1(x, gamma, eps=1e-6):
    return gamma * x / _r(x, eps, axis=1)


def rms_global(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(np.mean(x * x) + eps)


def rms_no_keepdims(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(np.mean(x * x, axis=-1) + eps)


def rms_float32_inside(x, gamma, eps=1e-6):
    return rms_vectorised(x.astype(np.float32), gamma.astype(np.float32), eps).astype(x.dtype)


def rms_returns_float32(x, gamma, eps=1e-6):
    return rms_vectorised(x, gamma, eps).astype(np.float32)


def rms_no_cast_back(x, gamma, eps=1e-6):
    x64 = x.astype(np.float64)
    return gamma.astype(np.float64) * x64 / _r(x64, eps)


def rms_float16_statistics(x, gamma, eps=1e-6):
    x16 = x.astype(np.float16)
    ms = np.mean(x16 * x16, axis=-1, keepdims=True, dtype=np.float16)
    return (gamma * x / np.sqrt(ms.astype(x.dtype) + eps)).astype(x.dtype)


def rms_bfloat16_running_sum(x, gamma, eps=1e-6):
    """The sum of squares accumulated feature by feature in bfloat16 (it stalls), the rest in x's dtype."""
    import torch

    rows = torch.from_numpy(x.reshape(-1, x.shape[-1])).to(torch.bfloat16)
    total = torch.zeros(rows.shape[0], dtype=torch.bfloat16)
    for j in range(rows.shape[1]):
        total = total + rows[:, j] * rows[:, j]
    ms = (total.to(torch.float64).numpy() / x.shape[-1]).reshape(x.shape[:-1] + (1,))
    return (gamma * x / np.sqrt(ms + eps)).astype(x.dtype)


def rms_bfloat16_mean(x, gamma, eps=1e-6):
    """torch's mean of squares on a bfloat16 copy, rounded to bfloat16."""
    import torch

    xb = torch.from_numpy(x).to(torch.bfloat16)
    ms = (xb * xb).mean(-1, keepdim=True).to(torch.float64).numpy()
    return (gamma * x / np.sqrt(ms + eps)).astype(x.dtype)


def rms_in_place(x, gamma, eps=1e-6):
    x /= _r(x, eps)
    x *= gamma
    return x


def rms_returns_tensor(x, gamma, eps=1e-6):
    import torch

    return torch.from_numpy(rms_vectorised(x, gamma, eps))


CORRECT_FORWARDS = [rms_vectorised, rms_upcast, rms_per_token, rms_torch]
WRONG_FORWARDS = {
    "mean subtracted (LayerNorm)": (rms_mean_subtracted, "That is LayerNorm", {}),
    "eps outside sqrt": (rms_eps_outside, "outside the square root", {}),
    "eps outside sqrt, eps = 0.1": (rms_eps_outside, "outside the square root", {"shape": (4, 8), "eps": 0.1}),
    "eps ignored": (rms_eps_ignored, "eps is ignored", {"shape": (4, 8), "eps": 0.1}),
    "eps ignored, tiny rows": (rms_eps_ignored, "eps is ignored", {"shape": (5, 8), "tiny_rows": True}),
    "sum instead of mean": (rms_sum_not_mean, "sqrt(d)", {}),
    "L2 normalisation": (rms_l2_normalise, "sqrt(d)", {}),
    "square root missing": (rms_no_sqrt, "square root is missing", {}),
    "standard deviation": (rms_std, "standard deviation", {"shape": (4, 8), "offset": 1.0}),
    "gamma forgotten": (rms_gamma_forgotten, "gamma was not applied", {}),
    "gamma twice": (rms_gamma_twice, "gamma was applied twice", {}),
    "axis 0": (rms_axis0, "over axis 0", {}),
    "axis 1 on 3-D input": (rms_axis1, "over axis 1", {"shape": (2, 3, 8)}),
    "axis 1 on 1-D input": (rms_axis1, "axis=-1", {}),
    "one r for the array": (rms_global, "whole array", {}),
    "keepdims missing (3-D)": (rms_no_keepdims, "keepdims=True", {}),
    "keepdims missing (square)": (rms_no_keepdims, "keepdims=True is missing", {"shape": (6, 6)}),
    "float32 inside": (rms_float32_inside, "float32 rounding", {}),
    "returns float32": (rms_returns_float32, "dtype float32 for a float64 input", {}),
    "no cast back": (rms_no_cast_back, "cast back", {"dtype": np.float32}),
    "float16 statistics": (rms_float16_statistics, "half-precision", {"shape": (4, 512), "dtype": np.float32}),
    "bfloat16 running sum": (rms_bfloat16_running_sum, "stops growing", {"shape": (4, 1024), "dtype": np.float32}),
    "bfloat16 mean": (rms_bfloat16_mean, "half-precision", {"shape": (4, 256), "dtype": np.float32}),
    "in place": (rms_in_place, "in place", {}),
    "torch tensor": (rms_returns_tensor, "torch", {}),
}


# ---------------------------------------------------------------- rms_norm_backward
def backward_vectorised(dy, x, gamma, eps=1e-6):
    r = _r(x, eps)
    x_hat = x / r
    g = gamma * dy
    dx = (g - np.mean(g * x_hat, -1, keepdims=True) * x_hat) / r
    return dx, np.sum(dy * x_hat, axis=tuple(range(x.ndim - 1)))


def backward_per_token(dy, x, gamma, eps=1e-6):
    """Row by row with the chain rule through r written out: dL/dr, then dr/dx = x / (d r)."""
    d = x.shape[-1]
    rows_x, rows_dy = x.reshape(-1, d), dy.reshape(-1, d)
    dx = np.empty_like(rows_x)
    dgamma = np.zeros(d, dtype=x.dtype)
    for t in range(rows_x.shape[0]):
        xt, g = rows_x[t], gamma * rows_dy[t]
        r = np.sqrt(np.dot(xt, xt) / d + eps)
        dL_dr = -np.dot(g, xt) / r**2
        dx[t] = g / r + dL_dr * xt / (d * r)
        dgamma += rows_dy[t] * xt / r
    return dx.reshape(x.shape), dgamma


def backward_upcast(dy, x, gamma, eps=1e-6):
    """Everything in float64, cast back to the input's dtype."""
    dx, dgamma = backward_vectorised(dy.astype(np.float64), x.astype(np.float64), gamma.astype(np.float64), eps)
    return dx.astype(x.dtype), dgamma.astype(x.dtype)


def backward_einsum(dy, x, gamma, eps=1e-6):
    d = x.shape[-1]
    inv_r = 1.0 / np.sqrt(np.einsum("...d,...d->...", x, x) / d + eps)
    g = gamma * dy
    coefficient = np.einsum("...d,...d->...", g, x) * inv_r**3 / d
    dx = g * inv_r[..., None] - coefficient[..., None] * x
    dgamma = np.einsum("td,td->d", dy.reshape(-1, d), (x * inv_r[..., None]).reshape(-1, d))
    return dx, dgamma


def backward_layernorm(dy, x, gamma, eps=1e-6):
    """Notebook 03's LayerNorm backward, pasted in."""
    s = np.sqrt(x.var(-1, keepdims=True) + eps)
    x_hat = (x - x.mean(-1, keepdims=True)) / s
    g = gamma * dy
    dx = (g - g.mean(-1, keepdims=True) - np.mean(g * x_hat, -1, keepdims=True) * x_hat) / s
    return dx, np.sum(dy * x_hat, axis=tuple(range(x.ndim - 1)))


def backward_extra_mean_term(dy, x, gamma, eps=1e-6):
    """RMSNorm's formula with LayerNorm's -mean(g) term kept."""
    r = _r(x, eps)
    x_hat = x / r
    g = gamma * dy
    dx = (g - g.mean(-1, keepdims=True) - np.mean(g * x_hat, -1, keepdims=True) * x_hat) / r
    return dx, np.sum(dy * x_hat, axis=tuple(range(x.ndim - 1)))


def backward_no_projection(dy, x, gamma, eps=1e-6):
    dx, dgamma = backward_vectorised(dy, x, gamma, eps)
    return gamma * dy / _r(x, eps), dgamma


def backward_sum_not_mean(dy, x, gamma, eps=1e-6):
    r = _r(x, eps)
    x_hat = x / r
    g = gamma * dy
    _, dgamma = backward_vectorised(dy, x, gamma, eps)
    return (g - np.sum(g * x_hat, -1, keepdims=True) * x_hat) / r, dgamma


def backward_x_not_x_hat(dy, x, gamma, eps=1e-6):
    r = _r(x, eps)
    g = gamma * dy
    _, dgamma = backward_vectorised(dy, x, gamma, eps)
    return (g - np.mean(g * x, -1, keepdims=True) * x) / r, dgamma


def backward_eps_outside(dy, x, gamma, eps=1e-6):
    d = x.shape[-1]
    rms = np.sqrt(np.mean(x * x, -1, keepdims=True))
    r = rms + eps
    g = gamma * dy
    # d/dx of x / (rms + eps): g / r - x * (g . x) / (d * rms * r**2)
    dx = g / r - x * np.sum(g * x, -1, keepdims=True) / (d * rms * r**2)
    return dx, np.sum(dy * x / r, axis=tuple(range(x.ndim - 1)))


def backward_eps_ignored(dy, x, gamma, eps=1e-6):
    return backward_vectorised(dy, x, gamma, eps=0.0)


def backward_no_division(dy, x, gamma, eps=1e-6):
    r = _r(x, eps)
    x_hat = x / r
    g = gamma * dy
    _, dgamma = backward_vectorised(dy, x, gamma, eps)
    return g - np.mean(g * x_hat, -1, keepdims=True) * x_hat, dgamma


def backward_gamma_forgotten(dy, x, gamma, eps=1e-6):
    dx, _ = backward_vectorised(dy, x, np.ones_like(gamma), eps)
    return dx, backward_vectorised(dy, x, gamma, eps)[1]


def backward_gamma_twice(dy, x, gamma, eps=1e-6):
    dx, _ = backward_vectorised(gamma * dy, x, gamma, eps)
    return dx, backward_vectorised(dy, x, gamma, eps)[1]


def backward_not_summed(dy, x, gamma, eps=1e-6):
    dx, _ = backward_vectorised(dy, x, gamma, eps)
    return dx, dy * x / _r(x, eps)


def backward_axis0_only(dy, x, gamma, eps=1e-6):
    dx, _ = backward_vectorised(dy, x, gamma, eps)
    return dx, np.sum(dy * x / _r(x, eps), axis=0)


def backward_dgamma_with_x(dy, x, gamma, eps=1e-6):
    dx, _ = backward_vectorised(dy, x, gamma, eps)
    return dx, np.sum(dy * x, axis=tuple(range(x.ndim - 1)))


def backward_dgamma_times_gamma(dy, x, gamma, eps=1e-6):
    dx, dgamma = backward_vectorised(dy, x, gamma, eps)
    return dx, dgamma * gamma


def backward_dgamma_mean(dy, x, gamma, eps=1e-6):
    dx, _ = backward_vectorised(dy, x, gamma, eps)
    return dx, np.mean(dy * x / _r(x, eps), axis=tuple(range(x.ndim - 1)))


def backward_float32_inside(dy, x, gamma, eps=1e-6):
    dx, dgamma = backward_vectorised(dy.astype(np.float32), x.astype(np.float32), gamma.astype(np.float32), eps)
    return dx.astype(x.dtype), dgamma.astype(x.dtype)


def backward_no_cast_back(dy, x, gamma, eps=1e-6):
    return backward_vectorised(dy.astype(np.float64), x.astype(np.float64), gamma.astype(np.float64), eps)


def backward_no_keepdims(dy, x, gamma, eps=1e-6):
    r = np.sqrt(np.mean(x * x, -1) + eps)
    x_hat = x / r
    g = gamma * dy
    return (g - np.mean(g * x_hat, -1) * x_hat) / r, np.sum(dy * x_hat, axis=tuple(range(x.ndim - 1)))


def backward_list(dy, x, gamma, eps=1e-6):
    return list(backward_vectorised(dy, x, gamma, eps))


CORRECT_BACKWARDS = [backward_vectorised, backward_per_token, backward_upcast, backward_einsum]
WRONG_BACKWARDS = {
    "LayerNorm's backward": (backward_layernorm, "like LayerNorm", {}),
    "extra -mean(g) term": (backward_extra_mean_term, "same amount on every feature", {}),
    "projection term missing": (backward_no_projection, "term is missing", {}),
    "sum instead of mean": (backward_sum_not_mean, "sum instead of a mean", {}),
    "x instead of x_hat": (backward_x_not_x_hat, "from x instead of x_hat", {}),
    "eps outside sqrt": (backward_eps_outside, "outside the square root", {}),
    "eps ignored": (backward_eps_ignored, "eps is ignored", {"shape": (4, 8), "eps": 0.1}),
    "eps ignored, tiny rows": (backward_eps_ignored, "eps is ignored", {"shape": (6, 8), "tiny_rows": True}),
    "not divided by r": (backward_no_division, "not divided by r", {}),
    "gamma forgotten": (backward_gamma_forgotten, "ignores gamma", {}),
    "gamma twice": (backward_gamma_twice, "applied twice", {}),
    "dgamma not summed": (backward_not_summed, "not summed over the tokens", {}),
    "dgamma over axis 0 only": (backward_axis0_only, "leading axes only", {}),
    "dgamma uses x": (backward_dgamma_with_x, "used x instead of x_hat", {}),
    "dgamma times gamma": (backward_dgamma_times_gamma, "multiplied by gamma", {}),
    "dgamma is a mean": (backward_dgamma_mean, "it is a sum", {}),
    "float32 inside": (backward_float32_inside, "float32 rounding", {}),
    "no cast back": (backward_no_cast_back, "cast back", {"dtype": np.float32}),
    "keepdims missing": (backward_no_keepdims, "keepdims=True", {}),
    "list instead of tuple": (backward_list, "should return a tuple", {}),
}


# ---------------------------------------------------------------- right maths, fixed number of axes
def rms_unpacks_three_axes(x, gamma, eps=1e-6):
    B, T, d = x.shape
    return gamma * x / np.sqrt(np.mean(x * x, axis=2, keepdims=True) + eps)


def rms_reshape_two_axes(x, gamma, eps=1e-6):
    """Written for (B, T, d): flattens with sizes read off three axes."""
    rows = x.reshape(x.shape[0] * x.shape[1], x.shape[2])
    out = gamma * rows / np.sqrt(np.mean(rows * rows, axis=1, keepdims=True) + eps)
    return out.reshape(x.shape)


def backward_unpacks_two_axes(dy, x, gamma, eps=1e-6):
    N, d = x.shape
    r = np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)
    x_hat = x / r
    g = gamma * dy
    return (g - np.mean(g * x_hat, axis=1, keepdims=True) * x_hat) / r, np.sum(dy * x_hat, axis=0)


SHAPE_LIMITED_FORWARDS = {
    "unpacks B, T, d": (rms_unpacks_three_axes, ["ValueError", "not enough values to unpack", "any shape (..., d)"],
                        {}),
    "x.shape[2]": (rms_reshape_two_axes, ["IndexError", "any shape (..., d)", "x.shape[-1]"], {}),
}
SHAPE_LIMITED_BACKWARDS = {
    "unpacks N, d": (backward_unpacks_two_axes, ["ValueError", "too many values to unpack", "any shape (..., d)"],
                     {}),
}


# ---------------------------------------------------------------- two mistakes at once
def rms_sum_eps_outside(x, gamma, eps=1e-6):
    return gamma * x / (np.sqrt(np.sum(x * x, axis=-1, keepdims=True)) + eps)


def rms_std_eps_outside(x, gamma, eps=1e-6):
    return gamma * x / (x.std(axis=-1, keepdims=True) + eps)


def rms_unbiased_std_eps_ignored(x, gamma, eps=1e-6):
    return gamma * x / x.std(axis=-1, ddof=1, keepdims=True)


def rms_mean_square_eps_ignored(x, gamma, eps=1e-6):
    return gamma * x / np.mean(x * x, axis=-1, keepdims=True)


SUMMED, OUTSIDE, IGNORED, STD = "sqrt(d)", "outside the square root", "eps is ignored", "standard deviation"
NO_SQRT, UNBIASED_STD = "square root is missing", "unbiased standard deviation"
ALL_NAMED = [SUMMED, OUTSIDE, IGNORED, STD, NO_SQRT]
MISTAKE_COMBINATIONS_FORWARD = {
    "sum + eps outside": (rms_sum_eps_outside, [SUMMED, OUTSIDE], {"shape": (4, 8), "eps": 0.1}),
    "std + eps outside": (rms_std_eps_outside, [STD, OUTSIDE], {"shape": (4, 8), "eps": 0.1, "offset": 1.0}),
    "unbiased std + eps ignored": (rms_unbiased_std_eps_ignored, [UNBIASED_STD, IGNORED],
                                   {"shape": (4, 8), "eps": 0.1, "offset": 1.0}),
    "mean square, no eps": (rms_mean_square_eps_ignored, [NO_SQRT, IGNORED], {"shape": (4, 8), "eps": 0.1}),
    "L2 normalisation": (rms_l2_normalise, [SUMMED, IGNORED], {"shape": (4, 8), "eps": 0.1}),
    # one mistake: only that one is named
    "eps outside": (rms_eps_outside, [OUTSIDE], {"shape": (4, 8), "eps": 0.1}),
    "sum, eps inside": (rms_sum_not_mean, [SUMMED], {"shape": (4, 8), "eps": 0.1}),
    "eps ignored": (rms_eps_ignored, [IGNORED], {"shape": (4, 8), "eps": 0.1}),
}


# ---------------------------------------------------------------- rms_norm_bf16 (bfloat16 numbers in float32 arrays)
def _bf16(x, gamma):
    import torch

    return torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(gamma).to(torch.bfloat16)


def bf16_llama(x, gamma, eps=1e-6):
    """LLaMA's order: normalise in float32, cast back, multiply by the bfloat16 gain."""
    import torch

    x, gamma = _bf16(x, gamma)
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16) * gamma
    return y.float().numpy()


def bf16_gemma_order(x, gamma, eps=1e-6):
    """Gemma's order: the gain applied in float32, one rounding at the end."""
    import torch

    x, gamma = _bf16(x, gamma)
    x32 = x.to(torch.float32)
    r = torch.sqrt((x32 * x32).sum(-1, keepdim=True) / x.shape[-1] + eps)
    y = (gamma.float() * (x32 / r)).to(torch.bfloat16)
    return y.float().numpy()


def bf16_float64_statistics(x, gamma, eps=1e-6):
    """Statistics in float64 (wider than needed), rounded once."""
    import torch

    x, gamma = _bf16(x, gamma)
    x64 = x.double()
    y = gamma.double() * x64 / torch.sqrt(torch.mean(x64 ** 2, dim=-1, keepdim=True) + eps)
    return y.to(torch.bfloat16).float().numpy()


def bf16_no_upcast(x, gamma, eps=1e-6):
    """Every operation on bfloat16 tensors."""
    import torch

    x, gamma = _bf16(x, gamma)
    y = gamma * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    return y.float().numpy()


def bf16_r_cast_early(x, gamma, eps=1e-6):
    """The mean square in float32, but r rounded to bfloat16 before the division."""
    import torch

    x, gamma = _bf16(x, gamma)
    r = torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(torch.bfloat16)
    return (gamma * (x / r)).float().numpy()


def bf16_running_sum(x, gamma, eps=1e-6):
    """The sum of squares accumulated one feature at a time in a bfloat16 total."""
    import torch

    x, gamma = _bf16(x, gamma)
    total = torch.zeros(x.shape[:-1] + (1,), dtype=torch.bfloat16)
    for j in range(x.shape[-1]):
        total = total + x[..., j:j + 1] * x[..., j:j + 1]
    x32 = x.float()
    y = (x32 / torch.sqrt(total.float() / x.shape[-1] + eps)).to(torch.bfloat16) * gamma
    return y.float().numpy()


def bf16_returns_float32(x, gamma, eps=1e-6):
    """Upcast, normalise, but never cast back."""
    import torch

    x, gamma = _bf16(x, gamma)
    x32 = x.float()
    return (gamma.float() * x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).numpy()


def bf16_eps_outside(x, gamma, eps=1e-6):
    import torch

    x, gamma = _bf16(x, gamma)
    x32 = x.float()
    return ((x32 / (torch.sqrt(x32.pow(2).mean(-1, keepdim=True)) + eps)).to(torch.bfloat16) * gamma).float().numpy()


def bf16_mean_subtracted(x, gamma, eps=1e-6):
    import torch

    x, gamma = _bf16(x, gamma)
    c = x.float() - x.float().mean(-1, keepdim=True)
    return ((c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16) * gamma).float().numpy()


def bf16_gamma_forgotten(x, gamma, eps=1e-6):
    import torch

    x, _ = _bf16(x, gamma)
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16).float().numpy()


def bf16_returns_tensor(x, gamma, eps=1e-6):
    import torch

    x, gamma = _bf16(x, gamma)
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16) * gamma


CORRECT_BF16 = [bf16_llama, bf16_gemma_order, bf16_float64_statistics]
WRONG_BF16 = {
    "no_upcast": (bf16_no_upcast, "reached the division as a bfloat16 number", {}),
    "r_cast_early": (bf16_r_cast_early, "reached the division as a bfloat16 number", {}),
    "running_sum": (bf16_running_sum, "the sum of squares lost terms", {}),
    "returns_float32": (bf16_returns_float32, "not cast back", {}),
    "eps_outside": (bf16_eps_outside, "eps is outside the square root", {}),
    "mean_subtracted": (bf16_mean_subtracted, "you subtracted the mean", {}),
    "gamma_forgotten": (bf16_gamma_forgotten, "gamma was not applied", {}),
    "returns_tensor": (bf16_returns_tensor, "returned torch", {}),
}
