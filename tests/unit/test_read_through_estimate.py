"""The time each notebook states is the one tools/read-through-estimate computes (grader/course/estimate.py)."""
from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from grader.course import estimate as est
from tests.conftest import ASSIGNMENTS, ROOT, subprocess_env


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_notebook_states_the_estimate_the_script_computes(assignment):
    script = ROOT / "source" / assignment / f"{assignment}.py"
    said = est.stated(script.read_text())
    assert said is not None, f"{assignment}: no '**Time.**' paragraph; run tools/read-through-estimate --write"
    found = est.estimate(ROOT, assignment)
    assert abs(said["minutes"] - found.minutes) <= est.ROUND_TO, (said, found)
    assert abs(said["optional"] - found.optional_minutes) <= est.ROUND_TO, (said, found)
    assert abs(said["words"] - found.main.words) <= max(100, 0.05 * found.main.words), (said, found.main)
    for name in ("code_cells", "exercises", "derivations", "predictions", "widgets"):
        assert said[name] == getattr(found.main, name), (name, said, found.main)
    assert abs(said["seconds"] - found.run_seconds) <= 1, (said, found.run_seconds)
    assert found.run_seconds > 0, f"{assignment}: no measured run time; run tools/read-through-estimate --measure"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_release_carries_the_same_paragraph(assignment):
    release = nbformat.read(ROOT / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    text = "\n".join(cell.source for cell in release.cells if cell.cell_type == "markdown")
    assert "**Time.** About" in text and "tools/read-through-estimate" in text


def _cells(*specs):
    cells = []
    for kind, text, *meta in specs:
        make = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        cell = make(text)
        if meta:
            cell.metadata["nbgrader"] = meta[0]
        cells.append(cell)
    return cells


def test_counts_follow_the_stated_rules():
    cells = _cells(
        ("md", "# Title\n\n**Predict, then run.** The intro explains predictions: not one itself.\n\n"
               "**Time.** About 999 minutes, never counted."),
        ("md", "## 1. First\n\nFive words of prose here. $\\mathbf x$ counts x only."),
        ("code", "def f(x):\n    return ...  # your expression"),
        ("md", "**Predict first.** A prompt."),
        ("code", "guess_a = ...  # a guess"),
        ("code", "def g(x):\n    raise NotImplementedError()", {"solution": True, "grade_id": "g"}),
        ("code", "w = BarDragWidget()\nw.widget"),
        ("md", "## 2. Optional: extra\n\n**Predict.** One more."),
        ("code", "print(1)"),
        ("md", "## 3. Back\n\nthree more words"),
    )
    main, optional = est.count(cells)
    intro_words = est.words("# Title\n\n**Predict, then run.** The intro explains predictions: not one itself.")
    first = est.words("## 1. First\n\nFive words of prose here. $\\mathbf x$ counts x only.")
    assert main.words == intro_words + first + est.words("**Predict first.** A prompt.") + 5  # section 3's words
    assert est.words("$\\mathbf x$") == 1  # a LaTeX command is not a word, its argument is
    assert (main.code_cells, main.exercises, main.derivations, main.predictions, main.widgets) == (4, 1, 1, 1, 1)
    assert (optional.code_cells, optional.predictions, optional.exercises) == (1, 1, 0)
    expected = main.words / est.WORDS_PER_MINUTE + 4 * 0.5 + 10 + 5 + 2 + 5
    assert main.minutes() == pytest.approx(expected)


def test_the_paragraph_round_trips_through_stated():
    found = est.Estimate("x", est.Counts(words=5150, code_cells=37, exercises=3, derivations=3, predictions=11),
                         est.Counts(words=600, code_cells=1), run_seconds=12.4)
    said = est.stated("# " + est.time_paragraph(found) + "\n")
    assert said == {"minutes": found.minutes, "optional": found.optional_minutes, "words": 5200,
                             "code_cells": 37, "exercises": 3, "derivations": 3, "predictions": 11, "widgets": 0,
                             "seconds": 12}


@pytest.mark.slow  # a fresh interpreter in a subprocess
def test_the_tool_prints_every_notebook():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "read-through-estimate")], capture_output=True,
                          text=True, cwd=ROOT, env=subprocess_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    for assignment in ASSIGNMENTS:
        assert assignment in done.stdout
    assert f"{est.WORDS_PER_MINUTE} words/min" in done.stdout


def _time_cell(found) -> str:
    return f"{found.minutes} min" + (f" (+{found.optional_minutes} optional)" if found.optional_minutes else "")


@pytest.mark.parametrize("page, row_start",
                         [("README.md", "| {number} |"), ("docs/instructors.md", "| `{assignment}` |")])
def test_the_course_tables_give_each_notebooks_estimate(page, row_start):
    """README's and the instructors' guide's tables quote the same estimate the notebooks state."""
    text = (ROOT / page).read_text()
    total = 0
    for assignment in ASSIGNMENTS:
        found = est.estimate(ROOT, assignment)
        total += found.minutes
        start = row_start.format(number=assignment[:2], assignment=assignment)
        row = next((line for line in text.splitlines() if line.startswith(start)), None)
        assert row is not None, f"{page}: no row for {assignment}"
        assert f"| {_time_cell(found)} |" in row, f"{page}: {assignment} should say {_time_cell(found)}: {row[-60:]}"
    if page == "docs/instructors.md" and len(ASSIGNMENTS) == 6:
        assert f"{total} min" in text, f"{page}: the total should be {total} min"
