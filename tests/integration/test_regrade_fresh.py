"""Re-grading gives every graded cell a fresh grade (issue 39, kind 3).

nbgrader's SaveAutoGrades writes a grade only for the cells present in the notebook it records: a test cell
the learner deleted kept the points of an earlier grading. A class whose submissions changed in every way
between two runs (test cells deleted, cells added and reordered, metadata rewritten, grade_ids renamed,
points raised, solution cells deleted) is graded twice in one course and once, from scratch, in a fresh
course: every learner's score per cell, and the automatic comments, are the same.
"""
import copy
import json
import shutil
import subprocess
import sys

import nbformat
import pytest

from tests.conftest import subprocess_env
from tests.course_helpers import gradebook_rows, make_course, submit
from tests.integration.test_hostile import ASSIGNMENT, solution_sources, submission

TESTS = ["test_layer_norm_jacobian", "test_jacobian_is_projection", "test_layer_norm_vjp", "test_layer_norm_backward"]


def _grade(course):
    done = subprocess.run([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root",
                           str(course), "--timeout", "60",
                           "--jobs", "2", "--GradeConfig.grader_version=test-regrade"],
                          capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    messages = json.loads((course / "build" / "grading" / ASSIGNMENT / "messages.json").read_text())
    return done.stdout, messages


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _by_id(nb, grade_id):
    return next(c for c in nb.cells if _meta(c).get("grade_id") == grade_id)


def first_round() -> dict:
    right = solution_sources()
    return {"ada": submission(right), "bob": submission(right), "cy": submission(right), "dee": submission({})}


def second_round() -> dict:
    right = solution_sources()
    # ada: the stub, every test cell deleted (the reported case: she kept full marks)
    ada = submission({})
    ada.cells = [c for c in ada.cells if not (_meta(c).get("grade") and not _meta(c).get("solution"))]
    # bob: right answers; a test deleted, one renamed, one with points raised and its type rewritten, a new cell
    # claiming to be graded, cells reordered
    bob = submission(right)
    bob.cells.remove(_by_id(bob, "test_jacobian_is_projection"))
    _meta(_by_id(bob, "test_layer_norm_vjp"))["grade_id"] = "test_my_vjp"
    raised = _meta(_by_id(bob, "test_layer_norm_backward"))
    raised.update(points=100, locked=False)
    added = nbformat.v4.new_code_cell("x_extra = 1", id="added-cell")
    added.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "bonus", "points": 50,
                                  "locked": False, "schema_version": 3}
    bob.cells.insert(3, added)
    markdown = [c for c in bob.cells if c.cell_type == "markdown"]
    first, second = bob.cells.index(markdown[1]), bob.cells.index(markdown[2])
    bob.cells[first], bob.cells[second] = bob.cells[second], bob.cells[first]
    # cy: every answer right, but the first exercise's solution cell and its signature check deleted
    cy = submission(right)
    cy.cells = [c for c in cy.cells if _meta(c).get("grade_id") not in ("layer_norm_jacobian",
                                                                       "signature_layer_norm_jacobian")]
    # dee: was blank, now right, with a solution cell turned into a graded one worth 10 points
    dee = submission(right)
    _meta(_by_id(dee, "layer_norm_vjp")).update(grade=True, points=10)
    return {"ada": ada, "bob": bob, "cy": cy, "dee": dee}


def _submit_all(course, notebooks: dict) -> None:
    shutil.rmtree(course / "submitted", ignore_errors=True)
    for student, nb in notebooks.items():
        submit(course, student, copy.deepcopy(nb))


def _scores(course) -> dict:
    rows = gradebook_rows(course)
    return {"grades": rows["grades"], "comments": rows["comments"]}


def test_a_regrade_equals_grading_the_final_submissions_from_scratch(tmp_path):
    course = make_course(tmp_path, ASSIGNMENT)
    _submit_all(course, first_round())
    _grade(course)
    before = {(g[0], g[1]): float(g[2]) for g in _scores(course)["grades"] if g[2] != "None"}
    assert before[("ada", "test_layer_norm_jacobian")] == 2.0  # full marks the first time

    final = second_round()
    _submit_all(course, final)
    stdout, messages = _grade(course)

    fresh = make_course(tmp_path, ASSIGNMENT, name="fresh")
    _submit_all(fresh, final)
    _grade(fresh)

    regraded, reference = _scores(course), _scores(fresh)
    assert regraded == reference
    points = {(g[0], g[1]): float(g[2]) if g[2] != "None" else None for g in regraded["grades"]}
    assert all(points[("ada", test)] == 0.0 for test in TESTS), points
    assert points[("bob", "test_jacobian_is_projection")] == 0.0 and points[("bob", "test_layer_norm_vjp")] == 0.0
    assert points[("bob", "test_layer_norm_jacobian")] == 2.0 and points[("bob", "test_layer_norm_backward")] == 2.0
    assert points[("dee", "test_layer_norm_vjp")] == 2.0
    # the learner is told, in her feedback's grading notes and in the run's messages, that earlier points were taken
    # back (the terminal shows the start of every learner's notes)
    told = [m for m in messages["ada"] if "earlier grading" in m]
    assert len(told) == 1 and all(f"{test} (" in told[0] for test in TESTS), messages["ada"]
    assert "test_layer_norm_jacobian (2 points)" in told[0]
    feedback = (course / "feedback" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "not what an earlier grading gave them" in feedback
    assert not any("earlier grading" in m for m in messages["dee"])  # nothing of hers was taken back
    print(json.dumps(messages, indent=1))


def _cell(grade_id: str, **flags) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("pass", id=grade_id.replace("_", "-"))
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "grade": False, "solution": False, "locked": False,
                                 "schema_version": 3, **flags}
    return cell


@pytest.mark.filterwarnings("ignore:Object of type")  # nbgrader's own add_submission
def test_an_instructors_manual_grade_stays_on_a_cell_that_is_there_and_goes_with_one_that_is_not(tmp_path, monkeypatch):
    """The record phase's reset (ResetAbsentGrades) on a real gradebook: absent cells score zero and lose a manual
    score, extra credit and automatic comment; present cells keep everything an instructor typed."""
    from nbgrader.api import Gradebook

    from grader.grading.autograde.nbgrader_steps import ResetAbsentGrades

    monkeypatch.setenv("PATH", subprocess_env()["PATH"])  # the gradebook runs `alembic` by name
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("a")
        gb.add_notebook("nb", "a")
        for name in ("test_kept", "test_gone", "test_overridden"):
            gb.add_grade_cell(name, "nb", "a", max_score=2, cell_type="code")
        gb.add_grade_cell("answer_kept", "nb", "a", max_score=3, cell_type="markdown")  # manually graded answers
        gb.add_grade_cell("answer_gone", "nb", "a", max_score=3, cell_type="markdown")
        for name in ("answer_kept", "answer_gone", "solution_kept", "solution_gone"):
            gb.add_solution_cell(name, "nb", "a")
        gb.add_student("ada")
        gb.add_submission("a", "ada")
        scores = {"test_kept": (2.0, None, None), "test_gone": (2.0, None, None), "test_overridden": (0.0, 1.5, 0.5),
                  "answer_kept": (None, 2.5, 1.0), "answer_gone": (None, 3.0, None)}
        for name, (auto, manual, extra) in scores.items():
            grade = gb.find_grade(name, "nb", "a", "ada")
            grade.auto_score, grade.manual_score, grade.extra_credit = auto, manual, extra
        for name in ("answer_kept", "answer_gone", "solution_kept", "solution_gone"):
            comment = gb.find_comment(name, "nb", "a", "ada")
            comment.auto_comment, comment.manual_comment = "No response.", f"typed for {name}"
        gb.db.commit()

    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell("test_kept", grade=True, points=2, locked=True),
                _cell("answer_kept", grade=True, solution=True, points=3),
                _cell("solution_kept", solution=True)]
    resources = {"nbgrader": {"db_url": url, "notebook": "nb", "assignment": "a", "student": "ada"},
                 "grading_notes": ["an intake note"]}
    nb, resources = ResetAbsentGrades().preprocess(nb, resources)

    with Gradebook(url) as gb:
        def grade(name):
            g = gb.find_grade(name, "nb", "a", "ada")
            return g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade

        def comment(name):
            c = gb.find_comment(name, "nb", "a", "ada")
            return c.auto_comment, c.manual_comment

        assert grade("test_kept") == (2.0, None, None, True)  # untouched (SaveAutoGrades writes it next)
        assert grade("answer_kept")[:3] == (None, 2.5, 1.0)  # the instructor's grade of a cell still there
        for name in ("test_gone", "test_overridden", "answer_gone"):
            assert grade(name) == (0.0, None, None, False), name
        assert comment("answer_kept") == ("No response.", "typed for answer_kept")
        assert comment("solution_kept") == ("No response.", "typed for solution_kept")
        assert comment("solution_gone") == (None, "typed for solution_gone")  # no points in it: the text is kept
        assert comment("answer_gone") == (None, "typed for answer_gone")
        assert gb.find_submission("a", "ada").score == 2.0 + 2.5 + 1.0
    notes = resources["grading_notes"]
    assert notes[0] == "an intake note" and len(notes) == 2
    assert "test_gone (2 points), test_overridden (2 points), answer_gone (3 points)" in notes[1]
    assert "manual score or extra credit of test_overridden, answer_gone was removed" in notes[1]
    assert nb.cells[0].id == "grading-notes" and "an intake note" in nb.cells[0].source

    # a notebook with no autograded file to record (its sanitising failed): every grade of it is zero
    from types import SimpleNamespace

    from grader.grading.autograde.nbgrader_steps import reset_missing_notebooks

    coursedir = SimpleNamespace(db_url=url, course_id="", autograded_directory="autograded",
                                format_path=lambda step, student, assignment:
                                    str(tmp_path / step / student / assignment))
    told = reset_missing_notebooks(coursedir, "a", "ada")
    assert len(told) == 1 and "test_kept (2 points), answer_kept (3.5 points)" in told[0]
    with Gradebook(url) as gb:
        assert gb.find_submission("a", "ada").score == 0
    (tmp_path / "autograded" / "ada" / "a").mkdir(parents=True)
    (tmp_path / "autograded" / "ada" / "a" / "nb.ipynb").write_text("{}")
    assert reset_missing_notebooks(coursedir, "a", "ada") == []  # there: left to the record phase
