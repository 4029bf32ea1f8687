"""Numerical tools the checks rely on: finite differences, relative error, test inputs.

Everything here works in float64; nothing here implements an exercise.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


def relative_error(actual: np.ndarray, expected: np.ndarray, floor: float = 0.0) -> float:
    """Normwise relative error max|a - e| / max(max|e|, floor) (both float64, same shape).

    A correct float64 implementation lands around 1e-16 to 1e-12; 1e-7 or more means a
    different formula, not rounding. ``floor`` is the natural size of the answer, for
    answers that are nearly zero (a Jacobian at d = 2); with an all-zero ``expected`` and
    no floor the absolute error is returned.
    """
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(float(np.max(np.abs(expected))) if expected.size else 0.0, floor)
    diff = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    return diff / scale if scale > 0 else diff


def central_difference_jacobian(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
                                h: float | None = None) -> np.ndarray:
    """Jacobian of ``f: (d,) -> (m,)`` at ``x`` by float64 central differences, shape (m, d).

    The step defaults to 1e-6 times the spread of ``x`` (at least 1e-9): small enough that
    the O(h^2) truncation error is negligible, large enough that rounding stays below 1e-9.
    """
    x = np.array(x, dtype=np.float64)
    if h is None:
        h = 1e-6 * max(float(np.std(x)), 1e-3)
    columns = []
    for j in range(x.size):
        step = np.zeros_like(x)
        step[j] = h
        columns.append((np.asarray(f(x + step), dtype=np.float64)
                        - np.asarray(f(x - step), dtype=np.float64)) / (2 * h))
    return np.stack(columns, axis=-1)


def random_input(shape, seed: int = 0, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """Gaussian float64 test input ``offset + scale * N(0, 1)`` of the given shape."""
    rng = np.random.default_rng(seed)
    return offset + scale * rng.standard_normal(shape)
