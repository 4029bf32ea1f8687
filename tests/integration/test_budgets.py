"""One submission costs the class a bounded time: `grader grade` with adversarial learners beside honest ones.

Each adversary answers every exercise right (so each must score full marks) and adds what once stalled a
step after execution: four 120 kB attribute chains (pygments' IPython lexer is quadratic in a line's length:
minutes each), forty cells of outputs each under the sandbox's per-cell cap (25+ minutes and 1.4 GiB in the
feedback worker), deeply nested markdown, ANSI-dense outputs (nbconvert's ansi2html), a huge number of tiny
cells, a 1 MB single line, 400 kB of markdown, and learner files of every kind beside the notebook (which
nbgrader would copy into feedback/ and release). The run uses a 15 s budget (GradeConfig.submission_seconds) so
the test stays short:
every learner must be graded right, every page be written (the adversaries' plain ones say why), feedback/ hold
nothing but the grader's pages, and `nbgrader release_feedback` release nothing else.
"""
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests import course_helpers
from tests.conftest import ROOT, subprocess_env
from tests.course_helpers import make_course

pytestmark = pytest.mark.slow
ASSIGNMENT = "03_backward"
EXERCISES = ["layer_norm_jacobian", "layer_norm_vjp", "layer_norm_backward"]
BUDGET = 15  # seconds: small, so the test is; the default is 120
HOSTILE = "<script>alert('learner')</script>"

BIG_OUTPUTS = ("import sys\nfrom IPython.display import display, HTML\n"
               "for i in range(29):\n    print('x' * 19000, flush=True)\n"
               "    display({'text/plain': 'z' * 19000}, raw=True)\n"
               "display(HTML('<b>a</b>' * 250000))\n")
ANSI_OUTPUTS = "for i in range(80):\n    print('\\x1b[1;31mE\\x1b[0m\\x1b[' * 1500, flush=True)\n"


def md(source):
    return nbformat.v4.new_markdown_cell(source)


def code(source):
    return nbformat.v4.new_code_cell(source)


ADVERSARIES = {
    "chains": [code("a" + ".a" * 60_000 + f"\n# {i}") for i in range(4)],
    "outputs": [code(BIG_OUTPUTS + f"# {i}") for i in range(40)],
    "markdown": [md(">" * 3000 + " quoted"), md("[" * 20_000), md("*" * 50_000), md("<div>" * 5000),
                 md("\n".join("  " * i + "- item" for i in range(1500))), md("_a" * 40_000)],
    "markdown_bulk": [md("*a* " * 100_000)],  # mistune + bleach: ~100 us a character, 40 s: the plain page
    "ansi": [code(ANSI_OUTPUTS + f"# {i}") for i in range(20)],
    "tiny_cells": [md(f"m{i}") for i in range(1500)] + [code(f"t{i} = {i}") for i in range(300)],
    "long_line": [code("s = '" + "q" * 1_000_000 + "'")],
    "files": [],
}
HONEST = ["honest", "zz_honest"]


def submission(answers: dict, extra: list) -> nbformat.NotebookNode:
    nb = nbformat.read(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")  # the imports
    kept = []
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader") and cell is not first_code:
            continue  # demo cells cost time
        if cell.id in answers:
            cell.source = answers[cell.id]
        kept.append(cell)
    nb.cells = kept + extra
    return nb


def learner_files(folder: Path, outside: Path) -> None:
    for name in ["evil.html", "evil.htm", "pic.svg", "run.js", "page.xhtml", "LOUD.HTML", "noext",
                 "sub/page.html", "sub/deeper/x.SVG", "sub/noext"]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(HOSTILE)
    (folder / "link.html").symlink_to(outside)
    (folder / "sub" / "link_dir").symlink_to(outside.parent)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("budgets")
    course = make_course(tmp)
    answers = course_helpers.solution_sources(ASSIGNMENT, EXERCISES)
    outside = tmp / "outside.html"
    outside.write_text(HOSTILE)
    for student, extra in [*ADVERSARIES.items(), *((h, []) for h in HONEST)]:
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(submission(answers, extra), folder / f"{ASSIGNMENT}.ipynb")
        (folder / "timestamp.txt").write_text("2024-03-01 12:00:00.000000 UTC\n")
        (folder / "submission_secret.txt").write_text(student.encode().hex().ljust(128, "0"))
        if student == "files":
            learner_files(folder, outside)
    # what an earlier run (or plain nbgrader generate_feedback) left: a learner's files in feedback/
    stale = course / "feedback" / "files" / ASSIGNMENT
    learner_files(stale, outside)
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout",
                          "60", "--jobs", "2", f"--GradeConfig.submission_seconds={BUDGET}"],
                         capture_output=True, text=True, env=subprocess_env(), timeout=1500)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stdout + run.stderr
    print(f"grading {len(ADVERSARIES) + len(HONEST)} learners took {seconds:.0f} s", file=sys.stderr)
    return course, run, seconds, outside


def test_every_learner_is_graded_right(graded):
    course, run, seconds, _ = graded
    with open(course / "build" / "grades.csv", newline="") as f:
        scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}
    assert scores == {student: 7.0 for student in [*ADVERSARIES, *HONEST]}, run.stdout


def test_adversaries_cost_a_bounded_time(graded):
    course, run, seconds, _ = graded
    # execution of 9 notebooks on 2 slots, then at most the budget (plus the kill's grace) per adversary's page
    assert seconds < 60 + len(ADVERSARIES) * (BUDGET + 15) + 120, run.stdout


def test_every_learner_has_a_page_and_over_budget_ones_a_plain_one(graded):
    course, run, _, _ = graded
    messages = json.loads((course / "build" / "grading" / ASSIGNMENT / "messages.json").read_text())
    for student in [*ADVERSARIES, *HONEST]:
        page = (course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
        over = any("budget" in m and "plain page" in m for m in messages[student])
        assert "<script>alert" not in page
        if over:
            assert "Score: 7 / 7" in page and "<script" not in page
        else:
            assert "test_layer_norm_jacobian" in page
    assert not any("plain page" in m for student in HONEST for m in messages[student])
    assert any("plain page" in m for m in messages["markdown_bulk"])
    assert any("outputs exceed the grader's budget" in m for m in messages["outputs"])  # 40 x 6 MB, cut


def test_feedback_holds_only_the_graders_pages(graded):
    course, _, _, outside = graded
    for student in [*ADVERSARIES, *HONEST]:
        folder = course / "feedback" / student / ASSIGNMENT
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            [f"{ASSIGNMENT}.html", "timestamp.txt", "submission_secret.txt"]), student
    assert outside.read_text() == HOSTILE  # the link's target is untouched
    assert (course / "submitted" / "files" / ASSIGNMENT / "evil.html").read_text() == HOSTILE


def test_release_feedback_hands_out_only_the_graders_pages(graded, tmp_path):
    course, _, _, _ = graded
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    run = subprocess.run([sys.executable, "-m", "nbgrader", "release_feedback", ASSIGNMENT,
                          f"--Exchange.root={exchange}"], cwd=course, capture_output=True, text=True,
                         env=subprocess_env(), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    released = [p for p in exchange.rglob("*") if p.is_file()]
    assert len(released) == len(ADVERSARIES) + len(HONEST)
    for page in released:
        text = page.read_text()
        assert "<script>alert" not in text and os.path.splitext(page.name)[1] == ".html"
