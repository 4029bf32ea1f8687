"""Implementations of the 03_backward exercises: several correct, many classic mistakes.

Each WRONG_* table maps a name to (function, substring the diagnosis must contain,
keyword arguments for the check that exposes it).
"""
import numpy as np


def _stats(x, eps, axis=-1, ddof=0):
    mu = x.mean(axis=axis, keepdims=True)
    s = np.sqrt(x.var(axis=axis, keepdims=True, ddof=ddof) + eps)
    return mu, s, (x - mu) / s


# ---------------------------------------------------------------- layer_norm_jacobian
def jacobian_matrix_form(x, eps=1e-5):
    d = x.size
    _, s, xh = _stats(x, eps)
    return (np.eye(d) - 1.0 / d - np.outer(xh, xh) / d) / s


def jacobian_entrywise(x, eps=1e-5):
    """Quotient rule entry by entry, the way the derivation reads."""
    d = x.size
    mu = sum(x) / d
    var = sum((xi - mu) ** 2 for xi in x) / d
    s = (var + eps) ** 0.5
    J = np.empty((d, d))
    for i in range(d):
        for j in range(d):
            dnum = (1.0 if i == j else 0.0) - 1.0 / d
            ds = (x[j] - mu) / (d * s)
            J[i, j] = dnum / s - (x[i] - mu) * ds / s**2
    return J


def jacobian_via_identity_minus_projectors(x, eps=1e-5):
    d = x.size
    _, s, xh = _stats(x, eps)
    u = np.ones(d) / np.sqrt(d)
    w = xh / np.sqrt(d)
    return (np.eye(d) - u[:, None] * u[None, :] - w[:, None] * w[None, :]) / s


def jacobian_no_mean_term(x, eps=1e-5):
    d = x.size
    _, s, xh = _stats(x, eps)
    return (np.eye(d) - np.outer(xh, xh) / d) / s


def jacobian_no_variance_term(x, eps=1e-5):
    d = x.size
    _, s, _ = _stats(x, eps)
    return (np.eye(d) - 1.0 / d) / s


def jacobian_no_division(x, eps=1e-5):
    d = x.size
    _, _, xh = _stats(x, eps)
    return np.eye(d) - 1.0 / d - np.outer(xh, xh) / d


def jacobian_unbiased(x, eps=1e-5):
    d = x.size
    _, s, xh = _stats(x, eps, ddof=1)
    return (np.eye(d) - 1.0 / d - np.outer(xh, xh) / d) / s


def jacobian_eps_ignored(x, eps=1e-5):
    return jacobian_matrix_form(x, eps=0.0)


def jacobian_x_instead_of_x_hat(x, eps=1e-5):
    d = x.size
    _, s, _ = _stats(x, eps)
    return (np.eye(d) - 1.0 / d - np.outer(x, x) / d) / s


def jacobian_float32(x, eps=1e-5):
    return jacobian_matrix_form(x, eps).astype(np.float32)


def jacobian_list(x, eps=1e-5):
    return jacobian_matrix_form(x, eps).tolist()


def jacobian_eps_outside_sqrt(x, eps=1e-5):
    d = x.size
    s = x.std() + eps
    xh = (x - x.mean()) / s
    return (np.eye(d) - 1.0 / d - np.outer(xh, xh) / d) / s


def jacobian_unbiased_eps_outside(x, eps=1e-5):
    d = x.size
    s = x.std(ddof=1) + eps
    xh = (x - x.mean()) / s
    return (np.eye(d) - 1.0 / d - np.outer(xh, xh) / d) / s


def jacobian_unbiased_eps_ignored(x, eps=1e-5):
    return jacobian_unbiased(x, eps=0.0)


UNBIASED, OUTSIDE, IGNORED = "unbiased variance", "outside the square root", "eps is ignored"
ALL_NAMED = [UNBIASED, OUTSIDE, IGNORED, "eps = 0", "did not divide by s"]
MISTAKE_COMBINATIONS_JACOBIAN = {
    "unbiased + eps outside": (jacobian_unbiased_eps_outside, [UNBIASED, OUTSIDE], {"eps": 1.0}),
    "unbiased + eps ignored": (jacobian_unbiased_eps_ignored, [UNBIASED, IGNORED], {"eps": 1.0}),
    "eps outside": (jacobian_eps_outside_sqrt, [OUTSIDE], {"eps": 1.0}),
    "unbiased": (jacobian_unbiased, [UNBIASED], {"eps": 1.0}),
}


CORRECT_JACOBIANS = [jacobian_matrix_form, jacobian_entrywise, jacobian_via_identity_minus_projectors]
WRONG_JACOBIANS = {
    "no mean term": (jacobian_no_mean_term, "do not sum to zero", {}),
    "no variance term": (jacobian_no_variance_term, "-(1/d) x_hat x_hat^T", {}),
    "no division by s": (jacobian_no_division, "did not divide by s", {}),
    "unbiased variance": (jacobian_unbiased, "unbiased variance (dividing by d - 1", {}),
    "eps ignored": (jacobian_eps_ignored, "eps = 0", {"eps": 1.0}),
    "x instead of x_hat": (jacobian_x_instead_of_x_hat, "instead of x_hat", {}),
    "float32 result": (jacobian_float32, "dtype float32", {}),
    "list result": (jacobian_list, "builtins.list", {}),
    "eps outside sqrt": (jacobian_eps_outside_sqrt, "outside the square root", {"eps": 1.0}),
}


# ---------------------------------------------------------------- layer_norm_vjp
def vjp_means(x, g, eps=1e-5):
    _, s, xh = _stats(x, eps)
    return (g - g.mean() - np.mean(g * xh) * xh) / s


def vjp_sums(x, g, eps=1e-5):
    """The BatchNorm-style form: (d g - sum g - x_hat sum(x_hat g)) / (d s)."""
    d = x.size
    _, s, xh = _stats(x, eps)
    return (d * g - g.sum() - xh * np.dot(xh, g)) / (d * s)


def vjp_two_projections(x, g, eps=1e-5):
    """Remove the components along u = 1/sqrt(d) and w = x_hat/|x_hat|... as in the derivation."""
    d = x.size
    _, s, xh = _stats(x, eps)
    u = np.ones(d) / np.sqrt(d)
    w = xh / np.sqrt(d)
    return (g - u * (u @ g) - w * (w @ g)) / s


def vjp_no_mean_term(x, g, eps=1e-5):
    _, s, xh = _stats(x, eps)
    return (g - np.mean(g * xh) * xh) / s


def vjp_sum_not_mean(x, g, eps=1e-5):
    _, s, xh = _stats(x, eps)
    return (g - g.sum() - np.mean(g * xh) * xh) / s


def vjp_no_x_hat_term(x, g, eps=1e-5):
    _, s, _ = _stats(x, eps)
    return (g - g.mean()) / s


def vjp_x_instead_of_x_hat(x, g, eps=1e-5):
    _, s, _ = _stats(x, eps)
    return (g - g.mean() - np.mean(g * x) * x) / s


def vjp_no_division(x, g, eps=1e-5):
    _, _, xh = _stats(x, eps)
    return g - g.mean() - np.mean(g * xh) * xh


def vjp_eps_ignored(x, g, eps=1e-5):
    return vjp_means(x, g, eps=0.0)


def vjp_identity(x, g, eps=1e-5):
    _, s, _ = _stats(x, eps)
    return g / s


def vjp_builds_jacobian(x, g, eps=1e-5):
    return jacobian_matrix_form(x, eps).T @ g


def vjp_torch_vectors(x, g, eps=1e-5):
    """The vector formula in torch: O(d) memory, allocated by torch (tracemalloc cannot see it)."""
    import torch

    xt, gt = torch.from_numpy(x), torch.from_numpy(g)
    mu = xt.mean()
    s = torch.sqrt(((xt - mu) ** 2).mean() + eps)
    xh = (xt - mu) / s
    return ((gt - gt.mean() - (gt * xh).mean() * xh) / s).numpy()


def vjp_torch_autograd(x, g, eps=1e-5):
    """Autograd through a hand-written forward: its backward is O(d) too."""
    import torch

    xt = torch.tensor(x, requires_grad=True)
    mu = xt.mean()
    y = (xt - mu) / torch.sqrt(((xt - mu) ** 2).mean() + eps)
    (dx,) = torch.autograd.grad(y, xt, grad_outputs=torch.from_numpy(g))
    return dx.numpy()


def vjp_torch_builds_jacobian(x, g, eps=1e-5):
    """The full (d, d) Jacobian in torch, then J^T g: right values, d*d memory that tracemalloc misses."""
    import torch

    d = x.size
    xt = torch.from_numpy(x)
    mu = xt.mean()
    s = torch.sqrt(((xt - mu) ** 2).mean() + eps)
    xh = (xt - mu) / s
    J = (torch.eye(d, dtype=torch.float64) - 1.0 / d - torch.outer(xh, xh) / d) / s
    return (J.T @ torch.from_numpy(g)).numpy()


CORRECT_VJPS = [vjp_means, vjp_sums, vjp_two_projections, vjp_torch_vectors, vjp_torch_autograd]
WRONG_VJPS = {
    "no mean term": (vjp_no_mean_term, "does not sum to zero", {}),
    "sum instead of mean": (vjp_sum_not_mean, "does not sum to zero", {}),
    "no x_hat term": (vjp_no_x_hat_term, "component along x_hat", {}),
    "x instead of x_hat": (vjp_x_instead_of_x_hat, "x instead of x_hat", {}),
    "no division by s": (vjp_no_division, "did not divide by s", {}),
    "eps ignored": (vjp_eps_ignored, "eps = 0", {"eps": 1.0}),
    "returns g / s": (vjp_identity, "without removing its mean", {}),
}


# ---------------------------------------------------------------- layer_norm_backward
def backward_vectorised(dy, x, gamma, eps=1e-5):
    _, s, xh = _stats(x, eps)
    g = gamma * dy
    dx = (g - g.mean(-1, keepdims=True) - np.mean(g * xh, -1, keepdims=True) * xh) / s
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xh).sum(lead), dy.sum(lead)


def backward_per_token(dy, x, gamma, eps=1e-5):
    """Flatten the leading axes and apply the one-token VJP row by row."""
    d = x.shape[-1]
    rows_x, rows_dy = x.reshape(-1, d), dy.reshape(-1, d)
    dx = np.stack([vjp_sums(xr, gamma * dyr, eps) for xr, dyr in zip(rows_x, rows_dy, strict=True)])
    x_hat = np.stack([(xr - xr.mean()) / np.sqrt(xr.var() + eps) for xr in rows_x])
    return dx.reshape(x.shape), np.einsum("td,td->d", rows_dy, x_hat), rows_dy.sum(axis=0)


def backward_not_summed(dy, x, gamma, eps=1e-5):
    dx, _, dbeta = backward_vectorised(dy, x, gamma, eps)
    _, _, xh = _stats(x, eps)
    return dx, dy * xh, dbeta


def backward_first_axis_only(dy, x, gamma, eps=1e-5):
    dx, _, _ = backward_vectorised(dy, x, gamma, eps)
    _, _, xh = _stats(x, eps)
    return dx, (dy * xh).sum(0), dy.sum(0)


def backward_gamma_forgotten(dy, x, gamma, eps=1e-5):
    _, dgamma, dbeta = backward_vectorised(dy, x, gamma, eps)
    dx, _, _ = backward_vectorised(dy, x, np.ones_like(gamma), eps)
    return dx, dgamma, dbeta


def backward_dgamma_with_x(dy, x, gamma, eps=1e-5):
    dx, _, dbeta = backward_vectorised(dy, x, gamma, eps)
    return dx, (dy * x).sum(tuple(range(x.ndim - 1))), dbeta


def backward_dbeta_mean(dy, x, gamma, eps=1e-5):
    dx, dgamma, _ = backward_vectorised(dy, x, gamma, eps)
    return dx, dgamma, dy.mean(tuple(range(x.ndim - 1)))


def backward_dgamma_times_gamma(dy, x, gamma, eps=1e-5):
    dx, dgamma, dbeta = backward_vectorised(dy, x, gamma, eps)
    return dx, dgamma * gamma, dbeta


def backward_no_mean_term(dy, x, gamma, eps=1e-5):
    _, s, xh = _stats(x, eps)
    g = gamma * dy
    dx = (g - np.mean(g * xh, -1, keepdims=True) * xh) / s
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xh).sum(lead), dy.sum(lead)


def backward_list_result(dy, x, gamma, eps=1e-5):
    return list(backward_vectorised(dy, x, gamma, eps))


CORRECT_BACKWARDS = [backward_vectorised, backward_per_token]
WRONG_BACKWARDS = {
    "dgamma not summed": (backward_not_summed, "not summed over the tokens", {}),
    "summed over axis 0 only": (backward_first_axis_only, "axis 0 only", {}),
    "gamma forgotten in dx": (backward_gamma_forgotten, "ignores gamma", {}),
    "dgamma uses x": (backward_dgamma_with_x, "used x instead of x_hat", {}),
    "dbeta is a mean": (backward_dbeta_mean, "dbeta is the sum", {}),
    "dgamma times gamma": (backward_dgamma_times_gamma, "multiplied by gamma", {}),
    "dx without mean term": (backward_no_mean_term, "should sum to zero", {}),
    "list instead of tuple": (backward_list_result, "should return a tuple", {}),
}


# ---------------------------------------------------------------- right maths, fixed number of axes
def backward_unpacks_two_axes(dy, x, gamma, eps=1e-5):
    """Written for (N, d): the sums over tokens are axis=0."""
    N, d = x.shape
    _, s, xh = _stats(x, eps)
    g = gamma * dy
    dx = (g - g.mean(1, keepdims=True) - np.mean(g * xh, 1, keepdims=True) * xh) / s
    return dx, (dy * xh).sum(0), dy.sum(0)


def backward_torch_three_axes(dy, x, gamma, eps=1e-5):
    """Written for (B, T, d) torch code: sums over dims (0, 1)."""
    import torch

    xt, dyt = torch.from_numpy(x), torch.from_numpy(dy)
    mu = xt.mean(-1, keepdim=True)
    s = torch.sqrt(((xt - mu) ** 2).mean(-1, keepdim=True) + eps)
    xh = (xt - mu) / s
    g = torch.from_numpy(gamma) * dyt
    dx = (g - g.mean(-1, keepdim=True) - (g * xh).mean(-1, keepdim=True) * xh) / s
    return dx.numpy(), (dyt * xh).sum(dim=(0, 1)).numpy(), dyt.sum(dim=(0, 1)).numpy()


# (function, substrings the diagnosis must contain, keyword arguments for the check)
SHAPE_LIMITED_BACKWARDS = {
    "unpacks N, d": (backward_unpacks_two_axes, ["ValueError", "too many values to unpack", "any shape (..., d)"], {}),
    "torch dims (0, 1)": (backward_torch_three_axes, ["IndexError", "Dimension out of range", "any shape (..., d)"],
                          {"shape": (8,)}),
}
