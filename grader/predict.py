"""Predict, then run: the learner commits to a guess before a cell measures the answer.

A prediction cell holds ``guess = ...``; the learner replaces the ``...`` with a number (or
one of the offered options), then runs the cell that measures the real value and calls
``compare(guess, measured, name=...)`` or ``choose(guess, options, correct, name=...)``.
Neither ever raises or writes to stderr: a prediction is never graded, and nbgrader gives a
cell zero if it writes to stderr. A guess left at ``...`` (or None) is told to come first.
"""
from __future__ import annotations

import math

NOT_YET = "✎ {name}: write your guess in the cell above first (replace the ...), then run this cell again."


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def verdict(guess, actual, rel: float = 0.1) -> str:
    """"missing", "close" (within ``rel`` relative, or the same order of magnitude when ``rel`` is None),
    "order" (within a factor of 10), "far", or "invalid" (not a number)."""
    if guess is None or guess is Ellipsis:
        return "missing"
    g, a = _number(guess), _number(actual)
    if g is None or a is None:
        return "invalid"
    if g == a or (a != 0 and abs(g - a) <= rel * abs(a)) or (a == 0 and abs(g) <= rel):
        return "close"
    if a != 0 and g != 0 and (g > 0) == (a > 0) and abs(math.log10(abs(g) / abs(a))) <= 1:
        return "order"
    return "far"


def compare(guess, actual, name: str = "your prediction", rel: float = 0.1, unit: str = "") -> str:
    """Print how a numeric guess compares with the measured value; returns the verdict."""
    try:
        kind = verdict(guess, actual, rel)
        unit = f" {unit}" if unit else ""
        if kind == "missing":
            print(NOT_YET.format(name=name))
        elif kind == "invalid":
            print(f"✎ {name}: {guess!r} is not a number; write a number such as 0.5 or 1e-3.")
        else:
            said = {"close": f"✔ close: within {100 * rel:.0f} %",
                    "order": "≈ the right order of magnitude, not closer",
                    "far": "✘ off by more than a factor of 10"}[kind]
            print(f"{name}: you guessed {float(guess):.4g}{unit}, measured {float(actual):.4g}{unit}. {said}.")
        return kind
    except Exception:  # noqa: BLE001 - a prediction never stops the notebook
        return "invalid"


def choose(guess, options, correct, name: str = "your prediction") -> str:
    """Print whether the chosen option is the right one; returns "missing", "invalid", "right" or "wrong"."""
    try:
        if guess is None or guess is Ellipsis:
            print(NOT_YET.format(name=name))
            return "missing"
        listed = list(options)
        if guess not in listed:
            print(f"✎ {name}: choose one of {', '.join(repr(o) for o in listed)} (you wrote {guess!r}).")
            return "invalid"
        if guess == correct:
            print(f"✔ {name}: {guess!r} is right.")
            return "right"
        print(f"✘ {name}: you chose {guess!r}; the measurement says {correct!r}. Read the cell's output again.")
        return "wrong"
    except Exception:  # noqa: BLE001 - any bad answer reads as invalid
        return "invalid"
