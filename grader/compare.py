"""Strict, diagnosing comparison of what a learner's function returned.

Rules (design.md, "Strict comparisons"): exact type and shape, no broadcasting, finite
values, a private float64 copy made before any arithmetic, so an object that overrides
``__eq__`` or ``__array_ufunc__`` never gets to judge itself.
"""
from __future__ import annotations

import inspect

import numpy as np

from grader.numerics import relative_error


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message says what and why."""


def fail(message: str) -> None:
    raise CheckFailed("\n" + message.strip() + "\n")


def preview(array: np.ndarray, limit: int = 6) -> str:
    """A short, readable rendering of an array for failure messages."""
    flat = np.asarray(array).ravel()
    shown = np.array2string(flat[:limit], precision=4, suppress_small=True, separator=", ")
    more = f" ... ({flat.size} values)" if flat.size > limit else ""
    return shown + more


def strict_array(value, what: str, shape: tuple, dtype=np.float64) -> np.ndarray:
    """Validate a returned array and give back a private float64 copy of it.

    ``what`` names the value in messages, e.g. ``"layer_norm_vjp(x, g)"``.
    """
    if type(value) is not np.ndarray:
        from grader.sandbox.protocol import Unsupported

        kind = value.type_name if isinstance(value, Unsupported) else type(value).__module__ + "." + type(value).__name__
        hint = ""
        if isinstance(value, np.ndarray) or "subclass of numpy.ndarray" in kind:
            hint = " Return a plain array (np.asarray(result)), not a subclass."
        elif kind.startswith("torch"):
            hint = " Convert with .detach().numpy(), or compute with numpy throughout."
        elif isinstance(value, (list, tuple)):
            hint = " Wrap it with np.array(...)."
        elif value is None:
            hint = " Did you forget the return statement?"
        fail(f"{what} should return a numpy.ndarray, but returned {kind}.{hint}")
    if value.shape != tuple(shape):
        fail(
            f"{what} returned shape {value.shape}, expected {tuple(shape)}.\n"
            "Shapes must match exactly: a (d,) result is not a (1, d) or (d, 1) one. Check keepdims= "
            "on your reductions and any reshape."
        )
    if value.dtype != dtype:
        fail(
            f"{what} returned dtype {value.dtype}, expected {np.dtype(dtype)}.\n"
            "Keep the input's precision: avoid .astype(np.float32), Python lists of mixed types, "
            "or integer arrays (e.g. np.zeros_like on an integer input)."
        )
    copy = np.array(value, dtype=np.float64, copy=True)
    bad = ~np.isfinite(copy)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        fail(
            f"{what} contains {int(bad.sum())} non-finite value(s) (first at index {index}: {copy[index]}).\n"
            "NaN or inf usually means a division by zero: is eps inside the square root, "
            "and do you divide by s = sqrt(var + eps) rather than by the variance?"
        )
    return copy


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str, oracle: str, rtol: float,
                 likely_cause: str | None, floor: float = 0.0) -> None:
    """Fail with expected/got/error and a diagnosis when the relative error exceeds ``rtol``.

    ``floor``: the natural size of the answer (see ``relative_error``).
    """
    error = relative_error(actual, expected, floor)
    if error <= rtol:
        return
    cause = likely_cause or "no classic mistake matched; compare your formula with the derivation term by term."
    fail(
        f"{what} is wrong.\n"
        f"  expected ({oracle}): {preview(expected)}\n"
        f"  got:{' ' * (len(oracle) + 9)}{preview(actual)}\n"
        f"  relative error {error:.2e} (tolerance {rtol:.0e})\n"
        f"Likely cause: {cause}"
    )


def call_learner(function, *args, what: str, **kwargs):
    """Call a learner's function on private copies of the inputs; fail if it modifies them."""
    originals = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    result = function(*copies, **kwargs)
    for original, copy in zip(originals, copies):
        if isinstance(original, np.ndarray) and not np.array_equal(original, copy):
            fail(
                f"{what} modified its input array in place (e.g. x -= mu).\n"
                "The caller still needs x: work on a new array (x - mu) instead."
            )
    return result


def check_signature(function, name: str, expected: str) -> None:
    """Fail clearly when a learner renamed, removed or reordered a parameter."""
    if not callable(function):
        fail(f"{name} is not a function any more (it is {type(function).__name__}). Re-run the cell that defines it.")
    try:
        found = str(inspect.signature(function))
    except (TypeError, ValueError):
        fail(f"Could not read the signature of {name}; define it with a plain `def`.")
    if found != expected:
        fail(
            f"The signature of {name} changed: the tests call {name}{expected}, but it is now {name}{found}.\n"
            f"Restore the original first line, `def {name}{expected}:`, and keep the defaults."
        )
    print(f"✔ {name}{expected}: signature as expected")


def passed(message: str) -> None:
    print("✔ " + message)


def call_measuring_memory(function, *args, **kwargs):
    """(result, peak bytes allocated during the call) measured with tracemalloc.

    Under ``grader grade`` the learner's function is a proxy into its sandbox, where the
    measurement is taken around the real call.
    """
    import tracemalloc

    from grader.sandbox.client import LearnerFunction

    if isinstance(function, LearnerFunction):
        return function.call_measuring_memory(*args, **kwargs)
    tracemalloc.start()
    try:
        result = function(*args, **kwargs)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
