"""Every use of another library's non-public parts: one module per library, each checked at start-up.

``nbgrader``, ``nbconvert``, ``bs4`` (BeautifulSoup), ``ipykernel`` and ``pygments`` each hold what the grader
reaches of that library beyond its public API, and nothing else does (``tests/unit/test_seams.py`` greps for
it). Each module lists its patches (``PATCHES``): a name, the library, whether correctness or only speed
depends on it, and a self-check that verifies the exact shape relied on (the attribute or method exists with
the expected signature; a tiny behavioural probe where one is cheap).

``start`` runs every self-check once, before anything executes:

- a **speed** patch whose check fails is switched off with one warning line (grades stay right, grading gets
  slower); so is every speed patch when ``GradeConfig.public_apis_only`` is set, and each named in
  ``$LNCOURSE_SEAMS_OFF`` (comma-separated names, or ``all``: what ``bench-grade --compare-patches`` uses);
- a **correctness** patch whose check fails refuses the run (``Refused``, naming the library and its version):
  grading fails closed, exit code 2, before any notebook executes.

Each speed patch's ``install`` asks ``enabled(name)`` first, so a process that never called ``start`` (a
feedback worker, a sandbox) still runs the check itself, once, and keeps the library's own way if it fails.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, NamedTuple

SPEED, CORRECTNESS = "speed", "correctness"
OFF_VARIABLE = "LNCOURSE_SEAMS_OFF"  # speed patches switched off: comma-separated names, or "all"
LIBRARIES = ("nbgrader", "nbconvert", "bs4", "ipykernel", "pygments")  # the seam modules, by library


class Mismatch(Exception):
    """A library no longer has the shape a seam relies on."""


class Refused(RuntimeError):
    """A patch that correctness depends on failed its self-check: nothing may be graded."""


class Patch(NamedTuple):
    name: str
    library: str  # the distribution whose version the messages name
    kind: str  # SPEED or CORRECTNESS
    what: str  # what it does, for the messages
    check: Callable[[], None]  # raises Mismatch (or anything) when the shape differs


_verdicts: dict[str, str | None] = {}  # patch name -> None (usable) or why not, once per process
_warned: set[str] = set()


def version(library: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed({"bs4": "beautifulsoup4"}.get(library, library))
    except PackageNotFoundError:
        return "not installed"


def expect_signature(function, *names: str) -> None:
    """Raise Mismatch unless ``function``'s parameters start with ``names`` (``self`` included for methods)."""
    import inspect

    if not callable(function):
        raise Mismatch(f"{function!r} is not callable")
    try:
        found = list(inspect.signature(function).parameters)
    except (TypeError, ValueError) as error:
        raise Mismatch(f"no signature for {function!r}: {error}") from None
    if found[:len(names)] != list(names):
        raise Mismatch(f"{getattr(function, '__qualname__', function)}{tuple(found)}, expected {names}")


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Mismatch(message)


def patches() -> list[Patch]:
    import importlib

    found = []
    for library in LIBRARIES:
        found += importlib.import_module(f"{__name__}.{library}").PATCHES
    return found


def _switched_off() -> set[str]:
    return {name.strip() for name in os.environ.get(OFF_VARIABLE, "").split(",") if name.strip()}


def switched_off(name: str) -> bool:
    """Whether a speed-up that uses public APIs only is switched off by name (``bench-grade --compare-patches``);
    ``all`` (``--public-apis-only``) leaves it on."""
    return name in _switched_off()


def switch_off_speed_patches() -> None:
    """``GradeConfig.public_apis_only``: no speed patch of a private internal, in this process and those it
    starts (the variable travels to feedback workers and sandboxes)."""
    os.environ[OFF_VARIABLE] = "all"


def _check(patch: Patch) -> str | None:
    if patch.name not in _verdicts:
        try:
            patch.check()
            _verdicts[patch.name] = None
        except Exception as error:  # noqa: BLE001 - any failure of a self-check means the shape differs
            _verdicts[patch.name] = f"{type(error).__name__}: {str(error)[:300]}"
    return _verdicts[patch.name]


def enabled(patch: Patch) -> bool:
    """Whether a speed patch may install in this process: not switched off, and its self-check passed (else one
    warning line, once)."""
    off = _switched_off()
    if "all" in off or patch.name in off:
        return False
    problem = _check(patch)
    if problem is not None and patch.name not in _warned:
        _warned.add(patch.name)
        print(f"grader: speed patch {patch.name} is off: {patch.library} {version(patch.library)} differs from what "
              f"it relies on ({problem}); grades are unchanged, grading is slower", file=sys.stderr)
    return problem is None


def refusal(patch: Patch) -> str | None:
    """Why a correctness patch cannot be trusted with this library's version, or None."""
    problem = _check(patch)
    if problem is None:
        return None
    return (f"{patch.library} {version(patch.library)} is not a version the grader can use: {patch.what} relies on "
            f"its internals, which differ here ({problem}); install the tested versions (constraints.txt, "
            "`make install`)")


def start(public_apis_only: bool = False) -> str | None:
    """Every self-check, before anything executes; returns why grading is refused (fail closed), or None.
    Speed patches that fail warn and switch off."""
    if public_apis_only:
        switch_off_speed_patches()
    problems = []
    for patch in patches():
        if patch.kind == CORRECTNESS:
            problem = refusal(patch)
            if problem:
                problems.append(problem)
        else:
            enabled(patch)
    return "; ".join(problems) or None
