"""Trusted answers from torch (functional ops + autograd), always in float64.

These call PyTorch's own LayerNorm/RMSNorm kernels and autograd; they contain no
hand-written formula of any exercise. torch is imported on first use only, so
notebooks that do not need it do not pay for the import.
"""
from __future__ import annotations

import numpy as np


def _torch():
    import torch

    return torch


def _tensor(array: np.ndarray, requires_grad: bool = False):
    torch = _torch()
    return torch.tensor(np.asarray(array, dtype=np.float64), dtype=torch.float64, requires_grad=requires_grad)


def layer_norm(x: np.ndarray, eps: float, gamma: np.ndarray | None = None, beta: np.ndarray | None = None) -> np.ndarray:
    """``torch.nn.functional.layer_norm`` over the last axis. x: (..., d) -> (..., d)."""
    torch = _torch()
    d = x.shape[-1]
    weight = None if gamma is None else _tensor(gamma)
    bias = None if beta is None else _tensor(beta)
    with torch.no_grad():
        return torch.nn.functional.layer_norm(_tensor(x), (d,), weight, bias, eps).numpy()


def layer_norm_jacobian(x: np.ndarray, eps: float) -> np.ndarray:
    """Autograd Jacobian of LayerNorm without gain/shift at one token. x: (d,) -> (d, d)."""
    torch = _torch()
    d = x.shape[-1]
    return torch.autograd.functional.jacobian(
        lambda t: torch.nn.functional.layer_norm(t, (d,), None, None, eps), _tensor(x)
    ).numpy()


def layer_norm_grads(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Autograd (dx, dgamma, dbeta) of ``sum(dy * layer_norm(x, gamma, beta))``. x, dy: (..., d)."""
    torch = _torch()
    d = x.shape[-1]
    xt, wt, bt = _tensor(x, True), _tensor(gamma, True), _tensor(np.zeros(d), True)
    y = torch.nn.functional.layer_norm(xt, (d,), wt, bt, eps)
    dx, dgamma, dbeta = torch.autograd.grad(y, (xt, wt, bt), grad_outputs=_tensor(dy))
    return dx.numpy(), dgamma.numpy(), dbeta.numpy()

