"""Grading fails closed: a test cell earns points only when a valid result says it passed.

Fast unit tests (no nbgrader run, no real sandbox): ``execute_submission`` with a fake
sandbox, and nbgrader's own ``determine_grade`` on the cells ``ReplayResults`` fills in,
for every way a result can be missing, broken, forged or incomplete.
"""
import contextlib
import copy
import json

import nbformat
import pytest
from nbgrader.utils import determine_grade

from grader.course.build import SOLUTION_MARKER, script_to_notebook
from grader.grading.autograde.execute import execute_submission
from grader.grading.autograde.nbgrader_steps import ReplayResults, grading_notes_cell
from grader.grading.run import results
from grader.grading.sandbox.client import SandboxError
from tests.conftest import ROOT

ASSIGNMENT = "03_backward"
WHO = {"assignment": ASSIGNMENT, "student": "ada", "notebook": ASSIGNMENT}


class FakeSandbox:
    """Runs learner cells in a local namespace (trusted test code stays in execute.py)."""

    fail_at_cell = None  # raise SandboxError when this many cells have run
    launcher_died = False
    ran = []

    def __init__(self, **options):
        self.namespace, self.isolation, self.cells = {}, {"mode": "fake"}, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @contextlib.contextmanager
    def budget(self, seconds=None):
        yield

    def run_cell(self, source):
        self.cells += 1
        if self.fail_at_cell is not None and self.cells >= self.fail_at_cell:
            raise SandboxError("the notebook's process died from SIGKILL")
        FakeSandbox.ran.append(source)
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        exec(compile(code, "<learner>", "exec"), self.namespace)
        return {"outputs": [], "error": None}

    def lookup(self, name):
        if name not in self.namespace:
            raise KeyError(name)
        return self.namespace[name]


@pytest.fixture(scope="module")
def course_files(tmp_path_factory):
    """(source notebook path, a solved autograded notebook) for 03_backward."""
    folder = tmp_path_factory.mktemp("fail_closed")
    source = script_to_notebook(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py")
    nbformat.write(source, folder / "source.ipynb")
    solved = copy.deepcopy(source)
    imports = next(c for c in solved.cells if c.cell_type == "code")
    for cell in solved.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = SOLUTION_MARKER.sub("", cell.source)
        elif cell.cell_type == "code" and not cell.metadata.get("nbgrader") and cell is not imports:
            cell.source = "pass"  # demo cells cost time and are not what is tested here
    return folder / "source.ipynb", solved


def run(course_files, tmp_path, nb=None, factory=FakeSandbox):
    source_path, solved = course_files
    nb = nb or solved
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(nb, path)
    return execute_submission(str(path), str(source_path), {"limits": {}}, who=WHO, sandbox_factory=factory), nb


def scores(nb, result, tmp_path, source_path, student="ada"):
    """Points per test cell after ReplayResults, as nbgrader's SaveAutoGrades would count them."""
    folder = tmp_path / "results"
    if result is not None:
        results.write(folder / student / f"{ASSIGNMENT}.json", result)
    nb = copy.deepcopy(nb)
    replay = ReplayResults(results_dir=str(folder), source_notebook=str(source_path))
    nb, _ = replay.preprocess(nb, {"nbgrader": {**WHO, "student": "ada"}})
    return {c.metadata["nbgrader"]["grade_id"]: determine_grade(c)[0] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}


def full_marks(nb):
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"]) for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}


def test_a_correct_notebook_earns_every_point(course_files, tmp_path):
    result, nb = run(course_files, tmp_path)
    assert all(t["status"] == results.PASSED for t in result["tests"].values()), result["tests"]
    assert scores(nb, result, tmp_path, course_files[0]) == full_marks(nb)


def test_a_sandbox_that_cannot_start_earns_nothing(course_files, tmp_path):
    def broken(**options):
        raise SandboxError("the sandbox could not start: zygote died")

    result, nb = run(course_files, tmp_path, factory=broken)
    assert result["isolation"] is None and "could not be run" in result["notes"][0]
    assert set(scores(nb, result, tmp_path, course_files[0]).values()) == {0}


@pytest.mark.parametrize("fail_at", [1, 3, 6])
def test_a_sandbox_that_dies_mid_notebook_earns_nothing_for_what_did_not_run(course_files, tmp_path, fail_at):
    class Dying(FakeSandbox):
        fail_at_cell = fail_at

    result, nb = run(course_files, tmp_path, factory=Dying)
    points = scores(nb, result, tmp_path, course_files[0])
    assert any("SIGKILL" in n for n in result["notes"])
    for grade_id, status in result["tests"].items():
        assert status["status"] != results.PASSED or points[grade_id] > 0
        if status["status"] != results.PASSED:
            assert points[grade_id] == 0


@pytest.mark.parametrize("damage", ["missing", "not_json", "schema", "other_student", "other_notebook_text",
                                     "other_source", "all_passed_forged", "symlink", "deep_json"])
def test_a_missing_malformed_or_forged_result_earns_nothing(course_files, tmp_path, damage):
    source_path, solved = course_files
    wrong = copy.deepcopy(solved)
    for cell in wrong.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = cell.source.split("\n")[0] + "\n    return None\n"
    result, nb = run(course_files, tmp_path, nb=wrong)
    target = tmp_path / "results" / "ada" / f"{ASSIGNMENT}.json"
    good, _ = run(course_files, tmp_path)  # a correct classmate's result
    if damage == "missing":
        result = None
    elif damage == "other_student":
        result = {**good, "student": "bob"}
    elif damage == "other_notebook_text":
        result = good  # passes everywhere, but was run on other cells than the ones recorded
    elif damage == "other_source":
        result = {**result, "source_digest": "0" * 64}
    elif damage == "all_passed_forged":
        result = {**result, "tests": {k: {"status": "passed"} for k in result["tests"]}, "notebook_digest": "f" * 64}
    points_args = (nb, result, tmp_path, source_path)
    if damage in ("not_json", "schema", "symlink", "deep_json"):
        target.parent.mkdir(parents=True, exist_ok=True)
        if damage == "not_json":
            target.write_text('{"schema": 2, "cells": ')
        elif damage == "schema":
            target.write_text(json.dumps({**result, "tests": {"test_layer_norm_vjp": {"status": "passed!"}}}))
        elif damage == "deep_json":
            target.write_text("[" * 100_000 + "]" * 100_000)
        else:
            elsewhere = tmp_path / "elsewhere.json"
            results.write(elsewhere, good)
            target.symlink_to(elsewhere)
        points_args = (nb, None, tmp_path, source_path)
    assert set(scores(*points_args).values()) == {0}


def test_a_cell_that_claims_a_test_id_with_other_text_never_runs(course_files, tmp_path):
    source_path, solved = course_files
    nb = copy.deepcopy(solved)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_layer_norm_vjp")
    cell.source = "LEARNER_RAN_A_FORGED_TEST = True"
    FakeSandbox.ran = []
    result, nb = run(course_files, tmp_path, nb=nb)
    assert not any("LEARNER_RAN_A_FORGED_TEST" in source for source in FakeSandbox.ran)
    assert result["tests"]["test_layer_norm_vjp"]["status"] == "mismatch"
    assert scores(nb, result, tmp_path, source_path)["test_layer_norm_vjp"] == 0


def test_a_pass_that_carries_an_error_output_is_not_a_pass(course_files, tmp_path):
    result, nb = run(course_files, tmp_path)
    index = next(i for i, c in enumerate(nb.cells)
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "test_layer_norm_vjp")
    result["cells"][str(index)] = [{"output_type": "error", "ename": "X", "evalue": "y", "traceback": []}]
    assert scores(nb, result, tmp_path, course_files[0])["test_layer_norm_vjp"] == 0


def test_grading_notes_are_escaped():
    cell = grading_notes_cell(["<script>alert(1)</script> & `x`"])
    assert "<script>" not in cell.source and "&lt;script&gt;" in cell.source


def test_an_instructors_notebook_changed_between_two_learners_is_read_again(course_files, tmp_path):
    """A worker parses the instructor's notebook once per content: an edited test is the edited test."""
    source_path, solved = course_files
    edited = tmp_path / "source.ipynb"
    edited.write_bytes(source_path.read_bytes())
    first = execute_submission(*_paths(tmp_path, solved, edited))
    source = nbformat.read(edited, as_version=4)
    test = next(c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_layer_norm_vjp")
    test.source += "\n# edited by the instructor"
    nbformat.write(source, edited)
    second = execute_submission(*_paths(tmp_path, solved, edited))
    assert first["tests"]["test_layer_norm_vjp"]["status"] == results.PASSED
    assert second["tests"]["test_layer_norm_vjp"]["status"] == "mismatch"  # the learner's copy is now another text
    assert first["source_digest"] != second["source_digest"] == results.file_digest(edited)


def _paths(tmp_path, nb, source_path):
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    nbformat.write(nb, path)
    return str(path), str(source_path), {"limits": {}}, WHO, FakeSandbox


def test_the_test_cells_run_with_one_torch_thread(course_files, tmp_path):
    """An intra-op pool's idle threads spin between the checks' tiny torch calls (3x the CPU)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result, _ = run(course_files, tmp_path)
        assert torch.get_num_threads() == 1
        assert result["tests"]["test_layer_norm_vjp"]["status"] == results.PASSED
    finally:
        torch.set_num_threads(before)
