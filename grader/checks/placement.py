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
    CheckFailed,
    LearnerError,
    Probe,
    assert_close,
    call_learner,
    check,
    fail,
    ids_of,
    is_shape_error,
    passed,
    preview,
    strict_array,
    tag,
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
        F = lambda h: np.tanh(h @ W1 + 0.1) @ W2 + 0.5  # noqa: E731 - the test sublayer and norm, one line each
        norm = lambda h: 2.0 * h / np.linalg.norm(h, axis=-1, keepdims=True) + 0.25  # noqa: E731 - the test sublayer and norm, one line each
    elif pair == "affine":
        # F: a linear map with a bias; norm: min-max scaling of each token to [-1, 1].
        A = rng.standard_normal((d, d)) / np.sqrt(d)
        c = rng.standard_normal(d)
        F = lambda h: h @ A + c  # noqa: E731 - the test sublayer and norm, one line each
        norm = lambda h: (2 * h - h.max(-1, keepdims=True) - h.min(-1, keepdims=True)) / (  # noqa: E731 - the test sublayer and norm, one line each
            h.max(-1, keepdims=True) - h.min(-1, keepdims=True))
    elif pair == "elementwise":
        # F: an elementwise nonlinearity with a shift; norm: divide by 1 + mean |h|, then shift.
        F = lambda h: np.sin(2 * h) + 0.7  # noqa: E731 - the test sublayer and norm, one line each
        norm = lambda h: h / (1 + np.abs(h).mean(-1, keepdims=True)) - 0.1  # noqa: E731 - the test sublayer and norm, one line each
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


def _terms(expression: str) -> list:
    """The top-level terms of an expression named by ``_name``: "x + F(norm(x))" -> ["x", "F(norm(x))"]."""
    terms, depth, start, k = [], 0, 0, 0
    while k < len(expression):
        char = expression[k]
        depth += (char == "(") - (char == ")")
        if depth == 0 and expression[k:k + 3] in (" + ", " - "):
            terms.append(expression[start:k])
            start = k = k + 3
            continue
        k += 1
    return terms + [expression[start:]]


def _argument(term: str, name: str) -> str | None:
    """The argument of ``term`` if it is one call ``name(...)``, else None."""
    if not (term.startswith(name + "(") and term.endswith(")")):
        return None
    inner, depth = term[len(name) + 1:-1], 0
    for char in inner:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return None  # "norm(x) + F(x)" is two calls, not one
    return inner


SWAPPED = {frozenset(("pre", "post")): "place.pre_post_swapped",
           frozenset(("post", "output")): "place.post_output_swapped",
           frozenset(("pre", "output")): "place.pre_output_swapped"}
CAUSES = {
    "place.norm_missing": "norm was never called: every placement normalises something (the input, the sum, or "
                          "F's output).",
    "place.sublayer_missing": "F was never called: every placement runs the sublayer once.",
    "place.pre_sublayer_on_raw": "F was called on x, not on norm(x). In pre-LN the sublayer reads the normalised "
                                 "stream; only the residual carries the raw x.",
    "place.normalised_residual": "the residual you added is norm(x), not x. The identity path carries the "
                                 "un-normalised stream; only the sublayer's input is normalised.",
    "place.difference_not_sum": "a difference where a sum belongs: the sublayer's output is added to the stream.",
}


def _cause(mode: str, got: str, steps: list, log: _Log) -> str:
    """Name the likely mistakes from the expression the learner built and the call trace.

    The first cause found leads; every other mistake the expression shows follows it ("Also, ..."),
    and the diagnosis carries the ids of them all.
    """
    f_args = [argument for name, argument in steps if name == "F"]
    norm_args = [argument for name, argument in steps if name == "norm"]
    for other in MODES:
        if other != mode and got == EXPECTED[other]:
            return tag(f"that is {ORDER_NAMES[other]}, the formula of mode='{other}'. The branches of your function "
                       "handle the wrong modes: check which formula sits under which `if mode == ...`.",
                       SWAPPED[frozenset((mode, other))])
    found = []  # mistake ids, in the order their diagnoses are given
    no_norm, no_f = not log.count("norm"), not log.count("F")
    if no_norm:
        found.append("place.norm_missing")
    if no_f:
        found.append("place.sublayer_missing")
    terms, norm_placed = [], True
    if got != "?":
        # what should read "x + F(...)" (post-LN: inside the outer norm) and whether the norm sits where it belongs
        inner = _argument(got, "norm") if mode == "post" else None
        body = inner if inner is not None else got
        terms = _terms(body)
        if mode == "post":
            norm_placed = inner is not None
        elif mode == "output":
            norm_placed = any((_argument(t, "norm") or "").startswith("F(") for t in terms)
        if norm_placed or no_norm:
            if "x" not in terms and "norm(x)" not in terms:
                found.append("place.residual_missing")
    if mode == "pre" and not no_norm and "x" in f_args and "norm(x)" not in f_args:
        found.append("place.pre_sublayer_on_raw")
    if mode in ("post", "output") and "x" not in f_args and "norm(x)" in f_args:
        found.append("place.sublayer_on_normalised")
    if (norm_placed or mode == "pre") and "norm(x)" in terms and "x" not in terms:
        found.append("place.normalised_residual")
    if " - " in got:
        found.append("place.difference_not_sum")
    if not found and norm_args:
        if mode == "post" and (not norm_placed or (got == "?" and norm_args[-1] != "x + F(x)")):
            found.append("place.post_norm_input")
        if mode == "output" and (not norm_placed or (got == "?" and norm_args[-1] != "F(x)")):
            found.append("place.output_norm_input")
    if not found:
        if got == "?":
            return ("the result is not x, F(...), norm(...) or a sum of two of them: something else was changed "
                    "(a reshape that reorders values, an extra factor, a different axis).")
        return "compare your expression with the formula term by term."
    texts = []
    for mistake in found:
        if mistake == "place.residual_missing":
            texts.append("the residual x was not added. The identity path is the point of a residual block: whatever "
                         "F contributes is added to x" + (", before the norm." if mode == "post" else "."))
        elif mistake == "place.sublayer_on_normalised":
            texts.append(f"F was called on norm(x), but in mode='{mode}' the sublayer reads the raw stream x; the norm "
                         "comes after F.")
        elif mistake == "place.post_norm_input":
            texts.append(f"post-LN normalises the sum x + F(x), but norm was called on {norm_args[-1]}.")
        elif mistake == "place.output_norm_input":
            texts.append(f"the output norm normalises what F wrote, F(x), but norm was called on {norm_args[-1]}.")
        else:
            texts.append(CAUSES[mistake])
    return tag(" Also, ".join(texts), *found)


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


def _about_the_mode(message: str, mode) -> bool:
    """Whether a ValueError's message is about the mode (names it, the word mode, or a valid mode), or is empty."""
    text = message.strip().lower()
    return (not text or "mode" in text or any(m in text for m in MODES)
            or (isinstance(mode, str) and bool(mode) and mode.lower() in text))


def _call(residual_sublayer, x, F, norm, mode, what):
    try:
        return call_learner(residual_sublayer, x, F, norm, mode, what=what, shape_rule=SHAPE_RULE)
    except LearnerError:
        raise
    except CheckFailed as failure:
        if "in place" in str(failure):
            fail(f"{what} changed the caller's x in place (x += ..., x[...] = ..., or np.add(x, ..., out=x)).\n"
                 "The caller's residual stream must survive the call: the next sublayer, and the backward pass, "
                 "still need it. Build a new array: h = x + F(x), then return norm(h).", "common.modified_input")
        raise  # e.g. a check's own verdict raised inside F or norm: its ids travel with it


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
                if not _about_the_mode(error.error_message, mode):
                    raise  # a ValueError of some other computation: the general diagnosis fits better
                raise error.with_cause(tag(
                    f"{mode!r} is one of the three valid modes {MODES}: a typo in a string you compare the mode "
                    f"with, or a branch for {mode!r} that is missing. See it: residual_sublayer(x, F, norm, "
                    f"{mode!r}).", "place.valid_mode_rejected")) from None
            y = strict_array(y, what, shape)
            got, steps = _describe(y, x, log)
            if got != EXPECTED[mode]:
                cause = _cause(mode, got, steps, log)
                fail(f"{what} is wrong.\n"
                     f"  mode={mode!r} means {EXPECTED[mode]}\n"
                     f"  you returned      {got if got != '?' else 'something else: ' + preview(y)}\n"
                     f"  (the trace: {_trace_text(steps)})\n"
                     f"Likely cause: {cause}\n"
                     f"See it: print(describe_composition(residual_sublayer, {mode!r})).", *ids_of(cause))
            for name in ("F", "norm"):
                if log.count(name) > 1:
                    fail(f"{what} returned {got}, which is right, but called {name} {log.count(name)} times "
                         f"(the trace: {_trace_text(steps)}).\n"
                         f"Likely cause: you compute more than one placement, or the same term twice, and then pick "
                         f"one. Call {name} exactly once: a sublayer is the expensive part of a block, and with "
                         "dropout two calls do not even agree. Compute only the formula the mode asks for.",
                         "place.repeated_calls")
    shown = ", ".join(f"{m}: {EXPECTED[m]}" for m in modes)
    passed(f"residual_sublayer builds {shown}  ({len(shapes)} shapes, test functions '{pair}')")


def _returns_like(residual_sublayer, mode, d: int, seed: int):
    """The valid mode whose formula ``residual_sublayer`` computes for ``mode``, or None (raised, or anything else)."""
    x = random_input((2, d), seed=seed + 1)
    F, norm, log = _recorders("mlp", d, seed + 1)
    try:
        result = call_learner(residual_sublayer, x, F, norm, mode, what="probe")
        got, _ = _describe(np.asarray(result, dtype=np.float64), x, log)
    except (CheckFailed, NotImplementedError, TypeError, ValueError):
        return None
    return next((m for m in MODES if got == EXPECTED[m]), None)


def _implemented(residual_sublayer, d: int, seed: int) -> bool:
    """Whether a valid mode runs (so that a NotImplementedError for an invalid one is the learner's answer)."""
    x = random_input((2, d), seed=seed)
    F, norm, _ = _recorders("mlp", d, seed)
    try:
        call_learner(residual_sublayer, x, F, norm, "pre", what="probe")
    except (CheckFailed, NotImplementedError):
        return False
    return True


WRONG_EXCEPTIONS = {  # kind -> (the usual way it arises, its id), when it is not raised on purpose
    "KeyError": ("a dictionary lookup table[mode] raises KeyError for a missing key; test "
                 "`if mode not in table:` first and raise ValueError yourself.", "place.dict_key_error"),
    "AssertionError": ("`assert` raises AssertionError, and disappears altogether under `python -O`; use "
                       "`raise ValueError(...)` for bad arguments.", "place.assert_validation"),
    "AttributeError": ("a method was called on the mode ({mode!r} has no such method, e.g. None.lower()); compare the "
                       "mode with the three strings as it is.", "place.method_on_mode"),
    "TypeError": ("an operation on the mode failed before your check ran; compare the mode with the three strings "
                  "first, before using it.", "place.mode_used_unchecked"),
}
ON_PURPOSE = "any mode other than the three must raise ValueError explicitly."


@check
def check_residual_sublayer_rejects(residual_sublayer, invalid_modes=VISIBLE_INVALID, d: int = 5, seed: int = 0):
    """Every mode other than "pre", "post", "output" must raise ValueError naming the valid modes."""
    from grader.compare import _learner_line

    x = random_input((2, d), seed=seed)
    for mode in invalid_modes:
        F, norm, log = _recorders("mlp", d, seed)
        what = f"residual_sublayer(x, F, norm, mode={mode!r})"
        try:
            result = _call(residual_sublayer, x, F, norm, mode, what)
        except NotImplementedError as raised:
            # the unwritten exercise, unless the valid modes work: then it is the learner's answer to a bad mode
            if not _implemented(residual_sublayer, d, seed):
                raise
            where = _learner_line(raised, residual_sublayer)
            line = f"\n  in your code, {where}" if where else ""
            fail(f"{what} raised NotImplementedError({str(raised)!r}), expected ValueError.{line}\n"
                 f"Likely cause: {ON_PURPOSE}", "place.wrong_exception")
        except LearnerError as raised:
            kind, message = raised.error_type, raised.error_message
            if isinstance(raised.error, ValueError) or kind == "ValueError":
                missing = [m for m in MODES if m not in message]
                if missing:
                    fail(f"{what} raised ValueError({message!r}): right exception, unhelpful message.\n"
                         f"The message does not mention {', '.join(repr(m) for m in missing)}. Name the mode you got "
                         "and the valid ones, e.g. ValueError(f\"mode must be 'pre', 'post' or 'output', got "
                         "{mode!r}\"), so whoever called it can fix the call.", "place.unhelpful_error")
                continue
            # the learner raised the wrong kind of exception: by a `raise` of their own, or as a side effect
            where = str(raised).split("  in your code, ", 1)
            source = where[1].split("\n", 1)[0] if len(where) > 1 else ""
            line = ("\n  in your code, " + source) if source else ""
            on_purpose = source.split(": ", 1)[-1].lstrip().startswith("raise ")
            hint, mistake = (ON_PURPOSE, "place.wrong_exception") if on_purpose else WRONG_EXCEPTIONS.get(
                kind, (ON_PURPOSE, "place.wrong_exception"))
            fail(f"{what} raised {kind}({message!r}), expected ValueError.{line}\n"
                 f"Likely cause: {hint.replace('{mode!r}', repr(mode))}", mistake)
        # No exception at all: say what the function did with the unknown mode.
        if result is None:
            fail(f"{what} returned None instead of raising ValueError.\n"
                 "Likely cause: your if/elif chain has no final `else: raise ValueError(...)`, so an unknown mode "
                 "falls off the end of the function.", "place.missing_raise")
        try:
            got, _ = _describe(np.asarray(result, dtype=np.float64), x, log)
        except (TypeError, ValueError):
            got = "?"
        like = next((m for m in MODES if got == EXPECTED[m]), None)
        # A mode that normalises to a valid one may still reach an `else:`: ask once more with a mode that does not.
        normalised = like is not None and isinstance(mode, str) and mode.strip().lower() == like
        if normalised and _returns_like(residual_sublayer, "no such mode", d, seed) == like:
            normalised = False
        if normalised:
            cause = tag(f"{mode!r} was treated as {like!r}: you lower-cased or stripped the mode. Modes are exact "
                        f"strings; a caller who writes {mode!r} has made a mistake you should report, not guess at.",
                        "place.mode_normalised")
        elif like is not None:
            cause = tag(f"{mode!r} was treated like {like!r} (you returned {got}): an `else:` branch catches every "
                        f"other mode. Give {like!r} its own `elif mode == {like!r}:` and raise ValueError in the "
                        "else.", "place.else_catches_all")
        else:
            cause = tag("any mode other than 'pre', 'post' and 'output' must raise ValueError before anything is "
                        "returned.", "place.invalid_mode_accepted")
        fail(f"{what} returned a result instead of raising ValueError.\nLikely cause: {cause}", *ids_of(cause))
    passed(f"residual_sublayer raises a helpful ValueError for {len(invalid_modes)} invalid modes: "
           + ", ".join(repr(m) for m in invalid_modes))


# ================================================================ QK-norm attention logits
# The oracle is torch's own RMSNorm (grader.oracles.rms_norm, float64) with the gains as its
# weight, then one matrix product: no formula of the exercise is written here. torch is
# imported on first use, inside the oracle.
QK_RTOL = 1e-9
# (leading shape, T_q, T_k, d_k, eps): two-dimensional cases first, so that a mistake that only
# batched inputs reveal (k.T reverses every axis) is recognised by the cases that came before it.
QK_VISIBLE = (((), 5, 5, 8, 1e-6), ((), 3, 6, 16, 1e-6), ((2,), 4, 4, 8, 1e-6))
QK_SHAPE_RULE = ("qk_norm_logits must accept any leading shape (..., T, d_k): normalise over the last axis only, "
                 "and swap only the last two axes of the keys (np.swapaxes(k, -1, -2)); k.T reverses every axis.")
PROBE_TOL = 1e-4  # probes run with eps = 0: what must not change agrees to rounding, and a change is O(1)


def _qk_inputs(lead: tuple, t_q: int, t_k: int, d_k: int, seed: int):
    """Queries and keys of different sizes and nonzero means, and two different gains."""
    rng = np.random.default_rng(7000 + seed)

    def tokens(t):
        scale = np.exp(rng.uniform(-1.0, 1.5, size=lead + (t, 1)))     # tokens of different sizes
        offset = rng.uniform(0.3, 1.0, size=lead + (t, 1))            # and a mean away from zero
        return scale * (rng.standard_normal(lead + (t, d_k)) + offset)

    q, k = tokens(t_q), tokens(t_k)
    g_q = rng.uniform(0.5, 2.0, size=d_k)
    g_k = rng.uniform(0.5, 2.0, size=d_k)
    return q, k, g_q, g_k


def _qk_oracle(q, k, g_q, g_k, eps):
    """torch's RMSNorm with the gains as weights, then the scaled dot products: (..., T_q, T_k)."""
    from grader import oracles

    q_n, k_n = oracles.rms_norm(q, eps, g_q), oracles.rms_norm(k, eps, g_k)
    return np.matmul(q_n, np.swapaxes(k_n, -1, -2)) / np.sqrt(q.shape[-1])


def _in_precision(dtype, oracle, *args):
    from grader import oracles

    return oracles.in_precision(dtype, oracle, *args)


def _qk_call(qk_norm_logits, q, k, g_q, g_k, eps, what):
    return call_learner(qk_norm_logits, q, k, g_q, g_k, eps=eps, what=what, shape_rule=QK_SHAPE_RULE)


def _qk_same(a, b, tol=PROBE_TOL) -> bool:
    return a.shape == b.shape and relative_error(a, b, floor=1e-12) < tol


def _qk_probe(qk_norm_logits, q, k, g_q, g_k):
    """What changes when one query, or one key, is made three times longer, or when every
    query and key is shifted by a constant. Run with eps = 0, where QK-norm is exactly scale
    invariant. Returns a cause (tagged) or None."""
    base = np.asarray(_qk_call(qk_norm_logits, q, k, g_q, g_k, 0.0, "probe"), dtype=np.float64)
    findings = []
    for side in ("q", "k"):
        bigger_q, bigger_k = q.copy(), k.copy()
        if side == "q":
            bigger_q[..., 0, :] *= 3.0
        else:
            bigger_k[..., 0, :] *= 3.0
        out = np.asarray(_qk_call(qk_norm_logits, bigger_q, bigger_k, g_q, g_k, 0.0, "probe"), dtype=np.float64)
        if out.shape != base.shape or _qk_same(out, base):
            continue
        line = (lambda a: a[..., 0, :]) if side == "q" else (lambda a: a[..., :, 0])
        rest = (lambda a: a[..., 1:, :]) if side == "q" else (lambda a: a[..., :, 1:])
        if _qk_same(line(out), 3.0 * line(base)) and _qk_same(rest(out), rest(base)):
            findings.append(side)
        else:
            return tag(f"making one {'query' if side == 'q' else 'key'} three times longer changed the logits of "
                       f"other {'queries' if side == 'q' else 'keys'} too. Each query and each key is normalised on "
                       "its own: the mean square is taken over the last axis (the d_k features of that one vector), "
                       "not over the tokens or over the whole array.", "place.qk_norm_axis")
    if findings:
        which = " and ".join({"q": "the queries", "k": "the keys"}[s] for s in findings)
        return tag(f"{which} {'are' if len(findings) == 1 else 'are both'} not normalised: making one of them three "
                   "times longer made its logits three times larger. QK-norm divides every query and every key by "
                   "its own RMS, so the length of either never reaches the logits.", "place.qk_unnormalised_side")
    shifted = np.asarray(_qk_call(qk_norm_logits, q + 2.5, k - 1.5, g_q, g_k, 0.0, "probe"), dtype=np.float64)
    if shifted.shape == base.shape and _qk_same(shifted, base):
        return tag("adding a constant to every feature of the queries and keys left your logits unchanged, so you "
                   "subtracted each vector's mean (a LayerNorm). QK-norm here is an RMSNorm: divide by the root of "
                   "the mean square, with no centring.", "place.qk_mean_subtracted")
    return None


def _qk_explain(got, q, k, g_q, g_k, eps):
    """The learner's logits read as the oracle with a gain left out and/or a wrong overall factor."""
    _, width = q.shape[-2:]  # d_k
    ones = np.ones(width)
    gains = [((g_q, g_k), ()), ((ones, g_k), ("g_q",)), ((g_q, ones), ("g_k",)), ((ones, ones), ("g_q", "g_k"))]
    factors = [(1.0, None), (np.sqrt(width), "sqrt"), (1.0 / width, "l2"), (1.0 / np.sqrt(width), "l2")]
    for (a, b), missing in gains:
        reference = _qk_oracle(q, k, a, b, eps)
        for factor, kind in factors:
            if (missing or kind) and _qk_same(got, factor * reference):
                texts, ids = [], []
                if missing:
                    texts.append(f"{' and '.join(missing)} {'was' if len(missing) == 1 else 'were'} not applied: "
                                 "each normalised vector is multiplied by its own gain, feature by feature (g_q for "
                                 "the queries, g_k for the keys), before the dot product.")
                    ids.append("place.qk_gain_missing")
                if kind == "sqrt":
                    texts.append(f"your logits are sqrt(d_k) = {np.sqrt(width):g} times too large: the dot product "
                                 "is divided by sqrt(d_k), as in every attention layer.")
                    ids.append("place.qk_missing_sqrt_dk")
                elif kind == "l2":
                    texts.append(f"your logits are {1 / factor:g} times too small, the signature of unit-length "
                                 "(L2-normalised) vectors: after an RMSNorm a vector has length sqrt(d_k), not 1. "
                                 "Divide by the root of the mean square, not by the length.")
                    ids.append("place.qk_l2_normalised")
                return tag(" Also, ".join(texts), *ids)
    return None


@check
def check_qk_norm_logits(qk_norm_logits, cases=QK_VISIBLE, seed: int = 0):
    """Compare qk_norm_logits with torch's RMSNorm and a matrix product, on each case
    (leading shape, T_q, T_k, d_k, eps); diagnose from what changes when one vector grows."""
    two_d_passed = False
    for n, (lead, t_q, t_k, d_k, eps) in enumerate(cases):
        lead = tuple(lead)
        q, k, g_q, g_k = _qk_inputs(lead, t_q, t_k, d_k, seed + n)
        shape = lead + (t_q, t_k)
        what = (f"qk_norm_logits(q, k, g_q, g_k, eps={eps:g}) for q of shape {lead + (t_q, d_k)} and k of shape "
                f"{lead + (t_k, d_k)}")
        try:
            got = _qk_call(qk_norm_logits, q, k, g_q, g_k, eps, what)
        except LearnerError as error:
            if lead and two_d_passed and is_shape_error(error.error_type, error.error_message):
                raise error.with_cause(tag(
                    "your function works on one head (two axes) but not on a batch of them: k.T (or np.transpose(k)) "
                    "reverses every axis, so for k of shape (..., T_k, d_k) it moves the batch axes too. Swap only "
                    "the last two: np.swapaxes(k, -1, -2).", "place.qk_transpose_all_axes")) from None
            raise
        if isinstance(got, np.ndarray) and got.shape != shape:
            if got.shape == lead + (t_k, t_q) and t_q != t_k:
                fail(f"{what} returned shape {got.shape}, expected {shape}.\nLikely cause: the logits are "
                     "transposed. Row i belongs to query i and column j to key j: logits[..., i, j] = q_i . k_j, "
                     "so multiply the queries by the transposed keys, in that order.", "place.qk_transposed")
            if lead and two_d_passed:
                fail(f"{what} returned shape {got.shape}, expected {shape}.\nLikely cause: k.T (or np.transpose(k)) "
                     "reverses every axis, batch axes included; swap only the last two: np.swapaxes(k, -1, -2).",
                     "place.qk_transpose_all_axes")
        got = strict_array(got, what, shape)
        expected = _qk_oracle(q, k, g_q, g_k, eps)
        if relative_error(got, expected, floor=1e-12) <= QK_RTOL:
            two_d_passed = two_d_passed or not lead
            continue
        cause = None
        if t_q == t_k and _qk_same(got, np.swapaxes(expected, -1, -2)):
            cause = tag("your logits are the transpose of the expected ones: row i belongs to query i and column j "
                        "to key j, logits[..., i, j] = q_i . k_j. Multiply the queries by the transposed keys, in "
                        "that order.", "place.qk_transposed")
        if cause is None:
            cause = _qk_probe(qk_norm_logits, q, k, g_q, g_k)
        if cause is None:
            cause = _qk_explain(got, q, k, g_q, g_k, eps)
        if cause is None and relative_error(got, _qk_oracle(q, k, g_q, g_k, 0.0), floor=1e-12) <= QK_RTOL:
            cause = tag(f"your logits are those of eps = 0: eps = {eps:g} was not used. It is added to each vector's "
                        "mean square, inside the square root, as in notebook 04's RMSNorm.", "common.eps_not_used")
        probe = Probe(lambda e, dt, q=q, k=k, g_q=g_q, g_k=g_k: _in_precision(dt, _qk_oracle, q, k, g_q, g_k, e),
                      eps)
        if cause is None:
            cause = probe.cause(got, expected, QK_RTOL, 1e-12, None)
        if cause is None:
            cause = ("no classic mistake matched. Check each step against the formula: RMSNorm over the last axis "
                     "with eps added to the mean square inside the square root, then the gains, then q_i . k_j "
                     "divided by sqrt(d_k).")
        assert_close(got, expected, what, "torch rms_norm, then q k^T / sqrt(d_k)", QK_RTOL, cause, floor=1e-12,
                     probe=probe)
    passed(f"qk_norm_logits agrees with torch's RMSNorm on {len(cases)} cases (shapes, T_q != T_k, batches)")
