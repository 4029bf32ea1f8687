"""`make bench-grade`: the class it builds, and one small run end to end (times printed, never asserted)."""
import re
import subprocess
import sys

import nbformat
import pytest

from grader.grading.run.bench import HOSTILE_PREAMBLE, learner_notebook
from tests.conftest import ROOT, subprocess_env

ASSIGNMENT = "03_backward"


@pytest.fixture(scope="module")
def notebooks():
    from grader.course.build import script_to_notebook

    source = script_to_notebook(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py")
    release = nbformat.read(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    return source, release


def answers(nb):
    return [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def test_each_kind_of_learner(notebooks):
    source, release = notebooks
    correct, partial, wrong, hostile = (learner_notebook(source, release, kind)
                                        for kind in ("correct", "partial", "wrong", "hostile"))
    assert not any("NotImplementedError" in a or "BEGIN SOLUTION" in a for a in answers(correct))
    partial_answers = answers(partial)
    assert "NotImplementedError" not in partial_answers[0]
    assert all("NotImplementedError" in a for a in partial_answers[1:])
    assert all("return None" in a and "NotImplementedError" not in a for a in answers(wrong))
    first_code = next(c for c in hostile.cells if c.cell_type == "code")
    assert first_code.source.endswith(HOSTILE_PREAMBLE) and answers(hostile) == answers(wrong)


@pytest.mark.slow
def test_small_benchmark_reports_times_ratio_and_scores():
    # 06 is the quickest notebook to grade; one learner of each kind
    result = subprocess.run([sys.executable, "-m", "grader", "bench-grade", "--learners", "4", "--assignments",
                             "06_welford"], capture_output=True, text=True, env=subprocess_env(), timeout=900)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(r"plain nbgrader autograde: +\d+\.\d s", out)
    assert re.search(r"grader grade \(isolated, feedback included\): +\d", out)
    assert re.search(r"and then generate_feedback: +\d+\.\d s", out)
    assert re.search(r"speed-up: \d+\.\d\dx against autograde alone, \d+\.\d\dx against autograde and feedback", out)
    assert "isolation: user" in out or "isolation: userns" in out or "isolation: basic" in out
    assert "honest submissions with identical scores: 3/3" in out
    plain, ours = map(int, re.search(r"hostile submissions: plain nbgrader (\d+), grader grade (\d+)", out).groups())
    assert plain > 0 and ours == 0, out


@pytest.mark.parametrize("scaling", [False, True])
def test_the_table_has_one_line_per_assignment(capsys, scaling):
    from grader.grading.run.bench import Row, print_table

    rows = [Row("01_bn_vs_ln", 40.0, 10.0, 0.5, 4.0, 2.0, 17.0 if scaling else None, 20.0),
            Row("06_welford", 30.0, 12.0, 0.6, 4.5, 2.5, 20.0 if scaling else None, 6.0)]
    print_table(rows, learners=8)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and [line.split()[0] for line in lines[1:]] == ["01_bn_vs_ln", "06_welford"]
    assert lines[1].split()[3] == "4.00x" and lines[2].split()[3] == "2.50x"
    assert lines[1].split()[-1] == "6.00x" and lines[2].split()[-1] == "3.00x"  # against autograde and feedback
    assert ("jobs-1" in lines[0] and lines[1].split()[-3] == "1.70x") if scaling else "jobs-1" not in lines[0]
