"""Run an exercise's real test cells (from source/) on any implementation; read the diagnosis.

This is how precision and recall of the diagnoses are measured (tests/integration/test_misconceptions.py):
a function is bound to the exercise's name in a namespace built like the notebook's (its
imports cell, every definition-only cell, every solution cell), then the exercise's test
cells run in order, hidden tests included, until one fails. The first failure is what the
learner is told; its ``CheckFailed.misconceptions`` are the ids the check named.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import jupytext

from grader.compare import CheckFailed

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    passed: bool
    test: str | None = None            # grade_id of the first failing test cell
    ids: tuple = ()                    # misconception ids its CheckFailed named
    error: str | None = None           # the exception's type name
    message: str = field(default="", repr=False)


@functools.lru_cache(maxsize=None)
def compiled(source: str, filename: str):
    """``source`` compiled once: the same few test cells run on thousands of mutants (a code object is
    immutable, and each run gets its own namespace). Without this module's ``from __future__`` flags, as a
    kernel compiles a cell."""
    return compile(source, filename, "exec", dont_inherit=True)


def _meta(cell) -> dict:
    meta = cell.metadata.get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def _definitions_only(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    allowed = (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return bool(tree.body) and all(isinstance(node, allowed) for node in tree.body)


@functools.lru_cache(maxsize=None)
def _notebook(notebook: str):
    return jupytext.read(ROOT / "source" / notebook / f"{notebook}.py")


@functools.lru_cache(maxsize=None)
def _base_namespace(notebook: str) -> dict:
    """The imports cell, the definition-only cells and the solution cells, run once."""
    os.environ.setdefault("NBGRADER_EXECUTION", "autograde")
    nb = _notebook(notebook)
    code = [c for c in nb.cells if c.cell_type == "code"]
    namespace: dict = {"__name__": "__diagnosis__"}
    for index, cell in enumerate(code):
        if index == 0 or _meta(cell).get("solution") or (not _meta(cell).get("grade")
                                                         and _definitions_only(cell.source)):
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(cell.source, f"<{notebook} cell {index}>", "exec"), namespace)
    return namespace


@functools.lru_cache(maxsize=None)
def exercise_tests(notebook: str) -> dict[str, list[tuple[str, str]]]:
    """exercise name -> [(test grade_id, source), ...]: the graded test cells after its solution cell."""
    tests: dict[str, list[tuple[str, str]]] = {}
    current = None
    for cell in _notebook(notebook).cells:
        meta = _meta(cell)
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            current = meta.get("grade_id")
            tests.setdefault(current, [])
        elif meta.get("grade") and current is not None:
            tests[current].append((meta["grade_id"], cell.source))
    return tests


def exercises(notebook: str) -> list[str]:
    return list(exercise_tests(notebook))


def solution(notebook: str, exercise: str):
    """The source notebook's own solution of ``exercise`` (a correct implementation)."""
    return _base_namespace(notebook)[exercise]


def diagnose(notebook: str, exercise: str, function, tests: list[str] | None = None,
             namespace: dict | None = None) -> Outcome:
    """Run ``exercise``'s test cells with ``function`` in its place; the first failure, or a pass.

    ``tests``: restrict to these grade_ids. ``namespace``: extra names (e.g. a matching wrong
    forward for a backward whose test also calls the forward).
    """
    base = dict(_base_namespace(notebook))
    base[exercise] = function
    base.update(namespace or {})
    for grade_id, source in exercise_tests(notebook)[exercise]:
        if tests is not None and grade_id not in tests:
            continue
        scope = dict(base)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compiled(source, f"<{grade_id}>"), scope)
        except CheckFailed as failure:
            return Outcome(False, grade_id, tuple(failure.misconceptions), type(failure).__name__, str(failure))
        except Exception as error:  # noqa: BLE001 - a raw exception is a failure without a diagnosis
            return Outcome(False, grade_id, (), type(error).__name__, str(error))
    return Outcome(True)


_remembered: dict = {}  # (notebook, exercise, id(function), id(namespace)) -> (function, namespace, Outcome)


def diagnose_once(notebook: str, exercise: str, function, namespace: dict | None = None) -> Outcome:
    """``diagnose`` of all test cells, remembered for this function object and namespace in this process.

    The mutant sweeps (tests/integration/test_misconceptions.py) need each mutant's graded diagnosis twice:
    scored against what was planted, and compared with the self-study edition's verdict.
    """
    key = (notebook, exercise, id(function), id(namespace))
    found = _remembered.get(key)
    if found is None or found[0] is not function or found[1] is not namespace:
        found = _remembered[key] = (function, namespace, diagnose(notebook, exercise, function, namespace=namespace))
    return found[2]
