"""``grader grade --public-apis-only`` (GradeConfig.public_apis_only) grades exactly as the default run does.

The default run uses speed patches of other libraries' private internals (``grader.grading.seams``); without
any of them a class must get identical scores and feedback pages whose visible text is identical.
"""
import subprocess
import sys

import pytest

from tests.conftest import subprocess_env
from tests.course_helpers import gradebook_rows, make_course, submit
from tests.integration.test_hostile import ASSIGNMENT, solution_sources, submission

pytestmark = pytest.mark.slow
LEARNERS = {"ada": "right", "bob": "stub"}


def _graded(tmp_path, name: str, extra: list[str]):
    course = make_course(tmp_path, ASSIGNMENT, name=name)
    right = solution_sources()
    for student, kind in LEARNERS.items():
        submit(course, student, submission(right if kind == "right" else {}), ASSIGNMENT)
    done = subprocess.run([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout",
                           "60", "--jobs", "2", "--GradeConfig.grader_version=test-public-apis", *extra],
                          capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return course, done.stderr


def _visible_text(course, student: str) -> str:
    from bs4 import BeautifulSoup

    page = (course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    soup = BeautifulSoup(page, "html.parser")
    for hidden in soup(["script", "style"]):
        hidden.decompose()
    return " ".join(soup.get_text(" ").split())


def test_public_apis_only_gives_the_same_scores_and_feedback_text(tmp_path):
    patched, _ = _graded(tmp_path, "patched", [])
    public, stderr = _graded(tmp_path, "public", ["--public-apis-only"])
    assert "speed patch" not in stderr  # switched off by request: no warning line
    assert gradebook_rows(public) == gradebook_rows(patched)
    for student in LEARNERS:
        text = _visible_text(public, student)
        assert text == _visible_text(patched, student)
        assert "Score" in text or "score" in text
