"""Name every mistake behind a wrong scale, alone or combined, and no mistake that is absent.

A normalisation divides by a scale built in two steps: a *statistic* (the biased variance,
the mean of squares, ...) and a *map* from it to the scale (sqrt(v + eps) is right;
sqrt(v) + eps, sqrt(v), v + eps are classic slips). A learner can get either step wrong, or
both. The checks read the scale the learner actually divided by off the answer (the
"implied scale", one number per group of statistics) and hand it here with the candidate
statistics and maps; every combination is tried, so "the unbiased variance *and* eps outside
the square root" is named as two mistakes instead of being blamed on something else.

A statistic may also be known only within a band, e.g. the variance computed as
E[x²] − μ², whose rounding error is bounded but not predictable: it matches when the scale
lies inside the band's image, and is named only when no exact statistic explains the scale.
Among the combinations that match, the one with the fewest mistakes wins, so a mistake is
never named when a simpler explanation without it fits; two equally simple explanations are
both given, as alternatives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from grader.compare import ids_of, tag


@dataclass
class Statistic:
    """A quantity the learner may have used in place of the right statistic."""

    value: np.ndarray
    mistakes: list = field(default_factory=list)    # [] for the right statistic
    band: np.ndarray | None = None                   # known only within value ± band (e.g. E[x²] − μ² rounding)


@dataclass
class Map:
    """What the learner may have done with the statistic to get the scale (increasing in it)."""

    function: Callable
    mistakes: list = field(default_factory=list)    # [] for the right map


def _fits(implied, predicted, tol) -> bool:
    implied, predicted = np.broadcast_arrays(np.asarray(implied, dtype=np.float64),
                                             np.asarray(predicted, dtype=np.float64))
    if not np.all(np.isfinite(predicted)) or np.any(predicted == 0):
        return False
    return bool(implied.size) and bool(np.max(np.abs(implied / predicted - 1)) <= tol)


def _within(implied, low, high, tol) -> bool:
    implied, low, high = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (implied, low, high)))
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        return False
    return bool(np.all(implied >= low * (1 - tol)) and np.all(implied <= high * (1 + tol)))


def explain_scale(implied, statistics: list[Statistic], maps: list[Map], tol: float,
                  band_mistake: str | None = None) -> list[list[str]] | None:
    """The simplest combinations of mistakes that explain ``implied``.

    Returns None if no combination fits, ``[[]]`` if the right one fits, else a list of
    equally simple explanations, each a list of mistake descriptions (usually one).
    ``band_mistake`` is added to a combination that fits only thanks to a statistic's band.
    """
    exact, banded = [], []
    for statistic in statistics:
        for mapping in maps:
            mistakes = statistic.mistakes + mapping.mistakes
            with np.errstate(all="ignore"):
                if _fits(implied, mapping.function(statistic.value), tol):
                    exact.append(mistakes)
                elif statistic.band is not None and band_mistake is not None:
                    low = mapping.function(np.maximum(statistic.value - statistic.band, 0.0))
                    high = mapping.function(statistic.value + statistic.band)
                    if _within(implied, low, high, tol):
                        banded.append(mistakes + [band_mistake])
    for found in (exact, banded):
        if found:
            return simplest(found)
    return None


def simplest(found: list[list[str]]) -> list[list[str]]:
    """The explanations with the fewest mistakes, without repeats, in the order found."""
    fewest = min(len(m) for m in found)
    kept = []
    for mistakes in found:
        if len(mistakes) == fewest and mistakes not in kept:
            kept.append(mistakes)
    return kept


def describe(explanations: list[list[str]] | None) -> str | None:
    """One sentence for the learner: the mistake, both mistakes, or the alternatives."""
    if not explanations or explanations == [[]]:
        return None

    def one(mistakes: list[str]) -> str:
        if len(mistakes) == 1:
            return mistakes[0]
        parts = " ".join(f"({i}) {m}" for i, m in enumerate(mistakes, 1))
        return f"{len(mistakes)} mistakes together: {parts}"

    texts = [one(m) for m in explanations if m]
    ids = ids_of(*(mistake for mistakes in explanations for mistake in mistakes))
    if len(texts) == 1:
        return tag(texts[0], *ids)
    return tag("two explanations fit equally well on this input. Either " + " Or: ".join(texts), *ids)
