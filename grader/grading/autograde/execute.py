"""Execute one sanitised submission: learner cells in a sandbox, test cells here.

A cell counts as a test cell only if the *source* notebook (the instructor's, read from
source/, never from the submission) has a graded code cell with the same grade_id and the
same text; a cell that claims a test's grade_id with other text is never run (zero). Test cells
run in this trusted process, in a namespace built from the source notebook's first code cell (its imports)
plus proxies for the learner's names; the
learner's own code only ever runs inside the sandbox. A failing check is reported as its
message alone, so no test source (hidden tests included) appears in an error.

Each test gets a status (``grader.grading.run.results``): only ``passed``, set after the trusted grader
ran the whole cell without an exception, earns points. A sandbox that cannot start, dies
or runs out of time leaves every test it did not finish at ``not_run``. A failed test also
records the catalogue ids of its diagnosis (``misconceptions``, see ``grader.catalogue``),
taken only from the trusted check's own ``CheckFailed``, never from anything the learner's code made.

What the grader sees but cannot prove, because only the learner's own process could report it (its peak
memory, the library norms it called while graded), never changes a status: it is recorded as ``flags``
(test, check, what was seen) for the instructor's report (``grader.grading.report.render``).
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import io
from pathlib import Path

import nbformat

from grader.catalogue import ID_PATTERN
from grader.compare import CheckFailed
from grader.grading.run.results import (
    MAX_MISCONCEPTIONS,
    PASSED,
    SCHEMA_VERSION,
    bytes_digest,
    cell_digest,
    file_digest,
    notebook_digest,
)
from grader.grading.sandbox.client import Limits, Sandbox, SandboxError

MAX_FLAGS = 50  # per notebook


def trusted_test_cells(source_nb) -> dict[str, str]:
    """grade_id -> source of every autograded test cell of the instructor's notebook."""
    from grader.grading.run.results import autograded_tests

    return {grade_id: source_nb.cells[index].source for index, grade_id in autograded_tests(source_nb).items()}


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


def misconceptions_of(error: BaseException) -> list[str]:
    """The catalogue ids a failed test's exception names: a check's ``CheckFailed`` (raised in
    this process; the learner's own exceptions arrive rebuilt as builtins, never as one).
    Malformed ids are dropped; at most ``MAX_MISCONCEPTIONS``."""
    if not isinstance(error, CheckFailed):
        return []
    ids = getattr(error, "misconceptions", ())
    if not isinstance(ids, (tuple, list)):
        return []
    valid = [i for i in ids if type(i) is str and len(i) <= 100 and ID_PATTERN.fullmatch(i)]
    return list(dict.fromkeys(valid))[:MAX_MISCONCEPTIONS]


def run_test_cell(source: str, base_namespace: dict, sandbox: Sandbox,
                  output_limit: int) -> tuple[list[dict], bool, list[str]]:
    """Run one trusted test cell; learner names resolve to proxies into the sandbox.

    Returns (outputs, passed, misconceptions). ``passed`` is True only if the whole cell ran
    without raising; ``misconceptions``: the diagnosis's catalogue ids when it failed.
    All the cell's calls into the sandbox share one time budget (``Sandbox.budget``).
    """
    namespace = dict(base_namespace)
    outputs = []
    captured = io.StringIO()
    passed, misconceptions = False, []
    with sandbox.budget():
        try:
            for name in sorted(free_names(source)):
                if name not in namespace and not hasattr(builtins, name):
                    try:
                        namespace[name] = sandbox.lookup(name)
                    except KeyError:
                        pass  # NameError when the test uses it: the learner never defined it
            with contextlib.redirect_stdout(captured):
                exec(compile(source, "<test cell>", "exec"), namespace)
            passed = True
        except SandboxError:
            raise
        except BaseException as error:  # noqa: BLE001 - every failure of a test is a zero for it
            message = str(error).strip() or "(no message)"
            outputs.append(error_output(type(error).__name__[:100], message[:output_limit]))
            misconceptions = misconceptions_of(error)
    text = captured.getvalue()
    if text:
        outputs.insert(0, stream("stdout", text[:output_limit]))
    return outputs, passed, misconceptions


_BUNDLES: dict[str, tuple] = {}  # the instructor's notebook's digest -> (notebook, its test cells); a few per class


def trusted_bundle(source_path: str) -> tuple[str, nbformat.NotebookNode, dict[str, str]]:
    """(digest, notebook, test cells by grade_id) of the instructor's notebook at ``source_path``, parsed
    once per content: a worker grades many learners of the same notebook. Read by content, so a changed
    file is parsed again. The cached notebook and dict are only read, never changed."""
    data = Path(source_path).read_bytes()
    digest = bytes_digest(data)  # the same digest as the job's bundle, which accept() compares
    if digest not in _BUNDLES:
        if len(_BUNDLES) >= 16:
            _BUNDLES.clear()
        source_nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        _BUNDLES[digest] = (source_nb, trusted_test_cells(source_nb))
    return (digest, *_BUNDLES[digest])


def _identity(nb_path: str, source_digest: str, nb, who: dict) -> dict:
    return {"schema": SCHEMA_VERSION, "assignment": str(who.get("assignment", "")),
            "student": str(who.get("student", "")),
            "notebook": str(who.get("notebook", Path(nb_path).stem)), "source_digest": source_digest,
            "notebook_digest": notebook_digest(nb) if nb is not None else ""}


def one_torch_thread() -> None:
    """The trusted test cells make hundreds of tiny torch calls (the checks' reference norms and autograd):
    with torch's intra-op pool of one thread per core, its idle threads spin between calls, three times
    the CPU of the calls themselves (a slot's CPU per notebook of 01_bn_vs_ln: 0.26 s, 0.08 s on one thread),
    on the cores the sandboxes need. Grading runs notebooks side by side instead. A learner's own code runs
    in the sandbox, which has its own (OMP_NUM_THREADS=1)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def executed_parts(nb, files: str | None) -> dict:
    """What a run executes, as ``grader.grading.run.jobs.Job.make`` digests it for the job's ``submission``: the
    notebook's cells as read here, the learner's folder that the sandbox copies (``grader.grading.run.jobs.accept``
    refuses a result whose parts are not its job's)."""
    from grader.grading.run.jobs import executed_digest, folder_digest

    return {"notebook": executed_digest(nb), "folder": folder_digest(files, copied=True)}


def execute_submission(notebook_path: str, source_notebook_path: str, sandbox_options: dict,
                       who: dict | None = None, sandbox_factory=Sandbox) -> dict:
    """Execute a sanitised notebook; returns a result document (``grader.grading.run.results.SCHEMA``).

    ``who``: {"assignment", "student", "notebook"}, recorded so the result cannot be replayed
    for anyone else. Never raises for anything the submission does: a sandbox that cannot
    start, dies or hangs stops execution, and every test not finished stays ``not_run``.
    """
    who = who or {}
    notes: list[str] = []
    one_torch_thread()
    try:
        nb = nbformat.read(notebook_path, as_version=4)
    except Exception as error:  # noqa: BLE001 - an unreadable notebook scores zero, with the reason
        result = _identity(notebook_path, file_digest(Path(source_notebook_path)), None, who)
        return {**result, "cells": {}, "digests": {}, "tests": {}, "isolation": None,
                "notes": [f"the notebook could not be read ({type(error).__name__}); it scores zero"]}
    source_digest, source_nb, tests = trusted_bundle(source_notebook_path)
    executed = executed_parts(nb, sandbox_options.get("files"))  # the folder before the sandbox copies it
    result = {**_identity(notebook_path, source_digest, nb, who), "cells": {}, "isolation": None, "executed": executed,
              "digests": {str(i): cell_digest(c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"},
              "tests": {grade_id: {"status": "not_run", "message": "not run"} for grade_id in tests}, "notes": notes}
    limits = Limits(**sandbox_options.get("limits", {}))
    try:
        sandbox = sandbox_factory(**{k: v for k, v in sandbox_options.items() if k != "limits"}, limits=limits)
    except SandboxError as error:
        notes.append(f"the notebook could not be run: {error}; its tests score zero")
        for entry in result["tests"].values():
            entry["message"] = "not run: the sandbox could not start"
        return result
    if executed_parts(nb, sandbox_options.get("files"))["folder"] != executed["folder"]:  # changed while copied
        executed["folder"] = bytes_digest(b"the learner's folder changed while the sandbox copied it")
    base = trusted_namespace(source_nb)
    with sandbox:
        result["isolation"] = sandbox.isolation
        stopped = _run_cells(nb, tests, base, sandbox, limits, result)
    result["complete"] = stopped is None  # every cell ran to its end: a result worth caching (grader.grading.run.jobs)
    return result


def _run_cells(nb, tests: dict[str, str], base: dict, sandbox: Sandbox, limits: Limits, result: dict) -> str | None:
    """Run the notebook's code cells in order, into ``result``: the learner's in the sandbox, the trusted test
    cells here. After the sandbox fails, no cell runs; returns why it stopped (None: every cell ran)."""
    notes = result["notes"]
    stopped = None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        key = str(index)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        claims_test = isinstance(grade_id, str) and grade_id in tests
        if claims_test and tests[grade_id] != cell.source:
            message = f"cell '{grade_id}' differs from the instructor's test; it was not run and scores zero"
            notes.append(message)
            result["tests"][grade_id] = {"status": "mismatch", "message": message}
            result["cells"][key] = [error_output("NotGraded", message)]
            continue
        if stopped is not None:
            result["cells"][key] = [error_output("NotRun", f"not run: {stopped}")] if claims_test else []
            if claims_test:
                result["tests"][grade_id] = {"status": "not_run", "message": f"not run: {stopped}"}
            continue
        try:
            if claims_test:
                _grade_test(cell.source, grade_id, key, base, sandbox, limits, result)
            else:
                result["cells"][key] = sandbox.run_cell(cell.source)["outputs"]
        except SandboxError as error:
            result["retry"] = sandbox.launcher_died  # the grader's failure: the notebook may run again
            stopped = f"{error} (in cell {index})"
            notes.append(stopped)
            result["cells"][key] = [error_output("SandboxError", str(error))]
            if claims_test:
                result["tests"][grade_id] = {"status": "not_run", "message": str(error)}
    return stopped


def _grade_test(source: str, grade_id: str, key: str, base: dict, sandbox: Sandbox, limits: Limits,
                result: dict) -> None:
    """Run one trusted test cell and record its outputs, status, diagnosis and flags in ``result``."""
    outputs, passed, misconceptions = run_test_cell(source, base, sandbox, limits.output_characters)
    _take_flags(result, grade_id, sandbox)
    result["cells"][key] = outputs
    result["tests"][grade_id] = {"status": PASSED if passed else "failed",
                                 "message": "" if passed else "the test failed"}
    if misconceptions and not passed:
        result["tests"][grade_id]["misconceptions"] = misconceptions


def _take_flags(result: dict, grade_id: str, sandbox: Sandbox) -> None:
    """Move what the sandbox noted during one test cell (``Sandbox.note_evidence``) into the result's flags."""
    evidence, sandbox.evidence = list(getattr(sandbox, "evidence", []) or []), []
    flags = result.setdefault("flags", [])
    for entry in evidence:
        if len(flags) < MAX_FLAGS:
            flags.append({"test": grade_id, "check": str(entry.get("check", ""))[:40],
                          "seen": str(entry.get("seen", ""))[:500]})
