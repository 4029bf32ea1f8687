"""Strict, diagnosing comparison of what a learner's function returned.

Rules (design.md, "Strict comparisons"): exact type and shape, no broadcasting, finite
values, a private float64 copy made before any arithmetic, so an object that overrides
``__eq__`` or ``__array_ufunc__`` never gets to judge itself.
"""
from __future__ import annotations

import functools
import inspect
import threading

import numpy as np

from grader.boundary import RemoteFunction, SandboxError, Unsupported
from grader.numerics import relative_error


class Diagnosis(str):
    """The text of a diagnosis, carrying the ids of the misconceptions it names (``grader.catalogue``).

    A plain ``str`` everywhere else, so the message code that builds sentences needs no
    change; ``ids`` survive only as long as the object itself is passed on (an f-string
    around it makes a plain str: collect the ids first with ``ids_of``).
    """

    ids: tuple = ()


def tag(text: str, *ids: str) -> Diagnosis:
    """``text`` as a Diagnosis naming ``ids`` (plus any ids ``text`` already carries)."""
    tagged = Diagnosis(text)
    tagged.ids = tuple(dict.fromkeys(ids_of(text) + tuple(ids)))
    return tagged


def ids_of(*values) -> tuple:
    """The misconception ids carried by any Diagnosis among ``values``, in order, without repeats."""
    found = []
    for value in values:
        found.extend(getattr(value, "ids", ()) if isinstance(value, str) else ())
    return tuple(dict.fromkeys(found))


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message says what and why.

    ``misconceptions``: the catalogue ids the diagnosis names (empty when no classic
    mistake matched); ``check``: the public check that failed, e.g. ``"check_rms_norm"``.
    """

    def __init__(self, message: str = "", *ids: str, check: str | None = None):
        super().__init__(message)
        self.misconceptions = tuple(dict.fromkeys(ids_of(message) + tuple(ids)))
        self.check = check

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback through grader frames: the diagnosis alone."""
        where = f" in {self.check}" if self.check else ""
        lines = str(self).strip("\n").splitlines() or ["(no message)"]
        return [f"\x1b[0;31m{type(self).__name__}{where}\x1b[0m: {lines[0]}"] + lines[1:]


class NotWrittenYet(NotImplementedError):
    """An exercise still raising its stub's ``NotImplementedError``: a to-do, not a crash.

    Still a ``NotImplementedError`` (code that waits for one keeps working); in IPython, and so in
    nbgrader's Validate, it shows as one line without any frame (``_render_traceback_``).
    """

    def __init__(self, name: str, check: str | None = None):
        self.name, self.check = name, check
        super().__init__(f"{name} is not written yet: replace the `raise NotImplementedError` in the cell that "
                         f"defines it (above), then run this check again.")

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;33m{self.name} is not written yet\x1b[0m: replace the `raise NotImplementedError` in the "
                "cell that defines it (above), then run this check again."]


def _unwritten_name(error: BaseException, subject) -> str:
    """The function whose stub raised: the deepest learner frame of the traceback, else the checked function."""
    import traceback

    name = None
    try:
        for frame in traceback.extract_tb(error.__traceback__):
            if not _is_library_file(frame.filename) and frame.name.isidentifier():
                name = frame.name
    except Exception:  # noqa: BLE001 - a hostile traceback: name the subject
        name = None
    if name is None or name in ("wrapped", "run"):
        name = getattr(subject, "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else "this exercise"


def fail(message: str, *ids: str) -> None:
    raise CheckFailed("\n" + message.strip() + "\n", *ids_of(message), *ids)


# ------------------------------------------------------------------ who watches the checks
_observers: list = []
_state = threading.local()


def add_observer(callback) -> None:
    """Call ``callback(event)`` after every outermost check: a dict with ``check``, ``subject``
    (the learner function's name), ``outcome`` ("passed", "failed", "not_implemented" or
    "error"), ``misconceptions`` (ids) and ``message`` (the first 500 characters).

    The learner side keeps its attempt log this way (``grader.learner``). An observer's own
    exception is swallowed: it never changes a verdict, and writes nothing (nbgrader zeroes a
    test cell that writes to stderr).
    """
    if callback not in _observers:
        _observers.append(callback)


def remove_observer(callback) -> None:
    if callback in _observers:
        _observers.remove(callback)


def _notify(event: dict) -> None:
    for callback in list(_observers):
        try:
            callback(event)
        except Exception:  # noqa: BLE001 - see add_observer
            pass


def check(function):
    """Mark a public check: failures name it, and observers hear of each outermost call."""
    name = function.__name__

    @functools.wraps(function)
    def run(subject, *args, **kwargs):
        depth = getattr(_state, "depth", 0)
        _state.depth = depth + 1
        event = {"check": name, "subject": getattr(subject, "__name__", None), "outcome": "error",
                 "misconceptions": (), "message": ""}
        try:
            result = function(subject, *args, **kwargs)
            event["outcome"] = "passed"
            return result
        except CheckFailed as failure:
            if failure.check is None:
                failure.check = name
            event.update(outcome="failed", misconceptions=failure.misconceptions, message=str(failure).strip()[:500])
            raise
        except NotImplementedError as error:
            event["outcome"] = "not_implemented"
            if depth == 0 and not isinstance(error, NotWrittenYet):
                raise NotWrittenYet(_unwritten_name(error, subject), name) from None
            raise
        finally:
            _state.depth = depth
            if depth == 0 and _observers:
                _notify(event)

    return run


def preview(array: np.ndarray, limit: int = 6) -> str:
    """A short, readable rendering of an array for failure messages."""
    flat = np.asarray(array).ravel()
    shown = np.array2string(flat[:limit], precision=4, suppress_small=True, separator=", ")
    more = f" ... ({flat.size} values)" if flat.size > limit else ""
    return shown + more


def preview_pair(expected: np.ndarray, actual: np.ndarray, limit: int = 6) -> tuple[str, str, str]:
    """(expected, got, note) renderings that differ visibly when the arrays differ.

    At 4 decimals a float32 rounding or an eps off by 1e-6 prints identically; then both are shown
    with as many significant digits as it takes, and the note names the entry that differs most.
    """
    shown_e, shown_a = preview(expected, limit), preview(actual, limit)
    expected, actual = np.asarray(expected, dtype=np.float64), np.asarray(actual, dtype=np.float64)
    if shown_e != shown_a or expected.shape != actual.shape or not expected.size:
        return shown_e, shown_a, ""
    index = np.unravel_index(int(np.argmax(np.abs(actual - expected))), expected.shape)
    e, a = float(expected[index]), float(actual[index])
    if e == a:
        return shown_e, shown_a, ""
    digits = next((p for p in range(5, 18) if f"{e:.{p}g}" != f"{a:.{p}g}"), 17)
    at = tuple(int(i) for i in index)
    note = (f"  they print alike at 4 decimals; the largest difference is at index {at}: "
            f"expected {e:.{digits}g}, got {a:.{digits}g}\n")
    return shown_e, shown_a, note


def strict_array(value, what: str, shape: tuple, dtype=np.float64) -> np.ndarray:
    """Validate a returned array and give back a private float64 copy of it.

    ``what`` names the value in messages, e.g. ``"layer_norm_vjp(x, g)"``.
    """
    if type(value) is not np.ndarray:
        kind = (value.type_name if isinstance(value, Unsupported)
                else type(value).__module__ + "." + type(value).__name__)
        hint, mistake = "", "common.not_an_array"
        if isinstance(value, np.ndarray) or "subclass of numpy.ndarray" in kind:
            hint = " Return a plain array (np.asarray(result)), not a subclass."
        elif kind.startswith("torch"):
            hint = " Convert with .detach().numpy(), or compute with numpy throughout."
            mistake = "common.torch_returned"
        elif isinstance(value, (list, tuple)):
            hint = " Wrap it with np.array(...)."
        elif value is None:
            hint, mistake = " Did you forget the return statement?", "common.returned_none"
        fail(f"{what} should return a numpy.ndarray, but returned {kind}.{hint}", mistake)
    if value.shape != tuple(shape):
        fail(
            f"{what} returned shape {value.shape}, expected {tuple(shape)}.\n"
            "Shapes must match exactly: a (d,) result is not a (1, d) or (d, 1) one. Check keepdims= "
            "on your reductions and any reshape.",
            "common.wrong_shape",
        )
    if value.dtype != dtype:
        fail(
            f"{what} returned dtype {value.dtype}, expected {np.dtype(dtype)}.\n"
            "Keep the input's precision: avoid .astype(np.float32), Python lists of mixed types, "
            "or integer arrays (e.g. np.zeros_like on an integer input).",
            "common.wrong_dtype",
        )
    copy = np.array(value, dtype=np.float64, copy=True)
    bad = ~np.isfinite(copy)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        fail(
            f"{what} contains {int(bad.sum())} non-finite value(s) (first at index {index}: {copy[index]}).\n"
            "NaN or inf usually means a division by zero: is eps inside the square root, "
            "and do you divide by s = sqrt(var + eps) rather than by the variance?",
            "common.non_finite",
        )
    return copy


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str, oracle: str, rtol: float,
                 likely_cause: str | None, floor: float = 0.0, probe: "Probe | None" = None) -> None:
    """Fail with expected/got/error and a diagnosis when the relative error exceeds ``rtol``.

    ``floor``: the natural size of the answer (see ``relative_error``). ``probe``: re-evaluates the
    reference at other eps values and in lower precision, to name those causes (``Probe``).
    """
    error = relative_error(actual, expected, floor)
    if error <= rtol:
        return
    if probe is not None:
        likely_cause = probe.cause(actual, expected, rtol, floor, likely_cause)
    cause = likely_cause or "no classic mistake matched; compare your formula with the derivation term by term."
    shown_e, shown_a, note = preview_pair(expected, actual)
    fail(
        f"{what} is wrong.\n"
        f"  expected ({oracle}): {shown_e}\n"
        f"  got:{' ' * (len(oracle) + 9)}{shown_a}\n"
        f"{note}"
        f"  relative error {error:.2e} (tolerance {rtol:.0e})\n"
        f"Likely cause: {cause}",
        *ids_of(likely_cause),
    )


EPS_CANDIDATES = (1e-5, 1e-6, 1e-8, 1e-12, 1e-3, 1e-4, 1e-7, 1e-10, 0.0)  # the eps values code from the wild hard-codes


class Probe:
    """Causes read off the reference itself, re-evaluated: at another eps, or in lower precision.

    ``reference(eps, dtype)`` gives the oracle's answer (as float64) for the same inputs, with another
    ``eps`` or computed in torch's ``dtype`` ("float64", "float32", "bfloat16"); ``pick`` selects the
    compared part of a tuple answer. ``eps_ids``: (hard-coded, ignored) catalogue ids; ``precision_ids``:
    (float32, bfloat16) ids. A match at another eps is exact (within the check's tolerance) and overrides
    any other cause; lower precision overrides only when the output itself is a float32/bfloat16 number,
    else it is named when nothing else matched and the error has the size that precision leaves.
    """

    def __init__(self, reference, eps: float | None, eps_ids=("common.eps_not_used", "common.eps_not_used"),
                 precision_ids=("common.lower_precision", "common.lower_precision"), input_dtype=np.float64):
        self.reference, self.eps = reference, eps
        self.eps_ids, self.precision_ids = eps_ids, precision_ids
        self.input_dtype = np.dtype(input_dtype)

    def _at(self, eps, dtype):
        try:
            with np.errstate(all="ignore"):
                value = np.asarray(self.reference(eps, dtype), dtype=np.float64)
        except Exception:  # noqa: BLE001 - a probe must never change a verdict
            return None
        return value if np.all(np.isfinite(value)) else None

    def eps_cause(self, actual, expected, rtol, floor):
        if self.eps is None:
            return None
        best, matches = None, {}
        for candidate in EPS_CANDIDATES:
            if abs(candidate - self.eps) <= 1e-9 * max(abs(candidate), abs(self.eps)):
                continue
            other = self._at(candidate, "float64")
            if other is None or other.shape != actual.shape or relative_error(other, expected, floor) <= rtol:
                continue  # this eps does not change the answer here: it tells nothing
            error = relative_error(actual, other, floor)
            if error <= (min(rtol, 1e-7) if self.input_dtype == np.float64 else rtol / 4):
                matches[candidate] = error
                if best is None or error < best[1]:
                    best = (candidate, error)
        if best is None:
            return None
        value = best[0]
        if any(c <= 1e-10 for c in matches) and (value <= 1e-10 or min(e for c, e in matches.items() if c <= 1e-10)
                                                 <= max(10 * best[1], 1e-10)):
            value = 0.0  # eps = 0 and a negligible eps (1e-12) give the same numbers: "ignored" is the reading
        if value == 0:
            return tag(f"your output matches the reference computed with eps = 0 (or a negligible eps such as "
                       f"1e-12), not with the eps={self.eps:g} passed in: eps is ignored. Use the eps argument, inside "
                       f"the square root.", self.eps_ids[1])
        return tag(f"your output matches the reference at eps={value:g}, not at the eps={self.eps:g} passed in: "
                   "eps is hard-coded (or a default of yours is used). Use the eps argument itself.", self.eps_ids[0])

    def precision_cause(self, actual, expected, rtol, floor, have_cause):
        if self.input_dtype != np.float64:
            return None
        error = relative_error(actual, expected, floor)
        values, reference = actual[np.isfinite(actual)], expected[np.isfinite(expected)]
        rounders = {"bfloat16": _bfloat16, "float32": lambda v: v.astype(np.float32).astype(np.float64)}
        levels = {}
        for which in ("bfloat16", "float32"):  # a bfloat16 number is a float32 number too: the narrower first
            low = self._at(self.eps, which)
            levels[which] = (relative_error(low, expected, floor) if low is not None and low.shape == actual.shape
                             else None)
            rounded = values.size >= 2 and np.all(values == rounders[which](values)) \
                and not np.all(reference == rounders[which](reference))
            level = levels[which]
            if rounded and level and error <= 100 * level:  # the output itself is a lower-precision number, off
                return self._precision_tag(which, error, level)  # by what that precision leaves: conclusive
        if have_cause:
            return None
        for which in ("float32", "bfloat16"):
            level = levels[which]
            if level is not None and level > 0 and level / 10 <= error <= level * 10 and error < 0.5:
                return self._precision_tag(which, error, level)
        return None

    def _precision_tag(self, which, error, level):
        ident = self.precision_ids[0 if which == "float32" else 1]
        name = "float32" if which == "float32" else "bfloat16 (or float16)"
        size = f" ({level:.1e} for the reference computed that way)" if level else ""
        return tag(f"your output matches a {name} evaluation: the error ({error:.1e}) is the size {name} rounding "
                   f"leaves{size}, not a formula mistake. Part of your computation runs in lower precision "
                   "(np.float32, .astype, .float(), a torch tensor created without dtype=torch.float64); keep the "
                   "input's float64 throughout.", ident)

    def cause(self, actual, expected, rtol, floor, likely_cause):
        found = self.eps_cause(actual, expected, rtol, floor)
        if found is not None and set(ids_of(found)) <= set(ids_of(likely_cause)):
            return likely_cause  # the check's own words for the same mistake
        if found is None:
            found = self.precision_cause(actual, expected, rtol, floor, likely_cause is not None)
        return found if found is not None else likely_cause


def _bfloat16(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to bfloat16 (8 significant bits), to nearest even, as float64."""
    as32 = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((as32 + 0x7FFF + ((as32 >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def call_learner(function, *args, what: str, shape_rule: str | None = None, **kwargs):
    """Call a learner's function on private copies of the inputs; fail if it modifies them.

    An exception raised by the learner's code becomes a ``LearnerError`` (a ``CheckFailed``
    whose message is a diagnosis; see ``learner_error``). ``shape_rule`` is the sentence a
    shape error gets as its likely cause, e.g. "layernorm must accept any shape (..., d): ...".
    """
    originals = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    result = run_learner(function, copies, kwargs, what=what, shape_rule=shape_rule)
    for original, copy in zip(originals, copies, strict=True):
        if isinstance(original, np.ndarray) and not np.array_equal(original, copy):
            fail(
                f"{what} modified its input array in place (e.g. x -= mu).\n"
                "The caller still needs x: work on a new array (x - mu) instead.",
                "common.modified_input",
            )
    return result


# ------------------------------------------------------------------ the learner's exceptions
class LearnerError(CheckFailed):
    """The learner's code raised inside a check; the message is the diagnosis.

    ``error`` is what was raised (under ``grader grade``: rebuilt from the sandbox's report,
    where a non-builtin type such as numpy's AxisError arrives as ``LearnerException`` with
    its name in the message); ``error_type`` and ``error_message`` read both forms alike.
    """

    def __init__(self, message: str, error: BaseException, what: str, *ids: str):
        super().__init__(message, *ids)
        self.error, self.what = error, what

    @property
    def error_type(self) -> str:
        return _error_parts(self.error)[0]

    def with_cause(self, cause: str) -> "LearnerError":
        """The same diagnosis (call, exception, line) with another likely cause."""
        head = str(self).rsplit("Likely cause:", 1)[0].rstrip("\n")
        ids = ids_of(cause) or self.misconceptions
        return LearnerError(head + f"\nLikely cause: {cause}\n", self.error, self.what, *ids)

    @property
    def error_message(self) -> str:
        return _error_parts(self.error)[1]


MESSAGE_LIMIT = 600      # characters of the learner's exception message shown in a diagnosis
LINE_LIMIT = 200         # characters of the learner's source line shown


def _safe_text(value, limit: int) -> str:
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - a learner's __str__ may raise anything
        return "<a message that could not be read>"
    text = text.strip()
    lines = text.splitlines()
    if len(lines) > 6:
        text = "\n".join(lines[:6]) + f"\n... ({len(lines) - 6} more lines)"
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def _error_parts(error: BaseException) -> tuple[str, str]:
    """(type name, message) of a learner's exception, local or rebuilt from a sandbox."""
    try:
        name = type(error).__name__
    except Exception:  # noqa: BLE001 - the learner's exception class may raise anything
        name = "Exception"
    name = str(name)[:100]
    # set by grader.boundary.learner_exception: str() of the original
    sandbox_text = getattr(error, "sandbox_text", None)
    message = _safe_text(sandbox_text if isinstance(sandbox_text, str) else error, 4000)
    if name == "LearnerException":  # grader.boundary.learner_exception: "TypeName: message"
        head, _, rest = message.partition(": ")
        if head.isidentifier():
            return head[:100], rest
    if type(error) is KeyError and message.startswith("'") and message.endswith("'"):
        message = f"key {message} not found"
    return name, message


def _passes_through(error: BaseException) -> bool:
    """Exceptions that are not the learner's mistake to diagnose here."""
    if isinstance(error, (CheckFailed, NotImplementedError)):  # a check's own verdict; the unwritten exercise
        return True
    return isinstance(error, SandboxError)  # the sandbox died or timed out


def _describe_value(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    if isinstance(value, (bool, int, float, np.floating, np.integer)) or value is None:
        return repr(value)
    if isinstance(value, str):
        return repr(value[:40])
    if isinstance(value, tuple) and len(value) <= 4 and all(isinstance(v, (int, float, np.number)) for v in value):
        return repr(value)
    if callable(value):
        return "a function"
    if hasattr(type(value), "stream_request"):  # grader.grading.sandbox.protocol.StreamSource, e.g. 06's CountingStream
        try:
            return f"a read-once stream of {len(value)} values"
        except Exception:  # noqa: BLE001 - the learner's object may raise anything
            return "a read-once stream"
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        return f"{type(value).__name__} of shape {shape}"
    return type(value).__name__


def _describe_arguments(function, args, kwargs) -> str:
    import inspect

    names = None
    try:
        signature = inspect.signature(function)
        if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
            bound = signature.bind(*args, **kwargs)
            names = list(bound.arguments.items())
    except Exception:  # noqa: BLE001 - an odd callable: name the arguments by position
        names = None
    if names is None:
        names = [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items())
    return ", ".join(f"{name}: {_describe_value(value)}" for name, value in names)


@functools.cache
def _library_folders() -> tuple[str, ...]:
    """This package's folder and the standard library's, each ending in a separator: found once, because
    ``sysconfig.get_paths()`` expands its whole scheme on every call (a tenth of a mutant's check time)."""
    import os
    import sysconfig

    folders = [os.path.dirname(os.path.abspath(__file__))]
    stdlib = sysconfig.get_paths().get("stdlib")
    if stdlib:
        folders.append(os.path.abspath(stdlib))
    return tuple(folder + os.sep for folder in folders)


def _is_library_file(filename: str) -> bool:
    import os

    if not filename or filename.startswith("<frozen"):
        return True
    path = os.path.abspath(filename)
    if "site-packages" in path or "dist-packages" in path:
        return True
    return path.startswith(_library_folders())


def _learner_line(error: BaseException, function) -> str | None:
    """'line N, in name: code' of the deepest frame of the learner's own code, if it can be found."""
    import linecache
    import re
    import traceback

    found = None
    try:
        for frame in traceback.extract_tb(error.__traceback__):
            if not _is_library_file(frame.filename):
                code = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
                found = (frame.lineno, frame.name, code)
    except Exception:  # noqa: BLE001 - a hostile traceback must not stop the diagnosis
        found = None
    if found is None:  # under grader grade: the sandbox sent the traceback as text
        record = getattr(getattr(function, "_sandbox", None), "last_call", None)
        text = getattr(record, "traceback", "") or ""
        pattern = re.compile(r'File "([^"\n]+)", line (\d+), in ([^\n]+)\n[ \t]+([^\n]+)')
        for match in pattern.finditer(str(text)):
            filename = match.group(1)
            if not _is_library_file(filename) and "/grader/" not in filename:
                found = (int(match.group(2)), match.group(3).strip(), match.group(4).strip())
    if found is None:
        return None
    lineno, name, code = found
    code = code if len(code) <= LINE_LIMIT else code[:LINE_LIMIT] + "..."
    return f"line {lineno}, in {name}: {code}" if code else f"line {lineno}, in {name}"


# Shape errors: numpy's, Python's and torch's messages, and what each one usually means.
_SHAPE_ERRORS = (
    ("values to unpack", "unpacking the shape (`B, T, C = x.shape`, `N, d = x.shape`) fixes the number of axes. "
                         "Read d = x.shape[-1] and leave the leading axes as x.shape[:-1], however many there are."),
    ("tuple index out of range", "x.shape[1] or x.shape[2] exists only for inputs with that many axes; the features "
                                 "are always x.shape[-1]."),
    ("is out of bounds for array of dimension", "a fixed axis number such as axis=1 or axis=2 exists only for inputs "
                                                "with that many axes; the features are always axis=-1."),
    ("dimension out of range", "a fixed dim such as dim=1 or dim=(0, 1) exists only for tensors with that many "
                               "axes; the features are always dim=-1, and the leading axes are "
                               "tuple(range(x.ndim - 1))."),
    ("too many indices for array", "indexing with a fixed number of axes (x[:, :, j], x[b, t]) works for one shape "
                                   "only; index the features with x[..., j]."),
    ("cannot reshape array", "a reshape with sizes read off a fixed number of axes; flatten with x.reshape(-1, d) "
                             "and restore with .reshape(x.shape)."),
    ("could not be broadcast", "two arrays whose shapes do not line up: a reduction without keepdims=True, or "
                               "statistics over a different axis than the one they are applied along."),
    ("must match the size of tensor", "two tensors whose shapes do not line up: a reduction without keepdim=True, "
                                      "or statistics over a different dim than the one they are applied along."),
    ("not aligned", "a matrix product over the wrong axis."),
    ("mismatch in its core dimension", "a matrix product over the wrong axis."),
)


def is_shape_error(kind: str, message: str) -> bool:
    """Whether a learner's exception (type name, message) is about shapes or axes."""
    lowered = message.lower()
    return kind == "AxisError" or any(pattern.lower() in lowered for pattern, _ in _SHAPE_ERRORS)


_SHAPE_IDS = {"could not be broadcast": "common.broadcast_mismatch",
              "must match the size of tensor": "common.broadcast_mismatch",
              "not aligned": "common.matmul_axes", "mismatch in its core dimension": "common.matmul_axes"}


def _likely_cause(kind: str, message: str, args, shape_rule: str | None, inside: bool = False) -> Diagnosis:
    """``inside``: the error was raised inside the learner's code, after the call itself bound its arguments."""
    lowered = message.lower()
    has_array = any(isinstance(a, np.ndarray) and a.ndim >= 1 for a in args)
    for pattern, meaning in _SHAPE_ERRORS:
        if pattern.lower() in lowered or (pattern.startswith("is out of bounds") and kind == "AxisError"):
            mistake = _SHAPE_IDS.get(pattern, "common.fixed_rank")
            if shape_rule and has_array:
                return tag(f"{shape_rule} Here: {meaning}", mistake)
            return tag(meaning, mistake)
    if kind == "AxisError":
        return tag(shape_rule or "a fixed axis number that this input does not have; use axis=-1 for the features.",
                   "common.fixed_rank")
    if kind == "IndexError" and has_array:
        return tag(((shape_rule + " Here: ") if shape_rule else "") + (
            "an index past the end of an axis: the code assumes sizes or a number of axes this input does not have."),
            "common.fixed_rank")
    if kind == "ZeroDivisionError":
        return tag("a division by a count or size that is zero for this input: a counter that starts at 0 and is "
                   "incremented after its use, or n - 1 for a single element.", "common.zero_division")
    if kind == "RecursionError":
        return tag("the function calls itself (a helper with the same name as the exercise?), without end.",
                   "common.recursion")
    if kind == "NameError":
        return tag("your function uses a name that is not defined: a typo, or a variable or helper from a cell that "
                   "has not been run. Run the notebook from the top (Kernel > Restart & Run All).",
                   "common.undefined_name")
    if kind == "TypeError" and ("argument" in lowered or "positional" in lowered) and inside:
        if any(word in lowered for word in ("'dim'", "'keepdim'", "'unbiased'", "'correction'")):
            return tag("a call inside your code, at the line shown, passed torch's dim=/keepdim=/unbiased= to a numpy "
                       "function or method: numpy spells them axis=, keepdims= and ddof=. (Your signature is fine.)",
                       "common.torch_method_on_array")
        return tag("a call inside your code, at the line shown, passed arguments that function does not take "
                   "(your own signature is fine): check the called function's parameters.", "common.learner_raised")
    if kind == "TypeError" and ("argument" in lowered or "positional" in lowered):
        return tag("the check calls your function with the signature given in the exercise; keep its parameter "
                   "names, their order and their defaults.", "common.signature_changed")
    if kind == "TypeError" and "nonetype" in lowered:
        return tag("a value is None: a helper without a return statement, or an in-place method (list.sort) used "
                   "as a value.", "common.returned_none")
    if kind == "AttributeError" and "numpy.ndarray" in lowered:
        return tag("the inputs are numpy arrays: torch methods (.dim(), .size(-1), .unsqueeze(), .pow(), keepdim=) do "
                   "not exist on them. Use numpy (x.ndim, x.shape[-1], x[..., None], keepdims=), or convert with "
                   "torch.from_numpy(x) and back with .numpy().", "common.torch_method_on_array")
    if kind == "TypeError" and "'int' object is not callable" in lowered and has_array:
        return tag("in numpy, x.size is an int (the number of elements), not torch's .size(dim): the number of "
                   "features is x.shape[-1].", "common.torch_method_on_array")
    if kind == "KeyError":
        return tag("a dictionary lookup with a key the dictionary does not have.", "common.learner_raised")
    if kind.endswith("MemoryError") or "unable to allocate" in lowered or "array is too big" in lowered:
        return tag("an intermediate far larger than the answer: a (d, d) or (n, n) matrix, or copies inside a loop.",
                   "common.memory_blowup")
    if kind in ("ModuleNotFoundError", "ImportError"):
        return tag("a module that is not available here; numpy (and torch where the notebook imports it) are.",
                   "common.learner_raised")
    if kind in ("FloatingPointError", "OverflowError"):
        return tag("a value too large for its type, or a division by zero, in an intermediate step.",
                   "common.learner_raised")
    return tag("the error is in your code, at the line shown: run the function yourself on the input described above.",
               "common.learner_raised")


def _binds(function, args, kwargs) -> bool:
    """Whether ``function``'s signature accepts these arguments: then a TypeError about arguments came from inside."""
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError:
        return False
    except Exception:  # noqa: BLE001 - no readable signature: assume the call itself may be at fault
        return False
    return True


def learner_error(error: BaseException, function, args, kwargs, what: str,
                  shape_rule: str | None = None) -> LearnerError:
    """The diagnosis of an exception the learner's code raised during ``function(*args, **kwargs)``."""
    kind, message = _error_parts(error)
    message = _safe_text(message, MESSAGE_LIMIT)
    lines = [f"{what} raised {kind}" + (f": {message}" if message else ".")]
    described = _describe_arguments(function, args, kwargs)
    if described:
        lines.append(f"  called with {described}")
    where = _learner_line(error, function)
    if where:
        lines.append(f"  in your code, {where}")
    cause = _likely_cause(kind, message, list(args) + list(kwargs.values()), shape_rule,
                          inside=_binds(function, args, kwargs) and where is not None)
    lines.append(f"Likely cause: {cause}")
    return LearnerError("\n" + "\n".join(lines) + "\n", error, what, *cause.ids)


def run_learner(function, args, kwargs, what: str, shape_rule: str | None = None, subject=None):
    """``function(*args, **kwargs)``, with any exception of the learner's turned into a ``LearnerError``.

    NotImplementedError (the unwritten exercise), a check's own ``CheckFailed`` raised inside
    the call (by a recording function or a stream the check handed over) and the sandbox's
    own errors pass through unchanged. ``subject``: the learner's function, when ``function``
    is a wrapper around it (its signature names the arguments in the diagnosis).
    """
    try:
        return function(*args, **kwargs)
    except Exception as error:  # every exception of the learner's becomes a diagnosis
        if _passes_through(error):
            raise
        diagnosis = learner_error(error, subject if subject is not None else function, args, kwargs, what, shape_rule)
    raise diagnosis


def check_signature(function, name: str, expected: str) -> None:
    """Fail clearly when a learner renamed, removed or reordered a parameter."""
    if not callable(function):
        fail(f"{name} is not a function any more (it is {type(function).__name__}). Re-run the cell that defines it.",
             "common.not_a_function")
    try:
        found = str(inspect.signature(function))
    except (TypeError, ValueError):
        fail(f"Could not read the signature of {name}; define it with a plain `def`.", "common.not_a_function")
    if found != expected:
        fail(
            f"The signature of {name} changed: the tests call {name}{expected}, but it is now {name}{found}.\n"
            f"Restore the original first line, `def {name}{expected}:`, and keep the defaults.",
            "common.signature_changed",
        )
    print(f"✔ {name}{expected}: signature as expected")


def passed(message: str) -> None:
    print("✔ " + message)


UNPROVEN_NOTE = ("⚑ Noted for your instructor, not graded: the grader ran your function in a sandbox, where this "
                 "measurement comes from your own code's process and cannot be proven.\n")


def unproven(function, check: str, message: str, *ids: str) -> None:
    """A verdict the grader cannot prove where ``function`` runs (its peak memory, which library code it called).

    In the learner's own kernel (JupyterLab, Colab, plain nbgrader) it fails like any check: the learner sees
    what to fix. Under ``grader grade`` the function is a proxy into a sandbox whose every report the learner's
    code could have rewritten, so no points may hang on it: it becomes evidence for the instructor's report
    (``RemoteFunction.note_evidence``), the test's output says so, and the check goes on.
    """
    if isinstance(function, RemoteFunction):
        function.note_evidence(check, message.strip().splitlines()[0][:500])
        print(UNPROVEN_NOTE + message.strip())
        return
    fail(message, *ids)


class MemoryReport:
    """What ``measuring_memory`` saw: peak bytes, and where they came from.

    ``python_peak``: tracemalloc's peak (Python objects and numpy arrays). ``torch_peak``: the
    most bytes of torch CPU storage alive at once, counted from every tensor created during
    the call (tracemalloc cannot see torch's allocator). ``largest_shape`` / ``largest_bytes``:
    the largest tensor or array created. ``peak`` is their sum, or None if nothing was measured.
    """

    def __init__(self):
        self.python_peak = None
        self.torch_peak = 0
        self.torch_seen = False
        self.largest_bytes = 0
        self.largest_shape = None
        self.largest_kind = None

    @property
    def peak(self):
        if self.python_peak is None:
            return None
        return self.python_peak + self.torch_peak

    def note(self, nbytes: int, shape, kind: str) -> None:
        if nbytes > self.largest_bytes:
            self.largest_bytes, self.largest_shape, self.largest_kind = int(nbytes), tuple(shape), kind


@functools.cache
def uncompiled_dispatch_mode():
    """torch's ``TorchDispatchMode``, for modes that only watch and are never compiled (raises ImportError
    without torch). torch wraps a subclass's ``__torch_dispatch__`` so that Dynamo skips it, which imports
    torch._dynamo (about 1 s of CPU) on the first dispatch; this base takes torch's opt-out."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class UncompiledDispatchMode(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):
            return False

    return UncompiledDispatchMode


def _torch_recorder(report: MemoryReport):
    """A TorchDispatchMode that counts the storage of every tensor an operation creates, or None."""
    import weakref

    try:
        import torch

        TorchDispatchMode = uncompiled_dispatch_mode()
    except Exception:  # noqa: BLE001 - no torch, or a torch without dispatch modes: numpy only
        return None

    live = {}  # storage address -> [bytes, number of tensors seen holding it]
    state = {"total": 0}

    def release(key):
        entry = live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            state["total"] -= entry[0]
            del live[key]

    def record(tensor):
        try:
            storage = tensor.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
        except Exception:  # noqa: BLE001 - sparse, meta or otherwise storage-less tensors
            return
        if nbytes == 0:
            return
        report.torch_seen = True
        entry = live.get(key)
        if entry is None:
            live[key] = entry = [nbytes, 0]
            state["total"] += nbytes
            report.torch_peak = max(report.torch_peak, state["total"])
            # inline, not report.note(): in the grading sandbox every grader function the
            # learner's call reaches counts as delegation, and this runs inside that call
            if nbytes > report.largest_bytes:
                report.largest_bytes, report.largest_shape, report.largest_kind = (
                    int(nbytes), tuple(tensor.shape), "torch tensor")
        entry[1] += 1
        try:
            weakref.finalize(tensor, release, key)
        except TypeError:
            entry[1] -= 1

    def outputs(value):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (tuple, list)):
            for item in value:
                yield from outputs(item)

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in outputs(out):
                record(tensor)
            return out

    return Recorder()


class measuring_memory:
    """Context manager: peak memory of the code inside it, numpy/Python and torch together.

    ``with measuring_memory() as report: f(x)`` then ``report.peak`` (bytes). tracemalloc sees
    Python objects and numpy arrays; torch's CPU allocations are invisible to it, so, with
    ``track_torch`` (True: import torch; "auto": only if torch is already imported), every
    tensor an operation creates is counted through a ``TorchDispatchMode``, deterministically.
    """

    def __init__(self, track_torch="auto"):
        import sys

        self.report = MemoryReport()
        self._mode = None
        if track_torch is True or (track_torch == "auto" and "torch" in sys.modules):
            self._mode = _torch_recorder(self.report)
            if self._mode is not None:  # first use imports and caches a few things: not the learner's memory
                import torch

                with self._mode:
                    torch.zeros(1)
                self.report.__init__()

    def __enter__(self) -> MemoryReport:
        import tracemalloc

        if self._mode is not None:
            self._mode.__enter__()
        tracemalloc.start()
        return self.report

    def __exit__(self, *exc) -> None:
        import tracemalloc

        self.report.python_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if self._mode is not None:
            self._mode.__exit__(*exc)


def measure_learner_memory(function, *args, what: str = "the function", shape_rule: str | None = None,
                           track_torch="auto", **kwargs) -> tuple:
    """(result, MemoryReport) of one call of a learner's function; its exceptions become diagnoses.

    Under ``grader grade`` the learner's function is a proxy into its sandbox, where the
    measurement is taken around the real call (tracemalloc only, there).
    """
    if isinstance(function, RemoteFunction):
        result, peak = run_learner(function.call_measuring_memory, args, kwargs, what=what, shape_rule=shape_rule,
                                   subject=function)
        report = MemoryReport()
        report.python_peak = peak
        return result, report
    with measuring_memory(track_torch) as report:
        result = run_learner(function, args, kwargs, what=what, shape_rule=shape_rule)
    return result, report


def call_measuring_memory(function, *args, **kwargs):
    """(result, peak bytes allocated during the call), numpy/Python and torch together.

    Under ``grader grade`` the learner's function is a proxy into its sandbox, where the
    measurement is taken around the real call.
    """
    result, report = measure_learner_memory(function, *args, **kwargs)
    return result, report.peak
