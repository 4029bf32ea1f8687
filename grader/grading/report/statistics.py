"""The class report's figures: Wilson score intervals, quartiles, and the privacy rule for small groups."""
from __future__ import annotations

import math

MIN_GROUP = 5  # smaller groups are shown as "< 5" unless --identify
SUPPRESSED = f"< {MIN_GROUP}"
Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal distribution


def wilson(count: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion ``count / n`` (Newcombe 1998, method 3).

    (0.0, 1.0) when ``n`` is 0 (nothing is known).
    """
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= count <= n:
        raise ValueError(f"count {count} outside 0..{n}")
    p = count / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    low = 0.0 if count == 0 else max(0.0, centre - half)  # exactly 0 and 1 at the ends, not rounding noise
    high = 1.0 if count == n else min(1.0, centre + half)
    return low, high


def quartiles(values: list[float]) -> dict:
    """Median and quartiles (linear interpolation between order statistics, numpy's default)."""
    import numpy as np

    q1, median, q3 = (float(v) for v in np.percentile(np.asarray(values, dtype=float), [25, 50, 75]))
    return {"q1": q1, "median": median, "q3": q3}


def proportion(count: int, n: int) -> dict:
    """``count`` of ``n`` as a percentage with its Wilson 95 % interval, in percent."""
    low, high = wilson(count, n)
    return {"percent": 100 * count / n if n else None, "ci_low": 100 * low, "ci_high": 100 * high}


def group(count: int, n: int, identify: bool) -> dict:
    """A count of learners out of n, suppressed below MIN_GROUP unless identify."""
    if count < MIN_GROUP and not identify:
        return {"count": SUPPRESSED, "percent": None, "ci_low": None, "ci_high": None}
    return {"count": count, **proportion(count, n)}
