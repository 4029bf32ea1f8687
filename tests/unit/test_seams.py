"""grader.grading.seams: other libraries' private internals are touched in one module per library, each
checked at start-up; a broken speed patch switches off with one warning line, a broken correctness patch
refuses to grade (naming the library and its version)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.grading import seams

REPO = Path(__file__).resolve().parents[2]
# names only a seam module may use: another library's private parts
PRIVATE = re.compile(r"\._sanitizing\b|\._preprocessors\b|\._init_preprocessors\b|\._format_(source|dest)\b|"
                     r"\._create_environment\b|builder\._htmlparser|\._forward_input\b|\._original_stdstream_fd\b|"
                     r"\._watch_pipe_fd\b|nbconvert_html\.BeautifulSoup|common\.jsonschema|api\.create_engine|"
                     r"lexer\.regex_opt\s*=")


def test_every_self_check_passes_on_the_tested_versions():
    for patch in seams.patches():
        patch.check()
    assert {p.library for p in seams.patches()} >= {"nbgrader", "nbconvert", "ipykernel", "pygments"}
    assert seams.start() is None


def test_private_names_appear_only_in_the_seam_modules():
    offenders = []
    for path in sorted((REPO / "grader").rglob("*.py")):
        if "seams" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


@pytest.fixture
def fresh_verdicts(monkeypatch):
    monkeypatch.setattr(seams, "_verdicts", {})
    monkeypatch.setattr(seams, "_warned", set())
    monkeypatch.setenv(seams.OFF_VARIABLE, "")  # restored (removed) afterwards: start() may set it


def _broken(*args):
    raise seams.Mismatch("not the shape expected")


def test_a_speed_patch_that_fails_its_check_switches_off_with_one_warning_line(fresh_verdicts, capsys):
    patch = seams.Patch("probe", "nbconvert", seams.SPEED, "a probe", _broken)
    assert seams.enabled(patch) is False
    assert seams.enabled(patch) is False
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "probe is off" in lines[0] and f"nbconvert {seams.version('nbconvert')}" in lines[0]
    assert "grades are unchanged" in lines[0]


def test_a_speed_patch_switched_off_by_name_or_all_is_silent(fresh_verdicts, monkeypatch, capsys):
    patch = seams.Patch("probe", "nbconvert", seams.SPEED, "a probe", lambda: None)
    assert seams.enabled(patch)
    monkeypatch.setenv(seams.OFF_VARIABLE, "other,probe")
    assert not seams.enabled(patch)
    monkeypatch.setenv(seams.OFF_VARIABLE, "all")
    assert not seams.enabled(patch)
    assert capsys.readouterr().err == ""


def test_a_correctness_patch_that_fails_its_check_refuses_naming_library_and_version(fresh_verdicts, monkeypatch):
    broken = seams.Patch("probe", "ipykernel", seams.CORRECTNESS, "the probe's streams", _broken)
    monkeypatch.setattr(seams, "patches", lambda: [broken])
    refused = seams.start()
    assert refused and f"ipykernel {seams.version('ipykernel')}" in refused and "the probe's streams" in refused
    assert seams.start(public_apis_only=True)  # no public alternative: refused either way


def test_public_apis_only_switches_every_speed_patch_off(fresh_verdicts, monkeypatch):
    assert seams.start(public_apis_only=True) is None
    speed = [p for p in seams.patches() if p.kind == seams.SPEED]
    assert speed and not any(seams.enabled(p) for p in speed)


@pytest.mark.slow  # a grading run in a subprocess (~14 s)
def test_a_broken_correctness_seam_stops_grading_before_anything_executes(tmp_path):
    """``grader grade`` exits 2 with the library named; no sandbox starts, nothing is written to the gradebook."""
    script = (
        "import sys\n"
        "from grader.grading import seams\n"
        "from grader.grading.seams import nbgrader as s\n"
        "def broken(): raise seams.Mismatch('Autograde changed')\n"
        "s.PATCHES[0] = s.PATCHES[0]._replace(check=broken)\n"
        "from grader.grading.run import pipeline\n"
        "def never(*a, **k): raise AssertionError('a grading run started')\n"
        "pipeline.GradingRun = never\n"
        "sys.exit(pipeline.grade('03_backward', root=sys.argv[1]))\n")
    course = tmp_path / "course"
    (course / "submitted" / "ada").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text((REPO / "nbgrader_config.py").read_text())
    (course / "submitted" / "ada" / "03_backward").mkdir()
    (course / "submitted" / "ada" / "03_backward" / "03_backward.ipynb").write_text("{}")
    done = subprocess.run([sys.executable, "-c", script, str(course)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"nbgrader {seams.version('nbgrader')}" in done.stderr and "Autograde changed" in done.stderr
    assert not (course / "build" / "gradebook.db").exists()
