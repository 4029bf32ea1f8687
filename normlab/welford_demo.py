"""Experiments and figures for notebook 06: cancellation in E[x²] − μ², summation order, Welford.

Nothing here implements an exercise. The notebook passes in the methods it compares (the
naive formula, the two-pass one, the learner's Welford); this module only generates data,
measures errors against exact rational arithmetic, and draws the figures.

The reference is this module's own: exact integer arithmetic on the stored values, rounded
once (``exact_variance``). It imports nothing from ``grader.checks`` (a demo does not lean
on a check module; tests/unit/test_checks_welford.py compares the two oracles).

Example::

    offsets = 10.0 ** np.arange(13)
    errors = variance_errors({"E[x²] − μ²": naive_rows}, offsets, np.float64)
    fig = variance_error_figure(offsets, {"float64": errors}, {"float64": 2.0**-53})
"""
from __future__ import annotations

import math
from fractions import Fraction

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["variance_errors", "condition_numbers", "exact_variance", "variance_error_figure", "summation_errors",
           "summation_error_figure", "NAIVE_GUIDE", "WELFORD_GUIDE"]

_STYLES = {0: ("o-", "#d62728"), 1: ("s-", "#1f77b4"), 2: ("^-", "#2ca02c"), 3: ("v-", "#9467bd")}
_FLOOR = 1e-18  # errors of exactly zero are drawn here, so that a log axis can show them


def _exact_moments(row) -> tuple[int, Fraction, Fraction]:
    """(n, mean, sum of squared deviations) of the stored values of a 1-D float array, exactly.

    Every float is an integer over a power of two: scaled by the largest denominator, the
    values become Python integers whose sums are exact.
    """
    ratios = [float(v).as_integer_ratio() for v in np.asarray(row, dtype=np.float64).ravel().tolist()]
    scale = max(den for _, den in ratios)
    ints = [num * (scale // den) for num, den in ratios]
    n, s1, s2 = len(ints), sum(ints), sum(i * i for i in ints)
    return n, Fraction(s1, n * scale), Fraction(n * s2 - s1 * s1, n * scale * scale)


def exact_variance(row) -> float:
    """Biased variance of the values of ``row`` as stored, exact and rounded once to float64."""
    n, _, sum_sq_dev = _exact_moments(row)
    return float(sum_sq_dev / n)


def _rows(offset, dtype, n: int, trials: int, seed: int) -> np.ndarray:
    """``trials`` rows of ``offset + N(0, 1)``, ``n`` values each, stored in ``dtype``: the sweep's data."""
    return (offset + np.random.default_rng(seed).standard_normal((trials, n))).astype(dtype)


def condition_numbers(offsets, dtype, n: int = 1000, trials: int = 5, seed: int = 0) -> np.ndarray:
    """Median condition number κ = sqrt(1 + μ²/σ²) of the rows ``variance_errors`` draws, per offset.

    κ is Chan, Golub & LeVeque's (1983) condition number of the sum of squared deviations,
    ‖x‖₂ / sqrt(S), computed exactly from the stored values (NaN where they are all equal).
    """
    medians = []
    for offset in offsets:
        kappas = []
        for row in _rows(offset, dtype, n, trials, seed):
            count, mean, sum_sq_dev = _exact_moments(row)
            kappas.append(math.sqrt(float(1 + count * mean * mean / sum_sq_dev)) if sum_sq_dev > 0 else math.nan)
        finite = [k for k in kappas if not math.isnan(k)]
        medians.append(float(np.median(finite)) if finite else math.nan)
    return np.array(medians)


def variance_errors(methods: dict, offsets, dtype, n: int = 1000, trials: int = 5, seed: int = 0) -> dict:
    """Median relative error of each method's variance, per offset.

    Data: ``trials`` rows of ``offset + N(0, 1)`` with ``n`` values each, stored in ``dtype``.
    Each method maps that ``(trials, n)`` array to ``trials`` variances. The reference is the
    exact variance of the values as stored (exact rational arithmetic); an offset at which
    the stored values no longer differ (float32 beyond about 1e7) gives NaN.
    """
    errors = {label: [] for label in methods}
    for offset in offsets:
        x = _rows(offset, dtype, n, trials, seed)
        exact = np.array([exact_variance(row) for row in x])
        keep = exact > 0
        for label, method in methods.items():
            if not keep.any():
                errors[label].append(np.nan)
                continue
            var = np.asarray(method(x), dtype=np.float64).reshape(trials)
            errors[label].append(float(np.median(np.abs(var[keep] - exact[keep]) / exact[keep])))
    return {label: np.array(values) for label, values in errors.items()}


NAIVE_GUIDE = ("u·(1 + (μ/σ)²)", lambda offset, u: u * (1 + offset**2))
WELFORD_GUIDE = ("u·(1 + μ/σ)", lambda offset, u: u * (1 + offset))


def variance_error_figure(offsets, panels: dict, unit_roundoff: dict, title: str | None = None,
                          guides=(NAIVE_GUIDE,)):
    """One log-log panel per dtype: relative error of the variance against the offset μ (σ = 1).

    ``panels`` maps a dtype name to ``{method label: errors}`` from ``variance_errors``;
    ``unit_roundoff`` maps the same names to u; ``guides`` are (label, f(offset, u)) lines.
    Errors of exactly zero are drawn at 1e-18.
    """
    offsets = np.asarray(offsets, dtype=np.float64)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), sharey=True, squeeze=False)
    for ax, (name, errors) in zip(axes[0], panels.items(), strict=True):
        u = unit_roundoff[name]
        for k, (label, values) in enumerate(errors.items()):
            marker, colour = _STYLES[k % len(_STYLES)]
            ax.loglog(offsets, np.maximum(values, _FLOOR), marker, color=colour, ms=4, label=label)
        for (label, curve), style in zip(guides, (":", "--"), strict=False):
            ax.loglog(offsets, curve(offsets, u), style, color="0.45", lw=1, label=label)
        ax.axhline(1.0, color="0.6", lw=0.8)
        ax.text(offsets[-1], 0.4, "100% error: no correct digit", fontsize=8, color="0.35", ha="right", va="top")
        ax.set_ylim(_FLOOR / 2, 1e7)
        ax.set_xlabel("offset μ of the data (x = μ + N(0, 1), σ = 1)")
        ax.set_title(f"{name} (u = {u:.1e})", fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_ylabel("relative error of the variance (0 drawn at 1e-18)")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.set_layout_engine("tight")
    return fig


def summation_errors(x: np.ndarray, sizes) -> dict:
    """Relative error of float32 sums of the first n values, for each n in ``sizes``.

    ``sequential``: the running total left to right (``np.cumsum``, the same additions as a
    Python loop); ``pairwise``: ``np.sum``. The reference is ``math.fsum`` (correctly rounded).
    """
    if x.dtype != np.float32:
        raise ValueError("summation_errors expects a float32 array")
    running = np.cumsum(x, dtype=np.float32)
    values = x.tolist()  # exact: every float32 is a float64
    sequential, pairwise = [], []
    for n in sizes:
        exact = math.fsum(values[:n])
        sequential.append(abs(float(running[n - 1]) - exact) / exact)
        pairwise.append(abs(float(np.sum(x[:n])) - exact) / exact)
    return {"sizes": np.asarray(sizes), "sequential": np.array(sequential), "pairwise": np.array(pairwise)}


def summation_error_figure(errors: dict, unit_roundoff: float, title: str | None = None):
    """Log-log: relative error of the sum against n, sequential vs pairwise, with n·u and log2(n)·u.

    Errors below 1e-10 (including exact sums of a few values) are drawn at the bottom edge.
    """
    n = errors["sizes"].astype(np.float64)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.loglog(n, np.maximum(errors["sequential"], 1e-10), "o-", color="#d62728", ms=4,
              label="left to right (loop, np.cumsum)")
    ax.loglog(n, np.maximum(errors["pairwise"], 1e-10), "s-", color="#1f77b4", ms=4, label="pairwise (np.sum)")
    ax.loglog(n, n * unit_roundoff, ":", color="#d62728", label="n·u")
    ax.loglog(n, np.log2(n) * unit_roundoff, ":", color="#1f77b4", label="log2(n)·u")
    ax.set_ylim(1e-10, 1e0)
    ax.set_xlabel("number of float32 values summed, n")
    ax.set_ylabel("relative error of the sum")
    ax.set_title(title or "Summation error grows like n·u left to right, like log n·u pairwise", fontsize=10)
    ax.legend(fontsize=8)
    fig.set_layout_engine("tight")
    return fig
