"""Mutants of 04_rmsnorm: wrong ``rms_norm`` and ``rms_norm_backward`` with known mistakes, and correct variants.

Most mutants come from two recipes, one per exercise, whose every step can be written
right or wrong (the statistic, its map to r, the gain, the centring; for the backward the
gain in g, the projection term, the power of r, LayerNorm's mean term, dgamma), run in a
few *frames*: vectorised numpy, a loop over the tokens, an upcast to float64 and back,
torch inside converted back, torch autograd of a forward recipe. Each step's mistakes are
written in several ways (x * x, np.square, einsum, the norm squared...). The rest are
small hand-written families (axes, precision, dtype, what the backward returns).
"""
from __future__ import annotations

import itertools

import numpy as np

from tests.diagnosis_harness import solution
from tests.implementations import rmsnorm as impl
from tests.mutants import Correct, mutant

NB = "04_rmsnorm"
FWD, BWD = "rms_norm", "rms_norm_backward"


def _torch():
    import torch

    return torch


# ---------------------------------------------------------------------------- array libraries
class _Np:
    """Per-token reductions over the last axis, numpy; ``how`` picks a way of writing the squares."""

    HOWS = ("mul", "square", "pow", "einsum", "norm")

    @staticmethod
    def mean(a):
        return np.mean(a, axis=-1, keepdims=True)

    @staticmethod
    def sum(a):
        return np.sum(a, axis=-1, keepdims=True)

    sqrt = staticmethod(np.sqrt)

    @staticmethod
    def sumsq(a, how):
        if how == "mul":
            return np.sum(a * a, axis=-1, keepdims=True)
        if how == "square":
            return np.square(a).sum(axis=-1, keepdims=True)
        if how == "pow":
            return np.sum(a ** 2, -1, keepdims=True)
        if how == "einsum":
            return np.einsum("...d,...d->...", a, a)[..., None]
        return np.linalg.norm(a, axis=-1, keepdims=True) ** 2

    @classmethod
    def meansq(cls, a, how):
        if how == "mul":
            return np.mean(a * a, axis=-1, keepdims=True)
        if how == "square":
            return np.square(a).mean(axis=-1, keepdims=True)
        return cls.sumsq(a, how) / a.shape[-1]

    @staticmethod
    def lead_sum(a):
        return np.sum(a, axis=tuple(range(a.ndim - 1)))

    @staticmethod
    def lead_mean(a):
        return np.mean(a, axis=tuple(range(a.ndim - 1)))


class _Torch:
    HOWS = ("mul", "square", "pow", "norm")

    @staticmethod
    def mean(a):
        return a.mean(-1, keepdim=True)

    @staticmethod
    def sum(a):
        return a.sum(-1, keepdim=True)

    @staticmethod
    def sqrt(a):
        return _torch().sqrt(a) if hasattr(a, "dim") else np.sqrt(a)

    @staticmethod
    def sumsq(a, how):
        torch = _torch()
        if how == "mul":
            return (a * a).sum(-1, keepdim=True)
        if how == "square":
            return torch.square(a).sum(dim=-1, keepdim=True)
        if how == "pow":
            return a.pow(2).sum(-1, keepdim=True)
        return torch.linalg.vector_norm(a, dim=-1, keepdim=True) ** 2

    @classmethod
    def meansq(cls, a, how):
        if how == "pow":
            return a.pow(2).mean(-1, keepdim=True)
        return cls.sumsq(a, how) / a.shape[-1]

    @staticmethod
    def lead_sum(a):
        return a.sum(dim=tuple(range(a.dim() - 1))) if a.dim() > 1 else a

    @staticmethod
    def lead_mean(a):
        return a.mean(dim=tuple(range(a.dim() - 1))) if a.dim() > 1 else a


# ---------------------------------------------------------------------------- frames
FRAMES = ("vec", "loop", "upcast", "torch", "torch64")


def _lib(frame):
    return _Torch if frame.startswith("torch") else _Np


def _run_forward(frame, core, x, gamma, eps):
    if frame == "vec":
        return core(x, gamma, eps, _Np)
    if frame == "upcast":
        return np.asarray(core(x.astype(np.float64), gamma.astype(np.float64), eps, _Np)).astype(x.dtype)
    if frame == "loop":
        d = x.shape[-1]
        rows = x.reshape(-1, d)
        out = np.empty_like(rows)
        for t in range(rows.shape[0]):
            out[t] = core(rows[t:t + 1], gamma, eps, _Np)[0]
        return out.reshape(x.shape)
    torch = _torch()
    xt, gt = torch.from_numpy(x), torch.from_numpy(gamma)
    if frame == "torch":
        return core(xt, gt, eps, _Torch).numpy()
    return core(xt.double(), gt.double(), eps, _Torch).to(xt.dtype).numpy()


# ---------------------------------------------------------------------------- the forward recipe
# ids planted by each choice of each step
STAT_IDS = {"ms": (), "sum": ("rms.sum_not_mean",), "var": ("rms.variance_not_mean_square",),
            "unbiased": ("rms.variance_not_mean_square", "rms.unbiased_variance")}
MAP_IDS = {"right": (), "outside": ("rms.eps_outside_sqrt",), "nosqrt": ("rms.sqrt_missing",),
           "ignored": ("rms.eps_ignored",), "nosqrt_ignored": ("rms.sqrt_missing", "rms.eps_ignored"),
           "hard1e-5": ("rms.eps_ignored",), "hard1e-6": ("rms.eps_ignored",), "hard1e-8": ("rms.eps_ignored",)}
GAIN_IDS = {"once": (), "missing": ("rms.gamma_missing",), "twice": ("rms.gamma_twice",)}


def forward_recipe(stat="ms", rmap="right", gain="once", centre=False, how="mul", divide=True):
    def core(x, gamma, eps, L):
        d = x.shape[-1]
        if stat == "ms":
            v = L.meansq(x, how)
        elif stat == "sum":
            v = L.sumsq(x, how)
        else:
            c = x - L.mean(x)
            v = L.meansq(c, how) if stat == "var" else L.sumsq(c, how) / (d - 1)
        if rmap == "right":
            r = L.sqrt(v + eps)
        elif rmap == "outside":
            r = L.sqrt(v) + eps
        elif rmap == "nosqrt":
            r = v + eps
        elif rmap == "ignored":
            r = L.sqrt(v)
        elif rmap == "nosqrt_ignored":
            r = v
        else:  # a hard-coded eps
            r = L.sqrt(v + float(rmap[4:]))
        numerator = x - L.mean(x) if centre else x
        normed = numerator / r if divide else numerator * (1.0 / r)
        if gain == "once":
            return gamma * normed
        if gain == "missing":
            return normed
        return gamma * (gamma * normed)

    return core


def _forward(frame, core):
    def rms_norm(x, gamma, eps=1e-6):
        return _run_forward(frame, core, x, gamma, eps)

    return rms_norm


def _recipe_ids(stat, rmap, gain, centre):
    if centre:
        return ("rms.mean_subtracted",)
    return STAT_IDS[stat] + MAP_IDS[rmap] + GAIN_IDS[gain]


def _forward_family(name, stat="ms", rmap="right", gain="once", centre=False, frames=FRAMES, hows=None, limit=None):
    """Every frame x way of writing the squares, alternating division and multiplication by 1/r."""
    found = []
    for frame in frames:
        for index, how in enumerate(hows or _lib(frame).HOWS):
            core = forward_recipe(stat, rmap, gain, centre, how, divide=index % 2 == 0)
            ids = _recipe_ids(stat, rmap, gain, centre)
            found.append(mutant(NB, FWD, ids, _forward(frame, core), f"fwd/{name}/{frame}/{how}"))
    return found[:limit] if limit else found


MUTANTS = []
# one mistake
MUTANTS += _forward_family("sum", stat="sum")
MUTANTS += _forward_family("std", stat="var")
MUTANTS += _forward_family("unbiased_std", stat="unbiased")
MUTANTS += _forward_family("eps_outside", rmap="outside")
MUTANTS += _forward_family("no_sqrt", rmap="nosqrt")
MUTANTS += _forward_family("eps_ignored", rmap="ignored")
for _eps in ("1e-5", "1e-6", "1e-8"):
    MUTANTS += _forward_family(f"eps_hardcoded_{_eps}", rmap=f"hard{_eps}", frames=("vec", "torch", "loop"),
                               hows=("mul", "pow", "square"))
MUTANTS += _forward_family("gamma_missing", gain="missing")
MUTANTS += _forward_family("gamma_twice", gain="twice")
MUTANTS += _forward_family("layernorm", stat="var", centre=True)
MUTANTS += _forward_family("centred_numerator", stat="ms", centre=True, frames=("vec", "torch", "loop"),
                           hows=("mul", "pow"))
# two (or three) mistakes at once: every one is planted
for (_stat, _map, _gain), _frames in {
        ("sum", "outside", "once"): FRAMES, ("sum", "ignored", "once"): FRAMES, ("sum", "nosqrt", "once"): FRAMES,
        ("var", "outside", "once"): FRAMES, ("var", "ignored", "once"): FRAMES, ("var", "nosqrt", "once"): FRAMES,
        ("unbiased", "ignored", "once"): FRAMES, ("unbiased", "outside", "once"): FRAMES,
        ("ms", "nosqrt_ignored", "once"): FRAMES,
        ("ms", "outside", "missing"): FRAMES, ("ms", "ignored", "twice"): FRAMES, ("sum", "right", "missing"): FRAMES,
        ("var", "right", "twice"): FRAMES, ("ms", "nosqrt", "missing"): FRAMES,
        ("sum", "ignored", "missing"): ("vec", "torch")}.items():
    MUTANTS += _forward_family(f"{_stat}+{_map}+{_gain}", stat=_stat, rmap=_map, gain=_gain, frames=_frames,
                               hows=("mul", "norm"))


# ---------------------------------------------------------------------------- forward: axes
def _np_or_torch(frame, numpy_version, torch_version):
    """A forward written in numpy (vec/upcast) or torch (torch/torch64) from per-frame bodies."""
    def rms_norm(x, gamma, eps=1e-6):
        if frame == "vec":
            return numpy_version(x, gamma, eps)
        if frame == "upcast":
            return numpy_version(x.astype(np.float64), gamma.astype(np.float64), eps).astype(x.dtype)
        torch = _torch()
        xt, gt = torch.from_numpy(x), torch.from_numpy(gamma)
        if frame == "torch":
            return torch_version(xt, gt, eps).numpy()
        return torch_version(xt.double(), gt.double(), eps).to(xt.dtype).numpy()

    return rms_norm


AXIS_FRAMES = ("vec", "upcast", "torch", "torch64")
_axis0 = {
    "mean": (lambda x, g, e: g * x / np.sqrt(np.mean(x * x, axis=0, keepdims=True) + e),
             lambda x, g, e: g * x / (x * x).mean(0, keepdim=True).add(e).sqrt()),
    "no_keepdims": (lambda x, g, e: g * x / np.sqrt(np.mean(x ** 2, axis=0) + e),
                    lambda x, g, e: g * x / _torch().sqrt(x.pow(2).mean(dim=0) + e)),
    "sum_over_n": (lambda x, g, e: g * x / np.sqrt(np.sum(np.square(x), axis=0) / x.shape[0] + e),
                   lambda x, g, e: g * x / _torch().sqrt(_torch().square(x).sum(0) / x.shape[0] + e)),
    "rsqrt": (lambda x, g, e: g * x * (1.0 / np.sqrt(np.mean(x * x, axis=0, keepdims=True) + e)),
              lambda x, g, e: g * x * _torch().rsqrt((x * x).mean(0, keepdim=True) + e)),
    "var_style": (lambda x, g, e: x / np.sqrt((x * x).mean(axis=0) + e) * g,
                  lambda x, g, e: x / ((x * x).mean(0) + e) ** 0.5 * g),
}
for (_name, (_n, _t)), _frame in itertools.product(_axis0.items(), AXIS_FRAMES):
    MUTANTS.append(mutant(NB, FWD, "rms.wrong_axis", _np_or_torch(_frame, _n, _t), f"fwd/axis0/{_name}/{_frame}"))

_global = {
    "mean": (lambda x, g, e: g * x / np.sqrt(np.mean(x * x) + e),
             lambda x, g, e: g * x / _torch().sqrt((x * x).mean() + e)),
    "size": (lambda x, g, e: g * x / np.sqrt(np.sum(x ** 2) / x.size + e),
             lambda x, g, e: g * x / _torch().sqrt(x.pow(2).sum() / x.numel() + e)),
    "norm": (lambda x, g, e: g * x / np.sqrt(np.linalg.norm(x) ** 2 / x.size + e),
             lambda x, g, e: g * x / _torch().sqrt(_torch().linalg.vector_norm(x) ** 2 / x.numel() + e)),
    "axis_none": (lambda x, g, e: g * x / np.sqrt(np.mean(np.square(x), axis=None, keepdims=True) + e),
                  lambda x, g, e: g * x * _torch().rsqrt(_torch().square(x).mean() + e)),
    "flat": (lambda x, g, e: g * x / np.sqrt(x.ravel() @ x.ravel() / x.size + e),
             lambda x, g, e: g * x / ((x.flatten() @ x.flatten()) / x.numel() + e) ** 0.5),
}
for (_name, (_n, _t)), _frame in itertools.product(_global.items(), AXIS_FRAMES):
    MUTANTS.append(mutant(NB, FWD, "rms.global_statistic", _np_or_torch(_frame, _n, _t),
                          f"fwd/global/{_name}/{_frame}"))

_no_keepdims = {
    "mean": (lambda x, g, e: g * x / np.sqrt(np.mean(x * x, axis=-1) + e),
             lambda x, g, e: g * x / _torch().sqrt((x * x).mean(-1) + e)),
    "square": (lambda x, g, e: g * x / np.sqrt(np.square(x).mean(-1) + e),
               lambda x, g, e: g * x / _torch().sqrt(_torch().square(x).mean(dim=-1) + e)),
    "einsum": (lambda x, g, e: g * x / np.sqrt(np.einsum("...d,...d->...", x, x) / x.shape[-1] + e),
               lambda x, g, e: g * x * _torch().rsqrt(x.pow(2).mean(-1) + e)),
    "norm": (lambda x, g, e: g * (x / np.sqrt(np.linalg.norm(x, axis=-1) ** 2 / x.shape[-1] + e)),
             lambda x, g, e: g * (x / _torch().sqrt(_torch().linalg.vector_norm(x, dim=-1) ** 2 / x.shape[-1] + e))),
    "rsqrt": (lambda x, g, e: g * x * (1.0 / np.sqrt(np.mean(x ** 2, axis=-1) + e)),
              lambda x, g, e: x / ((x * x).sum(-1) / x.shape[-1] + e) ** 0.5 * g),
}
for (_name, (_n, _t)), _frame in itertools.product(_no_keepdims.items(), AXIS_FRAMES):
    MUTANTS.append(mutant(NB, FWD, "rms.keepdims_missing", _np_or_torch(_frame, _n, _t),
                          f"fwd/no_keepdims/{_name}/{_frame}"))

# the divisor depends on the feature: no mean at all, the square root taken feature by feature
_elementwise = {
    "sqrt_sq": (lambda x, g, e: g * x / np.sqrt(x * x + e), lambda x, g, e: g * x / _torch().sqrt(x * x + e)),
    "abs": (lambda x, g, e: g * x / (np.abs(x) + e), lambda x, g, e: g * x / (x.abs() + e)),
    "hypot": (lambda x, g, e: g * x / np.hypot(x, np.sqrt(e)), lambda x, g, e: g * x / (x.pow(2) + e).sqrt()),
    "pow": (lambda x, g, e: g * x * (x ** 2 + e) ** -0.5,
            lambda x, g, e: g * x * _torch().rsqrt(_torch().square(x) + e)),
    "no_reduce": (lambda x, g, e: g * x / np.sqrt(np.square(x) + e), lambda x, g, e: g * (x / (x * x + e) ** 0.5)),
}
for (_name, (_n, _t)), _frame in itertools.product(_elementwise.items(), AXIS_FRAMES):
    MUTANTS.append(mutant(NB, FWD, "rms.scale_not_per_token", _np_or_torch(_frame, _n, _t),
                          f"fwd/elementwise/{_name}/{_frame}"))


def _elementwise_loop(x, gamma, eps=1e-6):
    out = np.empty_like(x)
    for j in range(x.shape[-1]):
        out[..., j] = gamma[j] * x[..., j] / np.sqrt(x[..., j] ** 2 + eps)
    return out


MUTANTS.append(mutant(NB, FWD, "rms.scale_not_per_token", _elementwise_loop, "fwd/elementwise/feature_loop"))


# ---------------------------------------------------------------------------- forward: precision and dtype
def _half_statistics(kind, how):
    """The mean of squares in float16 or bfloat16 (``kind``), the rest in x's dtype."""
    def rms_norm(x, gamma, eps=1e-6):
        torch = _torch()
        if kind == "np16":
            x16 = x.astype(np.float16)
            ms = _Np.meansq(x16, how) if how != "dtype" else np.mean(x16 * x16, axis=-1, keepdims=True,
                                                                     dtype=np.float16)
            ms = ms.astype(np.float16).astype(x.dtype)
        else:
            xt = torch.from_numpy(x).to(torch.bfloat16 if kind == "bf16" else torch.float16)
            ms = _Torch.meansq(xt, how if how != "dtype" else "mul").to(torch.float64).numpy().astype(x.dtype)
        return (gamma * x / np.sqrt(ms + eps)).astype(x.dtype)

    return rms_norm


def _half_everything(kind):
    def rms_norm(x, gamma, eps=1e-6):
        torch = _torch()
        if kind == "np16":
            x16, g16 = x.astype(np.float16), gamma.astype(np.float16)
            r = np.sqrt(np.mean(x16 * x16, axis=-1, keepdims=True) + np.float16(eps))
            return (g16 * (x16 / r)).astype(x.dtype)
        dtype = torch.bfloat16 if kind == "bf16" else torch.float16
        xt, gt = torch.from_numpy(x).to(dtype), torch.from_numpy(gamma).to(dtype)
        y = gt * xt * torch.rsqrt(xt.float().pow(2).mean(-1, keepdim=True).to(dtype) + eps)
        return y.to(torch.float64).numpy().astype(x.dtype)

    return rms_norm


def _running_sum(kind):
    """The sum of squares accumulated feature by feature in a half precision."""
    def rms_norm(x, gamma, eps=1e-6):
        torch = _torch()
        d = x.shape[-1]
        if kind == "np16":
            rows = x.reshape(-1, d).astype(np.float16)
            total = np.zeros(rows.shape[0], dtype=np.float16)
            for j in range(d):
                total = total + rows[:, j] * rows[:, j]
            total = total.astype(np.float64)
        else:
            rows = torch.from_numpy(x.reshape(-1, d)).to(torch.bfloat16 if kind == "bf16" else torch.float16)
            total = torch.zeros(rows.shape[0], dtype=rows.dtype)
            for j in range(d):
                total = total + rows[:, j] ** 2
            total = total.to(torch.float64).numpy()
        ms = (total / d).reshape(x.shape[:-1] + (1,))
        return (gamma * x / np.sqrt(ms + eps)).astype(x.dtype)

    return rms_norm


for _kind in ("np16", "bf16", "f16"):
    for _how in ("mul", "square", "pow", "norm", "dtype"):
        if _kind == "np16" and _how == "norm":
            continue
        MUTANTS.append(mutant(NB, FWD, "rms.low_precision_statistics", _half_statistics(_kind, _how),
                              f"fwd/half_statistics/{_kind}/{_how}"))
    MUTANTS.append(mutant(NB, FWD, "rms.low_precision_statistics", _half_everything(_kind), f"fwd/half_all/{_kind}"))
    MUTANTS.append(mutant(NB, FWD, "rms.low_precision_statistics", _running_sum(_kind), f"fwd/running_sum/{_kind}"))
MUTANTS.append(mutant(NB, FWD, "rms.low_precision_statistics", impl.rms_float16_statistics,
                      "fwd/impl/float16_statistics"))
MUTANTS.append(mutant(NB, FWD, "rms.low_precision_statistics", impl.rms_bfloat16_running_sum,
                      "fwd/impl/bfloat16_running_sum"))
MUTANTS.append(mutant(NB, FWD, "rms.low_precision_statistics", impl.rms_bfloat16_mean, "fwd/impl/bfloat16_mean"))


def _float32_part(part, frame):
    """A float64 input computed partly (``part``) in float32, the result cast back to x's dtype."""
    def rms_norm(x, gamma, eps=1e-6):
        torch = _torch()
        if frame == "torch":
            xt = torch.tensor(x, dtype=torch.float32)
            gt = torch.tensor(gamma, dtype=torch.float64 if part == "statistics" else torch.float32)
            if part == "statistics":
                ms = xt.pow(2).mean(-1, keepdim=True).double()
                return (gt * torch.from_numpy(x) / torch.sqrt(ms + eps)).numpy().astype(x.dtype)
            if part == "r":
                r = torch.sqrt(xt.pow(2).mean(-1, keepdim=True) + eps)
                return (gt.double() * torch.from_numpy(x) / r.double()).numpy()
            y = gt * xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + eps)
            return y.numpy().astype(x.dtype)
        x32 = x.astype(np.float32)
        if part == "statistics":
            ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32) if frame == "vec" else \
                np.einsum("...d,...d->...", x32, x32)[..., None] / np.float32(x.shape[-1])
            return gamma * x / np.sqrt(ms.astype(x.dtype) + eps)
        if part == "r":
            r = np.sqrt(np.mean(x32 * x32, axis=-1, keepdims=True) + np.float32(eps))
            return (gamma * x / r).astype(x.dtype)
        if part == "gamma":
            return (gamma.astype(np.float32) * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))).astype(x.dtype)
        g32 = gamma.astype(np.float32)
        return (g32 * x32 / np.sqrt(np.mean(np.square(x32), -1, keepdims=True) + eps)).astype(x.dtype)

    return rms_norm


for _part, _frame in itertools.product(("statistics", "r", "all"), ("vec", "einsum", "torch")):
    MUTANTS.append(mutant(NB, FWD, "rms.float32_inside", _float32_part(_part, _frame), f"fwd/float32/{_part}/{_frame}"))
MUTANTS += [mutant(NB, FWD, "rms.float32_inside", _float32_part("gamma", "vec"), "fwd/float32/gamma/vec"),
            mutant(NB, FWD, "rms.float32_inside", impl.rms_float32_inside, "fwd/impl/float32_inside")]
for _how in _Np.HOWS:
    MUTANTS.append(mutant(NB, FWD, "rms.float32_inside",
                          _forward("vec", lambda x, g, e, L, _h=_how: forward_recipe(how=_h)(
                              x.astype(np.float32), g.astype(np.float32), e, L).astype(x.dtype)),
                          f"fwd/float32/recipe/{_how}"))
for _how in _Torch.HOWS:
    MUTANTS.append(mutant(NB, FWD, "rms.float32_inside",
                          _forward("torch", lambda x, g, e, L, _h=_how: forward_recipe(how=_h)(
                              x.float(), g.float(), e, L).to(x.dtype)), f"fwd/float32/torch_recipe/{_how}"))


def _no_cast_back(way):
    def rms_norm(x, gamma, eps=1e-6):
        torch = _torch()
        if way == "astype":
            x64 = x.astype(np.float64)
            return gamma * x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
        if way == "gamma64":
            return gamma.astype(np.float64) * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))
        if way == "eps64":
            return gamma * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + np.float64(eps))
        if way == "mean_dtype":
            return gamma * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True, dtype=np.float64) + eps)
        if way == "einsum_dtype":
            ms = np.einsum("...d,...d->...", x, x, dtype=np.float64)[..., None] / x.shape[-1]
            return gamma * x * (1.0 / np.sqrt(ms + eps))
        if way == "array_float":
            x64 = np.array(x, dtype=float)
            return gamma * x64 / np.sqrt(np.square(x64).mean(-1, keepdims=True) + eps)
        if way == "torch_double":
            xt = torch.from_numpy(x).double()
            return (torch.from_numpy(gamma) * xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + eps)).numpy()
        if way == "torch_tensor":
            xt = torch.tensor(x, dtype=torch.float64)
            return (torch.tensor(gamma) * xt / xt.pow(2).mean(-1, keepdim=True).add(eps).sqrt()).numpy()
        if way == "loop":
            d = x.shape[-1]
            rows = x.reshape(-1, d)
            out = np.empty(rows.shape)
            for t, row in enumerate(rows):
                out[t] = gamma * row / np.sqrt(np.dot(row, row) / d + eps)
            return out.reshape(x.shape)
        if way == "float_constant":
            return gamma * x / np.sqrt(np.mean(x * x, -1, keepdims=True) * np.float64(1.0) + eps)
        if way == "zeros":
            out = np.zeros(x.shape)
            out[...] = gamma * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
            return out
        if way == "longdouble_back":
            x64 = x.astype(np.float64)
            return (gamma * x64 / np.sqrt(np.mean(x64 ** 2, -1, keepdims=True) + eps)).astype(np.float64)
        if way == "upcast_gamma_torch":
            xt = torch.from_numpy(x)
            return (torch.from_numpy(gamma.astype(np.float64)) * xt
                    / torch.sqrt(xt.pow(2).mean(-1, keepdim=True) + eps)).numpy()
        if way == "linalg":
            x64 = x.astype(float)
            return gamma * x64 / (np.linalg.norm(x64, axis=-1, keepdims=True) ** 2 / x.shape[-1] + eps) ** 0.5
        if way == "reshape":
            d = x.shape[-1]
            rows = x.reshape(-1, d).astype(np.float64)
            return (gamma * rows / np.sqrt(np.mean(rows * rows, axis=1, keepdims=True) + eps)).reshape(x.shape)
        if way == "scale64":
            return np.float64(1.0) * gamma * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
        if way == "where":
            r = np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
            return np.where(r > 0, gamma * x / r, np.float64(0.0))
        if way == "true_divide":
            return np.true_divide(gamma * x, np.sqrt(np.mean(x * x, -1, keepdims=True) + eps), dtype=np.float64)
        if way == "multiply":
            return np.multiply(gamma, x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps), dtype=np.float64)
        if way == "asarray":
            return np.asarray(gamma * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps), dtype=np.float64)
        raise AssertionError(way)

    return rms_norm


for _way in ("astype", "gamma64", "eps64", "mean_dtype", "einsum_dtype", "array_float", "torch_double", "torch_tensor",
             "loop", "float_constant", "zeros", "longdouble_back", "upcast_gamma_torch", "linalg", "reshape", "scale64",
             "where", "true_divide", "multiply", "asarray"):
    MUTANTS.append(mutant(NB, FWD, "rms.no_cast_back", _no_cast_back(_way), f"fwd/no_cast_back/{_way}"))
MUTANTS.append(mutant(NB, FWD, "rms.no_cast_back", impl.rms_no_cast_back, "fwd/impl/no_cast_back"))

# the implementations' wrong forwards with a catalogued id
for _function, _ids in ((impl.rms_mean_subtracted, "rms.mean_subtracted"),
                        (impl.rms_eps_outside, "rms.eps_outside_sqrt"),
                        (impl.rms_eps_ignored, "rms.eps_ignored"), (impl.rms_sum_not_mean, "rms.sum_not_mean"),
                        (impl.rms_l2_normalise, ("rms.sum_not_mean", "rms.eps_ignored")),
                        (impl.rms_no_sqrt, "rms.sqrt_missing"), (impl.rms_std, "rms.variance_not_mean_square"),
                        (impl.rms_gamma_forgotten, "rms.gamma_missing"), (impl.rms_gamma_twice, "rms.gamma_twice"),
                        (impl.rms_axis0, "rms.wrong_axis"), (impl.rms_global, "rms.global_statistic"),
                        (impl.rms_no_keepdims, "rms.keepdims_missing"),
                        (impl.rms_sum_eps_outside, ("rms.sum_not_mean", "rms.eps_outside_sqrt")),
                        (impl.rms_std_eps_outside, ("rms.variance_not_mean_square", "rms.eps_outside_sqrt")),
                        (impl.rms_unbiased_std_eps_ignored, ("rms.variance_not_mean_square", "rms.unbiased_variance",
                                                             "rms.eps_ignored")),
                        (impl.rms_mean_square_eps_ignored, ("rms.sqrt_missing", "rms.eps_ignored"))):
    MUTANTS.append(mutant(NB, FWD, _ids, _function, f"fwd/impl/{_function.__name__}"))


# ---------------------------------------------------------------------------- the backward recipe
R_IDS = {"right": (), "outside": ("rms.eps_outside_sqrt",), "ignored": ("rms.eps_ignored",),
         "sum": ("rms.sum_not_mean",), "nosqrt": ("rms.sqrt_missing",)}
G_IDS = {"once": (), "missing": ("rms.dx_gamma_missing",), "twice": ("rms.dx_gamma_twice",),
         "divided": ("rms.dx_divides_by_gamma",)}
PROJ_IDS = {"mean": (), "none": ("rms.projection_term_missing",), "sum": ("rms.projection_sum_not_mean",),
            "x": ("rms.projection_uses_x",)}
POWER_IDS = {1: (), 0: ("rms.dx_wrong_power_of_r",), 3: ("rms.dx_wrong_power_of_r",), -1: ("rms.dx_wrong_power_of_r",)}
DGAMMA_IDS = {"right": (), "not_summed": ("rms.dgamma_not_summed",), "axis0": ("rms.dgamma_partly_summed",),
              "axis1": ("rms.dgamma_partly_summed",), "uses_x": ("rms.dgamma_uses_x",),
              "times_gamma": ("rms.dgamma_times_gamma",), "mean": ("rms.dgamma_mean",)}


def backward_recipe(rmap="right", gain="once", proj="mean", power=1, mean_term=False, centre=False, form="formula",
                    how="mul"):
    """(dx, per-token dgamma terms) for one token block; the dgamma reduction is the frame's."""
    def core(dy, x, gamma, eps, L):
        d = x.shape[-1]
        if centre:
            xc = x - L.mean(x)
            r = L.sqrt(L.meansq(xc, how) + eps)
            base = xc
        else:
            v = L.sumsq(x, how) if rmap == "sum" else L.meansq(x, how)
            r = {"right": lambda: L.sqrt(v + eps), "outside": lambda: L.sqrt(v) + eps, "ignored": lambda: L.sqrt(v),
                 "sum": lambda: L.sqrt(v + eps), "nosqrt": lambda: v + eps}[rmap]()
            base = x
        x_hat = base / r
        g = {"once": lambda: gamma * dy, "missing": lambda: dy, "twice": lambda: gamma * gamma * dy,
             "divided": lambda: dy / gamma}[gain]()
        if form == "formula":
            if proj == "mean":
                term = L.mean(g * x_hat) * x_hat
            elif proj == "sum":
                term = L.sum(g * x_hat) * x_hat
            elif proj == "x":
                term = L.mean(g * base) * base
            else:
                term = 0.0 * x_hat
            dx = g - term
        else:  # the chain rule through r written out, times r: g - x (g . x) / (d r**2)
            gx = L.sum(g * base)
            if proj == "mean":
                term = base * gx / (d * r * r)
            elif proj == "sum":
                term = base * gx / (r * r)
            elif proj == "x":
                term = base * gx / d
            else:
                term = 0.0 * base
            dx = g - term
        if mean_term:
            dx = dx - L.mean(g)
        dx = dx / r ** power if power != 0 else dx
        return dx, dy * x_hat

    return core


def _reduce_dgamma(terms, mode, L, x, dy, gamma, x_hat_terms):
    if mode == "right":
        return L.lead_sum(terms)
    if mode == "not_summed":
        return terms
    if mode == "axis0":
        return terms.sum(0)
    if mode == "axis1":
        return terms.sum(1)
    if mode == "uses_x":
        return L.lead_sum(dy * x)
    if mode == "times_gamma":
        return L.lead_sum(terms) * gamma
    return L.lead_mean(terms)


def _run_backward(frame, core, dgamma_mode, dy, x, gamma, eps):
    if frame == "loop":
        d = x.shape[-1]
        rows_x, rows_dy = x.reshape(-1, d), dy.reshape(-1, d)
        dx, terms = np.empty_like(rows_x), np.empty_like(rows_x)
        for t in range(rows_x.shape[0]):
            a, b = core(rows_dy[t:t + 1], rows_x[t:t + 1], gamma, eps, _Np)
            dx[t], terms[t] = a[0], b[0]
        dx, terms = dx.reshape(x.shape), terms.reshape(x.shape)
        return dx, _reduce_dgamma(terms, dgamma_mode, _Np, x, dy, gamma, terms)
    if frame in ("vec", "upcast"):
        args = (dy, x, gamma) if frame == "vec" else tuple(a.astype(np.float64) for a in (dy, x, gamma))
        dx, terms = core(*args, eps, _Np)
        dgamma = _reduce_dgamma(terms, dgamma_mode, _Np, args[1], args[0], args[2], terms)
        return np.asarray(dx).astype(x.dtype), np.asarray(dgamma).astype(x.dtype)
    torch = _torch()
    args = tuple(torch.from_numpy(a) for a in (dy, x, gamma))
    if frame == "torch64":
        args = tuple(a.double() for a in args)
    dx, terms = core(*args, eps, _Torch)
    dgamma = _reduce_dgamma(terms, dgamma_mode, _Torch, args[1], args[0], args[2], terms)
    return dx.to(args[1].dtype if frame == "torch" else torch.from_numpy(x).dtype).numpy(), \
        dgamma.to(torch.from_numpy(x).dtype).numpy()


def _backward(frame, core, dgamma_mode="right"):
    def rms_norm_backward(dy, x, gamma, eps=1e-6):
        return _run_backward(frame, core, dgamma_mode, dy, x, gamma, eps)

    return rms_norm_backward


def _autograd_backward(forward_core):
    """torch autograd of a (possibly wrong) forward recipe: the exact gradient of that forward."""
    def rms_norm_backward(dy, x, gamma, eps=1e-6):
        torch = _torch()
        xt = torch.from_numpy(x).clone().requires_grad_(True)
        gt = torch.from_numpy(gamma).clone().requires_grad_(True)
        y = forward_core(xt, gt, eps, _Torch)
        dx, dgamma = torch.autograd.grad(y, (xt, gt), grad_outputs=torch.from_numpy(dy))
        return dx.numpy(), dgamma.numpy()

    return rms_norm_backward


BACKWARD_FRAMES = ("vec", "loop", "upcast", "torch", "torch64")


def _backward_family(name, ids, forms=("formula", "chain"), frames=BACKWARD_FRAMES, hows=("mul", "einsum"),
                     dgamma="right", limit=None, **recipe):
    found = []
    for form, frame, how in itertools.product(forms, frames, hows):
        if frame.startswith("torch") and how == "einsum":
            how = "norm"
        core = backward_recipe(form=form, how=how, **recipe)
        found.append(mutant(NB, BWD, ids, _backward(frame, core, dgamma), f"bwd/{name}/{form}/{frame}/{how}"))
    return found[:limit] if limit else found


for _rmap in ("outside", "ignored", "sum", "nosqrt"):
    MUTANTS += _backward_family(f"r_{_rmap}", R_IDS[_rmap], rmap=_rmap, limit=16)
    _stat, _map = ("sum", "right") if _rmap == "sum" else ("ms", _rmap)
    for _how in _Torch.HOWS:
        MUTANTS.append(mutant(NB, BWD, R_IDS[_rmap], _autograd_backward(forward_recipe(_stat, _map, how=_how)),
                              f"bwd/r_{_rmap}/autograd/{_how}"))
for _gain in ("missing", "twice", "divided"):
    MUTANTS += _backward_family(f"g_{_gain}", G_IDS[_gain], gain=_gain)
for _proj in ("none", "sum", "x"):
    MUTANTS += _backward_family(f"proj_{_proj}", PROJ_IDS[_proj], proj=_proj)
for _power in (0, 3, -1):
    MUTANTS += _backward_family(f"power_{_power}", POWER_IDS[_power], hows=("mul",), power=_power)
MUTANTS += _backward_family("mean_term", ("rms.backward_mean_term",), mean_term=True)
MUTANTS += _backward_family("layernorm", ("rms.backward_mean_term", "rms.mean_subtracted"), mean_term=True, centre=True,
                            forms=("formula",))
for _how in _Torch.HOWS:
    MUTANTS.append(mutant(NB, BWD, ("rms.backward_mean_term", "rms.mean_subtracted"),
                          _autograd_backward(forward_recipe("var", centre=True, how=_how)),
                          f"bwd/layernorm/autograd/{_how}"))
for _mode in ("not_summed", "axis0", "axis1", "uses_x", "times_gamma", "mean"):
    MUTANTS += _backward_family(f"dgamma_{_mode}", DGAMMA_IDS[_mode], dgamma=_mode,
                                limit=None if _mode in ("axis0", "axis1") else 20)
# two mistakes at once: a wrong r and a wrong projection term; a wrong dgamma and a wrong dx
for _recipe in ({"rmap": "outside", "proj": "none"}, {"rmap": "sum", "proj": "none"}, {"rmap": "nosqrt", "proj": "x"},
                {"rmap": "ignored", "proj": "sum"}, {"rmap": "outside", "proj": "sum"},
                {"dgamma": "uses_x", "gain": "missing"}, {"dgamma": "times_gamma", "proj": "none"},
                {"dgamma": "mean", "power": 0}, {"dgamma": "uses_x", "mean_term": True}):
    _ids = (R_IDS[_recipe.get("rmap", "right")] + PROJ_IDS[_recipe.get("proj", "mean")]
            + G_IDS[_recipe.get("gain", "once")] + POWER_IDS[_recipe.get("power", 1)]
            + DGAMMA_IDS[_recipe.get("dgamma", "right")] + (("rms.backward_mean_term",)
                                                            if _recipe.get("mean_term") else ()))
    MUTANTS += _backward_family("+".join(f"{k}={v}" for k, v in _recipe.items()), _ids, frames=("vec", "loop", "torch"),
                                hows=("mul",), **_recipe)


# ---------------------------------------------------------------------------- backward: returns, dtype, precision
def _correct_backward(frame, form="formula", how="mul"):
    return _backward(frame, backward_recipe(form=form, how=how))


def _container(kind, frame, form):
    inner = _correct_backward(frame, form)

    def rms_norm_backward(dy, x, gamma, eps=1e-6):
        dx, dgamma = inner(dy, x, gamma, eps)
        if kind == "list":
            return [dx, dgamma]
        if kind == "dict":
            return {"dx": dx, "dgamma": dgamma}
        if kind == "triple":
            return dx, dgamma, None
        if kind == "dx_only":
            return dx
        if kind == "swapped":
            return dgamma, dx
        return ((dx, dgamma),)

    return rms_norm_backward


for _kind, _frame, _form in itertools.product(("list", "dict", "triple", "dx_only", "swapped", "nested"),
                                              ("vec", "loop", "torch"), ("formula", "chain")):
    MUTANTS.append(mutant(NB, BWD, "rms.backward_not_a_pair", _container(_kind, _frame, _form),
                          f"bwd/returns/{_kind}/{_frame}/{_form}"))


def _backward_dtype(kind, frame, form):
    """A right formula run in another precision: float32 (``f32``), half (``f16``, ``bf16``) or float64 kept."""
    inner = _correct_backward("vec" if frame == "np" else "torch", form)

    def rms_norm_backward(dy, x, gamma, eps=1e-6):
        torch = _torch()
        if kind == "f64":
            return inner(*(a.astype(np.float64) for a in (dy, x, gamma)), eps)
        if frame == "np":
            low = {"f32": np.float32, "f16": np.float16}[kind]
            dx, dgamma = inner(*(a.astype(low) for a in (dy, x, gamma)), eps)
            return dx.astype(x.dtype), dgamma.astype(x.dtype)
        low = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[kind]
        core = backward_recipe(form=form)
        args = tuple(torch.from_numpy(a).to(low) for a in (dy, x, gamma))
        dx, terms = core(*args, eps, _Torch)
        return (dx.to(torch.float64).numpy().astype(x.dtype),
                _Torch.lead_sum(terms).to(torch.float64).numpy().astype(x.dtype))

    return rms_norm_backward


for _frame, _form in itertools.product(("np", "torch"), ("formula", "chain")):
    for _kind in ("f32", "f16", "bf16", "f64"):
        if _frame == "np" and _kind == "bf16":
            continue
        _ids = {"f32": "rms.float32_inside", "f64": "rms.no_cast_back"}.get(_kind, "rms.low_precision_statistics")
        MUTANTS.append(mutant(NB, BWD, _ids, _backward_dtype(_kind, _frame, _form),
                              f"bwd/dtype/{_kind}/{_frame}/{_form}"))


def _backward_precision_extra(kind, variant):
    """More ways of computing (part of) a float64 backward in a lower precision, or a float32 one in float64."""
    def rms_norm_backward(dy, x, gamma, eps=1e-6):
        torch = _torch()
        lead = tuple(range(x.ndim - 1))
        if kind == "f64":
            if variant == "mean_dtype":
                r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True, dtype=np.float64) + eps)
            elif variant == "eps64":
                r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float64(eps))
            elif variant == "gamma64":
                gamma = gamma.astype(np.float64)
                r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
            else:
                x, dy, gamma = (np.array(a, dtype=float) for a in (x, dy, gamma))
                r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
            x_hat = x / r
            g = gamma * dy
            return (g - np.mean(g * x_hat, -1, keepdims=True) * x_hat) / r, np.sum(dy * x_hat, axis=lead)
        low = {"f32": np.float32, "f16": np.float16}[kind]
        if variant == "statistics":
            r = np.sqrt(np.mean(x.astype(low) ** 2, axis=-1, keepdims=True).astype(x.dtype) + eps)
        elif variant == "r":
            r = np.sqrt(np.mean(x.astype(low) ** 2, axis=-1, keepdims=True) + low(eps)).astype(x.dtype)
        else:
            r = torch.sqrt(torch.from_numpy(x).to(torch.float32 if kind == "f32" else torch.float16).pow(2)
                           .mean(-1, keepdim=True) + eps).double().numpy()
        x_hat = x / r
        g = gamma * dy
        return (g - np.mean(g * x_hat, -1, keepdims=True) * x_hat) / r, np.sum(dy * x_hat, axis=lead)

    return rms_norm_backward


for _kind, _variants in (("f64", ("mean_dtype", "eps64", "gamma64", "array")), ("f32", ("statistics", "r", "torch")),
                         ("f16", ("statistics", "r", "torch"))):
    _ids = {"f32": "rms.float32_inside", "f64": "rms.no_cast_back"}.get(_kind, "rms.low_precision_statistics")
    for _variant in _variants:
        MUTANTS.append(mutant(NB, BWD, _ids, _backward_precision_extra(_kind, _variant),
                              f"bwd/dtype/{_kind}/{_variant}"))
for _how in ("mul", "square", "pow", "einsum", "norm"):
    for _kind in ("f32", "f16"):
        _low = {"f32": np.float32, "f16": np.float16}[_kind]
        MUTANTS.append(mutant(NB, BWD, {"f32": "rms.float32_inside"}.get(_kind, "rms.low_precision_statistics"),
                              lambda dy, x, gamma, eps=1e-6, _h=_how, _l=_low: tuple(
                                  a.astype(x.dtype) for a in _backward("loop", backward_recipe(how=_h))(
                                      dy.astype(_l), x.astype(_l), gamma.astype(_l), eps)),
                              f"bwd/dtype/{_kind}/loop/{_how}"))
for _function, _ids in ((impl.backward_layernorm, ("rms.backward_mean_term", "rms.mean_subtracted")),
                        (impl.backward_extra_mean_term, "rms.backward_mean_term"),
                        (impl.backward_no_projection, "rms.projection_term_missing"),
                        (impl.backward_sum_not_mean, "rms.projection_sum_not_mean"),
                        (impl.backward_x_not_x_hat, "rms.projection_uses_x"),
                        (impl.backward_eps_outside, "rms.eps_outside_sqrt"),
                        (impl.backward_eps_ignored, "rms.eps_ignored"),
                        (impl.backward_no_division, "rms.dx_wrong_power_of_r"),
                        (impl.backward_gamma_forgotten, "rms.dx_gamma_missing"),
                        (impl.backward_gamma_twice, "rms.dx_gamma_twice"),
                        (impl.backward_not_summed, "rms.dgamma_not_summed"),
                        (impl.backward_axis0_only, "rms.dgamma_partly_summed"),
                        (impl.backward_dgamma_with_x, "rms.dgamma_uses_x"),
                        (impl.backward_dgamma_times_gamma, "rms.dgamma_times_gamma"),
                        (impl.backward_dgamma_mean, "rms.dgamma_mean"),
                        (impl.backward_float32_inside, "rms.float32_inside"),
                        (impl.backward_no_cast_back, "rms.no_cast_back"),
                        (impl.backward_no_keepdims, "rms.keepdims_missing"),
                        (impl.backward_list, "rms.backward_not_a_pair")):
    MUTANTS.append(mutant(NB, BWD, _ids, _function, f"bwd/impl/{_function.__name__}"))


def _backward_no_keepdims(way):
    def rms_norm_backward(dy, x, gamma, eps=1e-6):
        torch = _torch()
        lead = tuple(range(x.ndim - 1))
        if way.startswith("torch"):
            xt, dyt, gt = (torch.from_numpy(a) for a in (x, dy, gamma))
            r = torch.sqrt(xt.pow(2).mean(-1) + eps) if way == "torch" else torch.rsqrt(xt.pow(2).mean(-1) + eps)
            x_hat = xt / r if way == "torch" else xt * r
            return (gt * dyt).numpy(), x_hat.numpy().sum(axis=lead)
        if way == "r":
            r = np.sqrt(np.mean(x * x, axis=-1) + eps)
        elif way == "einsum":
            r = np.sqrt(np.einsum("...d,...d->...", x, x) / x.shape[-1] + eps)
        elif way == "norm":
            r = np.linalg.norm(x, axis=-1) / np.sqrt(x.shape[-1]) + 0 * eps
            r = np.sqrt(r * r + eps)
        else:
            r = np.sqrt(np.square(x).mean(-1) + eps)
        x_hat = x / r
        g = gamma * dy
        return (g - np.mean(g * x_hat, -1, keepdims=True) * x_hat) / r, np.sum(dy * x_hat, axis=lead)

    return rms_norm_backward


for _way in ("r", "einsum", "norm", "square", "torch", "torch_rsqrt"):
    MUTANTS.append(mutant(NB, BWD, "rms.keepdims_missing", _backward_no_keepdims(_way), f"bwd/no_keepdims/{_way}"))

# a right backward, a wrong forward: the finite differences of the forward disagree
_WRONG_FORWARDS = {"sum": forward_recipe("sum"), "gamma_missing": forward_recipe(gain="missing"),
                   "layernorm": forward_recipe("var", centre=True), "no_sqrt": forward_recipe(rmap="nosqrt"),
                   "gamma_twice": forward_recipe(gain="twice")}
for (_name, _core), (_frame, _form) in itertools.product(
        _WRONG_FORWARDS.items(), (("vec", "formula"), ("loop", "chain"), ("torch", "formula"), ("upcast", "chain"))):
    MUTANTS.append(mutant(NB, BWD, "rms.forward_backward_mismatch", _correct_backward(_frame, _form),
                          f"bwd/wrong_forward/{_name}/{_frame}/{_form}", rms_norm=_forward("vec", _core)))
for _function in (impl.rms_sum_not_mean, impl.rms_no_sqrt, impl.rms_std, impl.rms_gamma_forgotten):
    MUTANTS.append(mutant(NB, BWD, "rms.forward_backward_mismatch", impl.backward_vectorised,
                          f"bwd/wrong_forward/impl/{_function.__name__}", rms_norm=_function))


# ---------------------------------------------------------------------------- guards: mistakes of any exercise
# (catalogued in common; here so that none of them is blamed on an rms.* mistake)
def _dgamma_keepdims(dy, x, gamma, eps=1e-6):
    dx, _ = impl.backward_vectorised(dy, x, gamma, eps)
    return dx, np.sum(dy * x / impl._r(x, eps), axis=tuple(range(x.ndim - 1)), keepdims=True)


def _dx_float32(dy, x, gamma, eps=1e-6):
    dx, dgamma = impl.backward_vectorised(dy, x, gamma, eps)
    return dx.astype(np.float32), dgamma


MUTANTS += [
    mutant(NB, BWD, "common.wrong_shape", _dgamma_keepdims, "bwd/common/dgamma_keepdims"),
    mutant(NB, BWD, "common.wrong_dtype", _dx_float32, "bwd/common/dx_float32"),
    mutant(NB, FWD, "common.wrong_shape", lambda x, gamma, eps=1e-6: impl.rms_vectorised(x, gamma, eps)[None],
           "fwd/common/extra_axis"),
    mutant(NB, FWD, "common.wrong_dtype", impl.rms_returns_float32, "fwd/common/returns_float32"),
    mutant(NB, FWD, "common.modified_input", impl.rms_in_place, "fwd/common/in_place"),
    mutant(NB, FWD, "common.torch_returned", impl.rms_returns_tensor, "fwd/common/torch_tensor"),
    mutant(NB, FWD, "common.fixed_rank", impl.rms_axis1, "fwd/common/axis1"),
    mutant(NB, FWD, "common.fixed_rank", impl.rms_unpacks_three_axes, "fwd/common/unpacks_three_axes"),
    mutant(NB, BWD, "common.fixed_rank", impl.backward_unpacks_two_axes, "bwd/common/unpacks_two_axes"),
]


# ---------------------------------------------------------------------------- correct implementations
def _forward_reciprocal(x, gamma, eps=1e-6):
    return gamma * x * np.reciprocal(np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps))


def _forward_mean_dtype(x, gamma, eps=1e-6):
    """The statistics accumulated in float64 whatever x is, the result cast back."""
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float64)
    return (gamma * (x / np.sqrt(ms + eps))).astype(x.dtype)


def _forward_norm(x, gamma, eps=1e-6):
    rms = np.linalg.norm(x, axis=-1, keepdims=True) / x.shape[-1] ** 0.5  # np.sqrt(d) would be a float64
    return gamma * x / np.sqrt(rms * rms + eps)


def _backward_jacobian(dy, x, gamma, eps=1e-6):
    """Token by token through the (d, d) Jacobian of x / r: (I - x_hat x_hat^T / d) / r."""
    d = x.shape[-1]
    rows_x, rows_dy = x.reshape(-1, d), dy.reshape(-1, d)
    dx = np.empty_like(rows_x)
    dgamma = np.zeros(d, dtype=x.dtype)
    for t in range(rows_x.shape[0]):
        r = np.sqrt(rows_x[t] @ rows_x[t] / d + eps)
        x_hat = rows_x[t] / r
        jacobian = (np.eye(d, dtype=x.dtype) - np.outer(x_hat, x_hat) / d) / r
        dx[t] = jacobian.T @ (gamma * rows_dy[t])
        dgamma += rows_dy[t] * x_hat
    return dx.reshape(x.shape), dgamma


def _backward_inv_r(dy, x, gamma, eps=1e-6):
    inv_r = 1.0 / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + eps)
    x_hat = x * inv_r
    g = dy * gamma
    dx = inv_r * (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))
    return dx, (dy * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)
def _correct_forward(frame, how, divide):
    return _forward(frame, forward_recipe(how=how, divide=divide))


CORRECT = [Correct(NB, FWD, solution(NB, FWD), "fwd/source_solution"),
           Correct(NB, BWD, solution(NB, BWD), "bwd/source_solution")]
CORRECT += [Correct(NB, FWD, f, f"fwd/impl/{f.__name__}") for f in impl.CORRECT_FORWARDS]
CORRECT += [Correct(NB, BWD, f, f"bwd/impl/{f.__name__}") for f in impl.CORRECT_BACKWARDS]
for _frame in FRAMES:
    for _index, _how in enumerate(_lib(_frame).HOWS):
        CORRECT.append(Correct(NB, FWD, _correct_forward(_frame, _how, _index % 2 == 1), f"fwd/recipe/{_frame}/{_how}"))
for _frame, _form in itertools.product(BACKWARD_FRAMES, ("formula", "chain")):
    CORRECT.append(Correct(NB, BWD, _correct_backward(_frame, _form, "mul" if _form == "formula" else "pow"),
                           f"bwd/recipe/{_frame}/{_form}"))
for _how in _Torch.HOWS:
    CORRECT.append(Correct(NB, BWD, _autograd_backward(forward_recipe(how=_how)), f"bwd/autograd/{_how}"))
CORRECT += [Correct(NB, FWD, f, f"fwd/extra/{f.__name__.lstrip('_')}")
            for f in (_forward_reciprocal, _forward_mean_dtype, _forward_norm)]
CORRECT += [Correct(NB, BWD, f, f"bwd/extra/{f.__name__.lstrip('_')}") for f in (_backward_jacobian, _backward_inv_r)]
# a right backward checked against another right forward
CORRECT.append(Correct(NB, BWD, impl.backward_per_token, "bwd/impl/per_token+forward_per_token",
                       {"rms_norm": impl.rms_per_token}))
CORRECT.append(Correct(NB, BWD, _correct_backward("torch", "chain"), "bwd/recipe/torch/chain+forward_torch",
                       {"rms_norm": impl.rms_torch}))



def _uncast(function):
    """The same computation with its float32 result left as it is (float32 values near the bfloat16 ones)."""
    def rms_norm_bf16(x, gamma, eps=1e-6):
        y = function(x, gamma, eps)
        wobble = np.random.default_rng(0).uniform(-1.0, 1.0, y.shape).astype(np.float32) * np.float32(2.0 ** -11)
        return y + y * wobble

    return rms_norm_bf16

# ---------------------------------------------------------------------------- rms_norm_bf16
BF16 = "rms_norm_bf16"
# where the statistics are computed: float32 or float64 is right; the others round them to bfloat16
BF16_PRECISION_IDS = {"f32": (), "f64": (), "bf16_ops": ("rms.no_upcast",), "r_early": ("rms.no_upcast",),
                      "inv_early": ("rms.no_upcast",), "ms_early": ("rms.no_upcast",),
                      "running_sum": ("rms.low_precision_statistics",)}
BF16_MISTAKE_IDS = {None: (), "eps_outside": ("rms.eps_outside_sqrt",), "eps_ignored": ("rms.eps_ignored",),
                    "centred": ("rms.mean_subtracted",), "gamma_missing": ("rms.gamma_missing",),
                    "sum": ("rms.sum_not_mean",), "no_cast_back": ("rms.no_cast_back",)}


def bf16_recipe(precision="f32", order="llama", write="rsqrt", mistake=None):
    """An rms_norm_bf16: the stub's conversions around a body whose every step can go right or wrong."""
    def rms_norm_bf16(x, gamma, eps=1e-6):
        torch = _torch()
        x, gamma = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(gamma).to(torch.bfloat16)
        wide = {"f64": torch.float64, "bf16_ops": torch.bfloat16}.get(precision, torch.float32)
        xw = x.to(wide)
        if mistake == "centred":
            xw = xw - xw.mean(-1, keepdim=True)
        if precision == "running_sum":
            total = torch.zeros(x.shape[:-1] + (1,), dtype=torch.bfloat16)
            for j in range(x.shape[-1]):
                total = total + x[..., j:j + 1] * x[..., j:j + 1]
            ms = total.float() / x.shape[-1]
        elif write == "norm":
            ms = torch.linalg.vector_norm(xw, dim=-1, keepdim=True) ** 2 / x.shape[-1]
        else:
            ms = (xw * xw).mean(-1, keepdim=True) if write == "rsqrt" else xw.pow(2).sum(-1, keepdim=True) / x.shape[-1]
        if mistake == "sum":
            ms = ms * x.shape[-1]
        if precision == "ms_early":
            ms = ms.to(torch.bfloat16)
        if mistake == "eps_outside":
            r = torch.sqrt(ms) + eps
        elif mistake == "eps_ignored":
            r = torch.sqrt(ms)
        else:
            r = torch.sqrt(ms + eps)
        if precision == "r_early":
            r = r.to(torch.bfloat16)
        inv = 1.0 / r
        if precision == "inv_early":
            inv = inv.to(torch.bfloat16)
        normed = xw * inv if write == "rsqrt" else xw / (1.0 / inv)
        g = torch.ones_like(gamma) if mistake == "gamma_missing" else gamma
        if mistake == "no_cast_back":
            y = normed.float() * g.float()
        elif order == "gemma":
            out_dtype = torch.float64 if precision == "f64" else normed.dtype
            y = (normed.to(out_dtype) * g.to(normed.dtype)).to(torch.bfloat16)
        else:
            y = normed.to(torch.bfloat16) * g
        return y.float().numpy()

    return rms_norm_bf16


def _bf16_family(name, precision="f32", mistake=None, orders=("llama", "gemma"), writes=("rsqrt", "div", "norm")):
    found = []
    for order, write in itertools.product(orders, writes):
        ids = BF16_PRECISION_IDS[precision] + BF16_MISTAKE_IDS[mistake]
        found.append(mutant(NB, BF16, ids, bf16_recipe(precision, order, write, mistake),
                            f"bf16/{name}/{order}/{write}"))
    return found


for _precision in ("bf16_ops", "r_early", "inv_early", "ms_early"):
    MUTANTS += _bf16_family(_precision, precision=_precision)
MUTANTS += _bf16_family("running_sum", precision="running_sum", writes=("rsqrt",))
for _mistake in ("eps_outside", "eps_ignored", "centred", "gamma_missing", "sum", "no_cast_back"):
    MUTANTS += _bf16_family(_mistake, mistake=_mistake)
# two mistakes: a formula mistake with the cast back forgotten
for _mistake in ("eps_outside", "eps_ignored", "centred", "gamma_missing"):
    for _order in ("llama", "gemma"):
        MUTANTS.append(mutant(NB, BF16, BF16_MISTAKE_IDS[_mistake] + ("rms.no_cast_back",),
                              _uncast(bf16_recipe(mistake=_mistake, order=_order)),
                              f"bf16/{_mistake}+no_cast_back/{_order}"))
for _function, _ids in ((impl.bf16_no_upcast, "rms.no_upcast"), (impl.bf16_r_cast_early, "rms.no_upcast"),
                        (impl.bf16_running_sum, "rms.low_precision_statistics"),
                        (impl.bf16_returns_float32, "rms.no_cast_back"), (impl.bf16_eps_outside,
                                                                          "rms.eps_outside_sqrt"),
                        (impl.bf16_mean_subtracted, "rms.mean_subtracted"),
                        (impl.bf16_gamma_forgotten, "rms.gamma_missing"),
                        (impl.bf16_returns_tensor, "common.torch_returned")):
    MUTANTS.append(mutant(NB, BF16, _ids, _function, f"bf16/impl/{_function.__name__}"))

CORRECT += [Correct(NB, BF16, solution(NB, BF16), "bf16/source_solution")]
CORRECT += [Correct(NB, BF16, f, f"bf16/impl/{f.__name__}") for f in impl.CORRECT_BF16]
for _precision, _order, _write in itertools.product(("f32", "f64"), ("llama", "gemma"), ("rsqrt", "div", "norm")):
    CORRECT.append(Correct(NB, BF16, bf16_recipe(_precision, _order, _write),
                           f"bf16/recipe/{_precision}/{_order}/{_write}"))

_labels = [m.label for m in MUTANTS] + [c.label for c in CORRECT]
assert len(_labels) == len(set(_labels)), [label for label in _labels if _labels.count(label) > 1]
