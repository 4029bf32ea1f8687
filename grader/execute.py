"""Execute one sanitised submission: learner cells in a sandbox, test cells here.

A cell counts as a test cell only if the *source* notebook (the instructor's, read from
source/, never from the submission) has a graded, locked code cell with the same grade_id
and the same text. Test cells run in this trusted process, in a namespace built from the
source notebook's first code cell (its imports) plus proxies for the learner's names; the
learner's own code only ever runs inside the sandbox. A failing check is reported as its
message alone, so no test source (hidden tests included) appears in an error.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import io

import nbformat

from grader.sandbox.client import Limits, Sandbox, SandboxError


def cell_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def trusted_test_cells(source_nb) -> dict[str, str]:
    """grade_id -> source of every autograded test cell of the instructor's notebook."""
    tests = {}
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            tests[meta["grade_id"]] = cell.source
    return tests


def trusted_namespace(source_nb) -> dict:
    """Run the source notebook's first code cell (its imports) in a fresh namespace."""
    namespace = {"__name__": "__grader_tests__", "__builtins__": builtins}
    first = next((c for c in source_nb.cells if c.cell_type == "code"), None)
    if first is not None:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(first.source, "<course imports>", "exec"), namespace)
    return namespace


def free_names(source: str) -> set[str]:
    """Names a cell reads without assigning them itself."""
    tree = ast.parse(source)
    loaded, stored = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stored.add(node.name)
    return loaded - stored


def stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def error_output(ename: str, evalue: str, traceback_text: str | None = None) -> dict:
    return {"output_type": "error", "ename": ename, "evalue": evalue,
            "traceback": [traceback_text or f"{ename}: {evalue}"]}


def run_test_cell(source: str, base_namespace: dict, sandbox: Sandbox, output_limit: int) -> list[dict]:
    """Run one trusted test cell; learner names resolve to proxies into the sandbox."""
    namespace = dict(base_namespace)
    outputs = []
    captured = io.StringIO()
    try:
        for name in sorted(free_names(source)):
            if name not in namespace and not hasattr(builtins, name):
                try:
                    namespace[name] = sandbox.lookup(name)
                except KeyError:
                    pass  # NameError when the test uses it: the learner never defined it
        with contextlib.redirect_stdout(captured):
            exec(compile(source, "<test cell>", "exec"), namespace)
    except SandboxError:
        raise
    except BaseException as error:  # noqa: BLE001 - every failure of a test is a zero for it
        message = str(error).strip() or "(no message)"
        outputs.append(error_output(type(error).__name__, message))
    text = captured.getvalue()
    if text:
        outputs.insert(0, stream("stdout", text[:output_limit]))
    return outputs


def execute_submission(notebook_path: str, source_notebook_path: str, sandbox_options: dict) -> dict:
    """Execute a sanitised notebook; returns {"cells": {index: outputs}, "digests": ..., "notes": [...]}.

    Never raises for anything the submission does: a dead or hung sandbox stops execution and
    the remaining cells are reported as not run.
    """
    notes: list[str] = []
    try:
        nb = nbformat.read(notebook_path, as_version=4)
    except Exception as error:  # noqa: BLE001
        return {"cells": {}, "digests": {}, "notes": [f"the notebook could not be read: {error}"], "isolation": None}
    source_nb = nbformat.read(source_notebook_path, as_version=4)
    tests = trusted_test_cells(source_nb)
    base = trusted_namespace(source_nb)
    limits = Limits(**sandbox_options.get("limits", {}))
    results: dict[str, list] = {}
    digests = {str(i): cell_digest(c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    stopped = None
    isolation = None
    try:
        sandbox = Sandbox(mode=sandbox_options.get("mode", "auto"), hide=sandbox_options.get("hide", []),
                          uid=sandbox_options.get("uid", 65534), limits=limits, scratch=sandbox_options.get("scratch"))
    except SandboxError as error:
        return {"cells": {}, "digests": digests, "notes": [str(error)], "isolation": None}
    with sandbox:
        isolation = sandbox.isolation
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            key = str(index)
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            is_test = grade_id in tests and tests[grade_id] == cell.source
            if stopped is not None:
                results[key] = [error_output("NotRun", f"not run: {stopped}")] if is_test else []
                continue
            try:
                if is_test:
                    results[key] = run_test_cell(cell.source, base, sandbox, limits.output_characters)
                else:
                    ran = sandbox.run_cell(cell.source)
                    outputs = [stream(n, ran[n]) for n in ("stdout", "stderr") if ran[n]]
                    if ran["error"]:
                        e = ran["error"]
                        outputs.append(error_output(str(e.get("ename")), str(e.get("evalue")), str(e.get("traceback"))))
                    results[key] = outputs
            except SandboxError as error:
                stopped = f"{error} (in cell {index})"
                notes.append(stopped)
                results[key] = [error_output("SandboxError", str(error))]
    return {"cells": results, "digests": digests, "notes": notes, "isolation": isolation}
