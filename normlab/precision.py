"""Numerical details of RMSNorm in real code, for notebook 04.

* A running sum in bfloat16 stalls. bfloat16 keeps 8 significant bits, so next to a total
  S the spacing between representable numbers is S/128 to S/256; a term smaller than half
  of that spacing, about S/256, is rounded away. Summing d = 4096 squares in a bfloat16
  accumulator therefore stops growing long before the true total.
* The fix used by LLaMA's reference RMSNorm and by fused kernels: upcast to float32,
  compute the statistics and normalise there, cast the result back.
* Gemma writes the gain as (1 + gamma) with gamma starting at 0: the same function,
  a different point for weight decay to pull towards.
* eps = 1e-5 and eps = 1e-6 are both common; eps outside the square root is a different
  function. Both matter only when the mean square gets near eps.

Every function is small and pure and returns numbers (numpy arrays and floats) for the
notebook to print or plot. torch is used where bfloat16 arithmetic is needed. The norms
themselves come from torch (``grader.oracles`` in float64, ``F.rms_norm`` for the upcast
recipe): nothing here is an answer to the notebook's exercises.

Example::

    from normlab.precision import bf16_running_sum, bf16_rms_norm_errors
    r = bf16_running_sum()                       # 4096 squares of N(0, 1) samples
    print(r["bf16"][-1], r["fp32"][-1])          # about 2000 against about 4000
    print(bf16_rms_norm_errors())                # the stalled sum, and the float32 fix
"""

from __future__ import annotations

import numpy as np
import torch

from grader import oracles

__all__ = [
    "bf16_running_sum",
    "bf16_rms_norm_errors",
    "gemma_parameterisation",
    "eps_differences",
]


def _rms_norm64(x: np.ndarray, eps: float) -> np.ndarray:
    """float64 RMSNorm without gain, from torch. x: (..., d) -> (..., d)."""
    return oracles.rms_norm(np.asarray(x, dtype=np.float64), eps)


def _layer_norm64(x: np.ndarray, eps: float) -> np.ndarray:
    """float64 LayerNorm without gain or shift, from torch. x: (..., d) -> (..., d)."""
    return oracles.layer_norm(np.asarray(x, dtype=np.float64), eps)


def _bf16_sequential_sum(terms: torch.Tensor) -> torch.Tensor:
    """Running sums of terms: (n, ...) bfloat16, added one at a time into a bfloat16 accumulator.

    torch's own bfloat16 sum and cumsum accumulate in float32 internally (they would give
    the right answer), so the accumulator is written out as a loop: every partial sum is
    rounded to bfloat16, as in a naive kernel that keeps its accumulator in bfloat16.
    Returns (n, ...) bfloat16.
    """
    acc = torch.zeros_like(terms[0])
    out = torch.empty_like(terms)
    for i in range(terms.shape[0]):
        acc = acc + terms[i]  # bf16 + bf16 -> bf16: the result is rounded here
        out[i] = acc
    return out


def bf16_running_sum(x=None, *, n: int = 4096, seed: int = 0) -> dict:
    """Running sum of x_i^2 with a bfloat16 accumulator, a float32 one, and in float64.

    x: (n,) values, or None for n standard normal samples. x is first rounded to
    bfloat16 and the squares are rounded to bfloat16 (the inputs a bf16 kernel would see);
    all three sums add exactly these terms, so the differences come from the accumulator
    alone. Returns a dict of float64 arrays (n,): ``terms``, the running sums ``bf16``,
    ``fp32`` and ``exact``, ``ratio`` (the bf16 total before each term divided by the term)
    and ``lost`` (bool: a nonzero term left the bf16 total unchanged); and the numbers
    ``stalled_at`` (index from which the bf16 total never changes again, None if it still
    moves at the end), ``final_ratio`` (bf16 / exact final totals) and ``lost_fraction``.
    Rounding to nearest means a term is always lost when ratio > 512 and never when
    ratio < 256; in between it depends on where the total sits between powers of two.
    """
    if x is None:
        x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = torch.as_tensor(np.asarray(x, dtype=np.float64)).to(torch.bfloat16)
    terms = x * x  # bf16 squares, rounded to bf16
    bf = _bf16_sequential_sum(terms).double().numpy()
    t64 = terms.double().numpy()
    fp32 = np.add.accumulate(t64.astype(np.float32), dtype=np.float32).astype(np.float64)  # sequential
    exact = np.cumsum(t64)
    prev = np.concatenate([[0.0], bf[:-1]])
    lost = (bf == prev) & (t64 > 0)
    with np.errstate(divide="ignore"):
        ratio = np.where(t64 > 0, prev / np.where(t64 > 0, t64, 1.0), np.inf)
    changes = np.flatnonzero(bf != prev)
    last_change = int(changes[-1]) if changes.size else -1
    stalled_at = last_change + 1 if last_change + 1 < len(bf) else None
    return {
        "terms": t64,
        "bf16": bf,
        "fp32": fp32,
        "exact": exact,
        "ratio": ratio,
        "lost": lost,
        "stalled_at": stalled_at,
        "final_ratio": float(bf[-1] / exact[-1]),
        "lost_fraction": float(lost.mean()),
    }


def bf16_rms_norm_errors(rows: int = 8, d: int = 4096, *, eps: float = 1e-6, scale: float = 1.0,
                         seed: int = 0, yours=None) -> dict:
    """Errors of four bfloat16 RMSNorms against float64, on the same bfloat16 input.

    x: (rows, d) standard normal times ``scale``, rounded to bfloat16; the reference is the
    float64 RMSNorm of exactly those values. Variants:

    ``bf16_accumulator``  mean square summed in a bfloat16 accumulator (the stall), then
                          x * rsqrt(ms + eps) in bfloat16;
    ``bf16_torch_ops``    the same formula on bfloat16 tensors with torch's ops (which
                          accumulate the mean in float32 but round every intermediate);
    ``upcast_fix``        upcast to float32, torch's ``F.rms_norm`` there, cast back (the recipe);
    ``rounding_floor``    the float64 answer rounded to bfloat16: the best any bf16 output can do;
    ``yours``             with ``yours`` given: ``yours(x, gamma, eps)`` on float32 arrays holding the
                          bfloat16 numbers, gamma = 1 (notebook 04's ``rms_norm_bf16``).

    Returns a dict {variant: {"rel_error": max over rows of ||y - ref|| / ||ref||,
    "output_rms": mean RMS of y (1 when right)}}.
    """
    g = torch.Generator().manual_seed(seed)
    x = (scale * torch.randn(rows, d, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    ref = _rms_norm64(x.double().numpy(), eps)

    ms_stalled = _bf16_sequential_sum((x * x).T.contiguous())[-1] / d  # (rows,), bf16 all the way
    variants = {
        "bf16_accumulator": x * torch.rsqrt(ms_stalled[:, None] + eps),
        "bf16_torch_ops": x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps),
        "upcast_fix": torch.nn.functional.rms_norm(x.float(), (d,), eps=eps).to(x.dtype),
        "rounding_floor": torch.from_numpy(ref).to(torch.bfloat16),
    }
    if yours is not None:
        variants["yours"] = torch.from_numpy(np.asarray(yours(x.float().numpy(), np.ones(d, np.float32), eps=eps)))
    out = {}
    for name, y in variants.items():
        y = y.double().numpy()
        err = np.linalg.norm(y - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
        out[name] = {"rel_error": float(err.max()), "output_rms": float(np.sqrt(np.mean(y * y, axis=-1)).mean())}
    return out


def gemma_parameterisation(d: int = 64, *, start_gain: float = 1.5, steps: int = 100, decay: float = 0.01,
                           eps: float = 1e-6, seed: int = 0) -> dict:
    """Gemma's gain (1 + gamma) against the usual gain w: same function, different origin.

    ``same_function_max_diff``: max |RMSNorm(x) * w - RMSNorm(x) * (1 + (w - 1))| over a batch:
    zero up to rounding. ``missing_one_max_diff``: what a port that loads Gemma's gamma into
    a plain ``* w`` norm gets wrong (the output shrinks to RMSNorm(x) * gamma).
    ``decayed_gain_plain`` / ``decayed_gain_gemma``: a gain that starts at ``start_gain`` after
    ``steps`` steps of decoupled weight decay (each multiplies the parameter by 1 - decay):
    w decays towards 0, gamma towards 0, so the Gemma gain decays towards 1.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, d))
    w = 1.0 + 0.1 * rng.standard_normal(d)
    gamma = w - 1.0
    y_plain = _rms_norm64(x, eps) * w
    y_gemma = _rms_norm64(x, eps) * (1.0 + gamma)
    keep = (1.0 - decay) ** steps
    return {
        "same_function_max_diff": float(np.abs(y_plain - y_gemma).max()),
        "missing_one_max_diff": float(np.abs(y_plain - _rms_norm64(x, eps) * gamma).max()),
        "decayed_gain_plain": start_gain * keep,
        "decayed_gain_gemma": 1.0 + (start_gain - 1.0) * keep,
        "steps": steps,
        "decay": decay,
    }


def eps_differences(scales=(1e-3, 1e-2, 1e-1, 1.0, 10.0), *, d: int = 4096, rows: int = 8, norm: str = "rms",
                    eps: float = 1e-5, other_eps: float = 1e-6, seed: int = 0) -> dict:
    """How much the output moves with eps, for inputs of different sizes (float64 throughout).

    For x = scale * standard normal: (rows, d), and norm "rms" or "layer" (no gain):
    ``eps_change``: max |N_eps(x) - N_other_eps(x)| / max |N_other_eps(x)|;
    ``eps_outside``: the same between dividing by sqrt(ms + eps) and by sqrt(ms) + eps
    (ms is the mean square for RMSNorm, the variance for LayerNorm).
    Both are about eps / (2 ms) for unit-size inputs, a few parts per million, and grow to
    order one when ms is near eps. Returns ``scales`` and the two (len(scales),) arrays.
    """
    if norm not in ("rms", "layer"):
        raise ValueError(f"norm must be 'rms' or 'layer', got {norm!r}")
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, d))
    change, outside = [], []
    for s in scales:
        x = s * z
        if norm == "rms":
            xc = x
            a, b = _rms_norm64(x, eps), _rms_norm64(x, other_eps)
        else:
            xc = x - x.mean(axis=-1, keepdims=True)
            a, b = _layer_norm64(x, eps), _layer_norm64(x, other_eps)
        ms = np.mean(xc * xc, axis=-1, keepdims=True)
        c = xc / (np.sqrt(ms) + eps)
        change.append(np.abs(a - b).max() / np.abs(b).max())
        outside.append(np.abs(a - c).max() / np.abs(c).max())
    return {"scales": np.asarray(scales, dtype=np.float64), "eps_change": np.array(change),
            "eps_outside": np.array(outside), "norm": norm, "eps": eps, "other_eps": other_eps}
