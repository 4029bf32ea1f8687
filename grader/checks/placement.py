"""Checks for 05_placement: one residual sublayer, three placements of the norm.

The exercise composes two functions the caller supplies, ``F`` (the sublayer) and ``norm``.
The oracle is the composition's own trace: the checks hand the learner two *recording*
functions, log every call (its input and its output, in order), and then read off what the
learner's code actually built, as an expression such as ``norm(x + F(x))``:

- each call's input is named by matching its values against what is known so far (``x``,
  the outputs of earlier calls, or a sum or difference of two of them);
- the returned array is named the same way.

The diagnosis compares that expression with the one the mode asks for, so it can say "for
mode='pre' you returned norm(x + F(x)), the post-LN order" or "F was called on x, not on
norm(x)". The test functions do not commute (each adds a constant, one is nonlinear), so a
wrong order never matches by accident. No placement is implemented here: the expected
expression is a string, and the expected values are the ones the learner's own calls
produced.
"""
from __future__ import annotations

import numpy as np

from grader.compare import (
    CheckFailed, LearnerError, call_learner, check, fail, is_shape_error, passed, preview, strict_array,
)
from grader.numerics import random_input, relative_error

MODES = ("pre", "post", "output")
EXPECTED = {"pre": "x + F(norm(x))", "post": "norm(x + F(x))", "output": "x + norm(F(x))"}
ORDER_NAMES = {"pre": "the pre-LN order", "post": "the post-LN order", "output": "the output-norm order (OLMo 2)"}
PAIRS = ("mlp", "affine", "elementwise")
VISIBLE_SHAPES = ((8,), (3, 5), (2, 4, 6))
VISIBLE_INVALID = ("Pre", "", None)
ALL_INVALID = ("Pre", "", None, "PRE", " pre", "post ", "pre-LN", "postln", "outputs", "norm", "sandwich",
               "parallel", 0, 1, b"pre")
MATCH_RTOL = 1e-9   # values built by the same float64 operations agree to ~1e-15
SHAPE_RULE = ("residual_sublayer must accept any shape (..., d): F and norm take and return arrays of x's shape, "
              "so add them and pass them on as they are, with no reshape or axis of your own.")


# ---------------------------------------------------------------- recording functions
class _Log:
    """Chronological record of every call made to the recording F and norm."""

    def __init__(self):
        self.calls = []  # (name, input as float64 copy, output as float64 copy)

    def count(self, name: str) -> int:
        return sum(1 for call in self.calls if call[0] == name)


class _Recorder:
    """A function of (..., d) arrays that logs its input and output; ``repr`` is its name."""

    def __init__(self, name: str, function, log: _Log):
        self.name, self._function, self._log = name, function, log

    def __call__(self, h):
        h_in = np.array(h, dtype=np.float64, copy=True)
        out = np.asarray(self._function(h_in.copy()), dtype=np.float64)
        self._log.calls.append((self.name, h_in, out.copy()))
        return out

    def __repr__(self):
        return f"<test function {self.name}>"


def _functions(pair: str, d: int, seed: int):
    """Two test functions (F, norm) on the last axis, chosen so that no two placements agree."""
    rng = np.random.default_rng(1000 + seed)
    if pair == "mlp":
        # F: a two-layer MLP with a bias; norm: scale to length 2 (Henry et al.'s L2 form), then shift.
        W1 = rng.standard_normal((d, 2 * d)) / np.sqrt(d)
        W2 = rng.standard_normal((2 * d, d)) / np.sqrt(2 * d)
        F = lambda h: np.tanh(h @ W1 + 0.1) @ W2 + 0.5  # noqa: E731
        norm = lambda h: 2.0 * h / np.linalg.norm(h, axis=-1, keepdims=True) + 0.25  # noqa: E731
    elif pair == "affine":
        # F: a linear map with a bias; norm: min-max scaling of each token to [-1, 1].
        A = rng.standard_normal((d, d)) / np.sqrt(d)
        c = rng.standard_normal(d)
        F = lambda h: h @ A + c  # noqa: E731
        norm = lambda h: (2 * h - h.max(-1, keepdims=True) - h.min(-1, keepdims=True)) / (  # noqa: E731
            h.max(-1, keepdims=True) - h.min(-1, keepdims=True))
    elif pair == "elementwise":
        # F: an elementwise nonlinearity with a shift; norm: divide by 1 + mean |h|, then shift.
        F = lambda h: np.sin(2 * h) + 0.7  # noqa: E731
        norm = lambda h: h / (1 + np.abs(h).mean(-1, keepdims=True)) - 0.1  # noqa: E731
    else:
        raise ValueError(f"unknown test pair {pair!r}; use one of {PAIRS}")
    return F, norm


def _recorders(pair: str, d: int, seed: int):
    log = _Log()
    F, norm = _functions(pair, d, seed)
    return _Recorder("F", F, log), _Recorder("norm", norm, log), log


# ---------------------------------------------------------------- reading the trace
def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.size == b.size and relative_error(a.ravel(), b.ravel(), floor=1.0) < MATCH_RTOL


def _name(value: np.ndarray, known: list) -> str:
    """Name ``value`` as one known expression, or a sum/difference of two of them."""
    for name, known_value in known:
        if _same(value, known_value):
            return name
    for i, (a, va) in enumerate(known):
        if va.size != value.size:
            continue
        for j, (b, vb) in enumerate(known):
            if j < i or vb.size != value.size:
                continue
            if _same(value, va.ravel() + vb.ravel()):
                return f"2 * {a}" if i == j else f"{a} + {b}"
            if i != j and _same(value, va.ravel() - vb.ravel()):
                return f"{a} - {b}"
            if i != j and _same(value, vb.ravel() - va.ravel()):
                return f"{b} - {a}"
    return "?"


def _read_trace(x: np.ndarray, log: _Log) -> tuple[list, list]:
    """Name every call's input and output. Returns (known expressions, [(name, input expr)])."""
    known = [("x", x)]
    steps = []
    for name, h_in, out in log.calls:
        argument = _name(h_in, known)
        steps.append((name, argument))
        known.append((f"{name}({argument})", out))
    return known, steps


def _describe(y: np.ndarray, x: np.ndarray, log: _Log) -> tuple[str, list]:
    known, steps = _read_trace(x, log)
    return _name(y, known), steps


def _trace_text(steps: list) -> str:
    if not steps:
        return "neither F nor norm was called"
    return ", then ".join(f"{name} was called on {argument}" for name, argument in steps)


def _cause(mode: str, got: str, steps: list, log: _Log) -> str:
    """Name the likely mistake from the expression the learner built and the call trace."""
    want = EXPECTED[mode]
    f_args = [argument for name, argument in steps if name == "F"]
    norm_args = [argument for name, argument in steps if name == "norm"]
    for other in MODES:
        if other != mode and got == EXPECTED[other]:
            return (f"that is {ORDER_NAMES[other]}, the formula of mode='{other}'. The branches of your function "
                    "handle the wrong modes: check which formula sits under which `if mode == ...`.")
    if not log.count("norm"):
        return "norm was never called: every placement normalises something (the input, the sum, or F's output)."
    if not log.count("F"):
        return "F was never called: every placement runs the sublayer once."
    if got == want.removeprefix("x + ") or (mode == "post" and got == "norm(F(x))"):
        return ("the residual x was not added. The identity path is the point of a residual block: whatever F "
                "contributes is added to x" + (", before the norm." if mode == "post" else "."))
    if mode == "pre" and "x" in f_args and "norm(x)" not in f_args:
        return ("F was called on x, not on norm(x). In pre-LN the sublayer reads the normalised stream; only the "
                "residual carries the raw x.")
    if mode in ("post", "output") and "x" not in f_args and "norm(x)" in f_args:
        return (f"F was called on norm(x), but in mode='{mode}' the sublayer reads the raw stream x; the norm comes "
                "after F.")
    if got.startswith("norm(x) + "):
        return ("the residual you added is norm(x), not x. The identity path carries the un-normalised stream; only "
                "the sublayer's input is normalised.")
    if " - " in got:
        return "a difference where a sum belongs: the sublayer's output is added to the stream."
    if mode == "post" and norm_args and norm_args[-1] != "x + F(x)":
        return f"post-LN normalises the sum x + F(x), but norm was called on {norm_args[-1]}."
    if mode == "output" and norm_args and norm_args[-1] != "F(x)":
        return f"the output norm normalises what F wrote, F(x), but norm was called on {norm_args[-1]}."
    if got == "?":
        return ("the result is not x, F(...), norm(...) or a sum of two of them: something else was changed "
                "(a reshape that reorders values, an extra factor, a different axis).")
    return "compare your expression with the formula term by term."


# ---------------------------------------------------------------- public helpers
def describe_composition(residual_sublayer, mode: str, shape=(2, 4), pair: str = "mlp", seed: int = 0) -> str:
    """Run ``residual_sublayer`` once with recording F and norm; return the expression it computed.

    For example ``describe_composition(residual_sublayer, "post")`` gives ``"norm(x + F(x))"``
    when the post-LN branch is right. The trace, call by call, is appended in brackets when
    F or norm was called more than once.
    """
    x = random_input(tuple(shape), seed=seed)
    F, norm, log = _recorders(pair, x.shape[-1], seed)
    y = residual_sublayer(x.copy(), F, norm, mode)
    y = np.asarray(y, dtype=np.float64)
    got, steps = _describe(y, x, log)
    if log.count("F") > 1 or log.count("norm") > 1:
        got += f"   [{_trace_text(steps)}]"
    return got


def _call(residual_sublayer, x, F, norm, mode, what):
    try:
        return call_learner(residual_sublayer, x, F, norm, mode, what=what, shape_rule=SHAPE_RULE)
    except LearnerError:
        raise
    except CheckFailed as failure:
        if "in place" in str(failure):
            fail(f"{what} changed the caller's x in place (x += ..., x[...] = ..., or np.add(x, ..., out=x)).\n"
                 "The caller's residual stream must survive the call: the next sublayer, and the backward pass, "
                 "still need it. Build a new array: h = x + F(x), then return norm(h).")
        raise


@check
def check_residual_sublayer(residual_sublayer, modes=MODES, shapes=VISIBLE_SHAPES, pair: str = "mlp",
                            seed: int = 0):
    """For each mode and shape, read the composition off the call trace and compare it with the formula.

    ``pair`` picks the test functions (F, norm): "mlp", "affine" or "elementwise".
    """
    for k, shape in enumerate(shapes):
        shape = tuple(shape)
        x = random_input(shape, seed=seed + k)
        for mode in modes:
            F, norm, log = _recorders(pair, shape[-1], seed + k)
            what = f"residual_sublayer(x, F, norm, mode={mode!r}) for x of shape {shape}"
            try:
                y = _call(residual_sublayer, x, F, norm, mode, what)
            except LearnerError as error:
                is_value_error = isinstance(error.error, ValueError) or error.error_type == "ValueError"
                if not is_value_error or is_shape_error(error.error_type, error.error_message):
                    raise
                raise error.with_cause(
                    f"{mode!r} is one of the three valid modes {MODES}: a typo in a string you compare the mode "
                    f"with, or a branch for {mode!r} that is missing. See it: residual_sublayer(x, F, norm, "
                    f"{mode!r}).") from None
            y = strict_array(y, what, shape)
            got, steps = _describe(y, x, log)
            if got != EXPECTED[mode]:
                fail(f"{what} is wrong.\n"
                     f"  mode={mode!r} means {EXPECTED[mode]}\n"
                     f"  you returned      {got if got != '?' else 'something else: ' + preview(y)}\n"
                     f"  (the trace: {_trace_text(steps)})\n"
                     f"Likely cause: {_cause(mode, got, steps, log)}\n"
                     f"See it: print(describe_composition(residual_sublayer, {mode!r})).")
            for name in ("F", "norm"):
                if log.count(name) > 1:
                    fail(f"{what} returned {got}, which is right, but called {name} {log.count(name)} times "
                         f"(the trace: {_trace_text(steps)}).\n"
                         f"Likely cause: you compute more than one placement, or the same term twice, and then pick "
                         f"one. Call {name} exactly once: a sublayer is the expensive part of a block, and with "
                         "dropout two calls do not even agree. Compute only the formula the mode asks for.")
    shown = ", ".join(f"{m}: {EXPECTED[m]}" for m in modes)
    passed(f"residual_sublayer builds {shown}  ({len(shapes)} shapes, test functions '{pair}')")


@check
def check_residual_sublayer_rejects(residual_sublayer, invalid_modes=VISIBLE_INVALID, d: int = 5, seed: int = 0):
    """Every mode other than "pre", "post", "output" must raise ValueError naming the valid modes."""
    x = random_input((2, d), seed=seed)
    for mode in invalid_modes:
        F, norm, log = _recorders("mlp", d, seed)
        what = f"residual_sublayer(x, F, norm, mode={mode!r})"
        try:
            result = _call(residual_sublayer, x, F, norm, mode, what)
        except LearnerError as raised:
            kind, message = raised.error_type, raised.error_message
            if isinstance(raised.error, ValueError) or kind == "ValueError":
                missing = [m for m in MODES if m not in message]
                if missing:
                    fail(f"{what} raised ValueError({message!r}): right exception, unhelpful message.\n"
                         f"The message does not mention {', '.join(repr(m) for m in missing)}. Name the mode you got "
                         "and the valid ones, e.g. ValueError(f\"mode must be 'pre', 'post' or 'output', got "
                         "{mode!r}\"), so whoever called it can fix the call.")
                continue
            # the learner raised the wrong kind of exception
            hints = {
                "KeyError": "a dictionary lookup table[mode] raises KeyError for a missing key; test "
                            "`if mode not in table:` first and raise ValueError yourself.",
                "AssertionError": "`assert` raises AssertionError, and disappears altogether under `python -O`; "
                                  "use `raise ValueError(...)` for bad arguments.",
                "AttributeError": f"a method was called on the mode ({mode!r} has no such method, e.g. None.lower()); "
                                  "compare the mode with the three strings as it is.",
                "TypeError": "an operation on the mode failed before your check ran; compare the mode with the "
                             "three strings first, before using it.",
            }
            where = str(raised).split("  in your code, ", 1)
            line = ("\n  in your code, " + where[1].split("\n", 1)[0]) if len(where) > 1 else ""
            fail(f"{what} raised {kind}({message!r}), expected ValueError.{line}\n"
                 f"Likely cause: {hints.get(kind, 'any mode other than the three must raise ValueError explicitly.')}")
        # No exception at all: say what the function did with the unknown mode.
        if result is None:
            fail(f"{what} returned None instead of raising ValueError.\n"
                 "Likely cause: your if/elif chain has no final `else: raise ValueError(...)`, so an unknown mode "
                 "falls off the end of the function.")
        try:
            got, _ = _describe(np.asarray(result, dtype=np.float64), x, log)
        except (TypeError, ValueError):
            got = "?"
        like = next((m for m in MODES if got == EXPECTED[m]), None)
        if like is not None and isinstance(mode, str) and mode.strip().lower() == like:
            cause = (f"{mode!r} was treated as {like!r}: you lower-cased or stripped the mode. Modes are exact "
                     f"strings; a caller who writes {mode!r} has made a mistake you should report, not guess at.")
        elif like is not None:
            cause = (f"{mode!r} was treated like {like!r} (you returned {got}): an `else:` branch catches every "
                     f"other mode. Give {like!r} its own `elif mode == {like!r}:` and raise ValueError in the else.")
        else:
            cause = "any mode other than 'pre', 'post' and 'output' must raise ValueError before anything is returned."
        fail(f"{what} returned a result instead of raising ValueError.\nLikely cause: {cause}")
    passed(f"residual_sublayer raises a helpful ValueError for {len(invalid_modes)} invalid modes: "
           + ", ".join(repr(m) for m in invalid_modes))
