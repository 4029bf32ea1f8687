"""Real nbgrader: a solved submission gets full marks, the untouched release gets zero."""
import csv
import shutil
import subprocess
import sys

import nbformat
import pytest

from grader.build import solution_edition
from tests.conftest import ASSIGNMENTS, ROOT, subprocess_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A temporary course with two submissions per assignment, graded by `python -m grader grade`."""
    course = tmp_path_factory.mktemp("course")
    for name in ["nbgrader_config.py", "pyproject.toml"]:
        shutil.copy2(ROOT / name, course / name)
    shutil.copytree(ROOT / "source", course / "source", ignore=shutil.ignore_patterns("*.ipynb"))
    shutil.copytree(ROOT / "release", course / "release")
    from grader.build import build

    build(course, ASSIGNMENTS)  # fills the temporary gradebook
    scores = {}
    for assignment in ASSIGNMENTS:
        solved = course / "submitted" / "solved" / assignment / f"{assignment}.ipynb"
        blank = course / "submitted" / "blank" / assignment / f"{assignment}.ipynb"
        solved.parent.mkdir(parents=True)
        blank.parent.mkdir(parents=True)
        source_nb = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
        # A learner's solved notebook: the release cells with the solutions typed in.
        nbformat.write(solution_edition(source_nb), solved)
        shutil.copy2(course / "release" / assignment / f"{assignment}.ipynb", blank)
        result = subprocess.run([sys.executable, "-m", "grader", "grade", assignment, "--root", str(course)],
                                capture_output=True, text=True, env=subprocess_env(), timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        with open(course / "build" / "grades.csv", newline="") as f:
            for row in csv.DictReader(f):
                scores[(row["assignment"], row["student_id"])] = (float(row["raw_score"]), float(row["max_score"]))
    return course, scores


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_gets_full_marks(graded, assignment):
    _, scores = graded
    score, maximum = scores[(assignment, "solved")]
    assert maximum > 0 and score == maximum


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_release_gets_zero(graded, assignment):
    _, scores = graded
    score, maximum = scores[(assignment, "blank")]
    assert maximum > 0 and score == 0


def test_feedback_is_generated(graded):
    course, _ = graded
    for assignment in ASSIGNMENTS:
        assert (course / "feedback" / "solved" / assignment / f"{assignment}.html").exists()
