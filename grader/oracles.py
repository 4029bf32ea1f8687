"""Trusted answers from torch (functional ops + autograd), always in float64.

Every check module takes its reference answers from here.

These call PyTorch's own LayerNorm/RMSNorm kernels and autograd; they contain no
hand-written formula of any exercise. torch is imported on first use only, so
notebooks that do not need it do not pay for the import.
"""
from __future__ import annotations

import numpy as np


def _torch():
    import torch

    return torch


_precision = ["float64"]  # torch dtype of the oracles' tensors: float64, except inside ``in_precision``


def _tensor(array: np.ndarray, requires_grad: bool = False):
    torch = _torch()
    return torch.tensor(np.asarray(array, dtype=np.float64), dtype=getattr(torch, _precision[0]),
                        requires_grad=requires_grad)


def _out(tensor) -> np.ndarray:
    return tensor.detach().to(_torch().float64).numpy()


def in_precision(dtype: str, oracle, *args, **kwargs):
    """``oracle(*args, **kwargs)`` with every tensor in torch's ``dtype`` ("float32", "bfloat16"), as float64.

    What the same computation gives in lower precision: a check compares a learner's answer with it to tell
    rounding apart from a formula mistake (``grader.compare.Probe``).
    """
    saved = _precision[0]
    _precision[0] = dtype
    try:
        return np.asarray(oracle(*args, **kwargs), dtype=np.float64)
    finally:
        _precision[0] = saved


def layer_norm(x: np.ndarray, eps: float, gamma: np.ndarray | None = None,
               beta: np.ndarray | None = None) -> np.ndarray:
    """``torch.nn.functional.layer_norm`` over the last axis. x: (..., d) -> (..., d)."""
    torch = _torch()
    d = x.shape[-1]
    weight = None if gamma is None else _tensor(gamma)
    bias = None if beta is None else _tensor(beta)
    with torch.no_grad():
        return _out(torch.nn.functional.layer_norm(_tensor(x), (d,), weight, bias, eps))


def layer_norm_jacobian(x: np.ndarray, eps: float) -> np.ndarray:
    """Autograd Jacobian of LayerNorm without gain/shift at one token. x: (d,) -> (d, d)."""
    torch = _torch()
    d = x.shape[-1]
    return _out(torch.autograd.functional.jacobian(
        lambda t: torch.nn.functional.layer_norm(t, (d,), None, None, eps), _tensor(x)
    ))


def layer_norm_grads(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                     eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Autograd (dx, dgamma, dbeta) of ``sum(dy * layer_norm(x, gamma, beta))``. x, dy: (..., d)."""
    torch = _torch()
    d = x.shape[-1]
    xt, wt, bt = _tensor(x, True), _tensor(gamma, True), _tensor(np.zeros(d), True)
    y = torch.nn.functional.layer_norm(xt, (d,), wt, bt, eps)
    dx, dgamma, dbeta = torch.autograd.grad(y, (xt, wt, bt), grad_outputs=_tensor(dy))
    return _out(dx), _out(dgamma), _out(dbeta)



def rms_norm(x: np.ndarray, eps: float, gamma: np.ndarray | None = None) -> np.ndarray:
    """``torch.nn.functional.rms_norm`` over the last axis. x: (..., d), gamma: (d,) or None."""
    torch = _torch()
    weight = None if gamma is None else _tensor(gamma)
    with torch.no_grad():
        return _out(torch.nn.functional.rms_norm(_tensor(x), (x.shape[-1],), weight, eps))


def rms_norm_grads(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Autograd (dx, dgamma) of ``sum(dy * rms_norm(x, gamma))``. x, dy: (..., d), gamma: (d,)."""
    torch = _torch()
    xt, wt = _tensor(x, True), _tensor(gamma, True)
    y = torch.nn.functional.rms_norm(xt, (x.shape[-1],), wt, eps)
    dx, dgamma = torch.autograd.grad(y, (xt, wt), grad_outputs=_tensor(dy))
    return _out(dx), _out(dgamma)


def batch_norm(x: np.ndarray, eps: float, gamma: np.ndarray | None = None,
               beta: np.ndarray | None = None) -> np.ndarray:
    """``torch.nn.functional.batch_norm(training=True)`` over every axis but the last. x: (..., d).

    torch refuses a batch of one token per feature; stacking the rows twice leaves the mean
    and the biased variance unchanged, so that case is answered from the doubled batch.
    """
    torch = _torch()
    d = x.shape[-1]
    flat = np.asarray(x, dtype=np.float64).reshape(-1, d)
    n = flat.shape[0]
    if n == 1:
        flat = np.concatenate([flat, flat])
    weight = None if gamma is None else _tensor(gamma)
    bias = None if beta is None else _tensor(beta)
    with torch.no_grad():
        y = torch.nn.functional.batch_norm(_tensor(flat), None, None, weight, bias, training=True, eps=eps)
    return _out(y)[:n].reshape(x.shape)


def norm_by_name(name: str, x: np.ndarray, eps: float) -> np.ndarray:
    """'layer_norm', 'rms_norm' (no gain) or 'identity' applied to x: (..., d) -> (..., d)."""
    if name == "layer_norm":
        return layer_norm(x, eps)
    if name == "rms_norm":
        return rms_norm(x, eps)
    if name == "identity":
        return np.array(x, dtype=np.float64, copy=True)
    raise ValueError(f"unknown norm {name!r}; use 'layer_norm', 'rms_norm' or 'identity'")
