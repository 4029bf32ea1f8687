"""One grading run per course at a time (issue 39, kind 6).

Two ``grader grade`` runs on one course, started together, used to both exit 0 with every correct learner
at zero (each clears build/grading/ASSIGNMENT, which the other is using), and the cache could keep a wrong
result under a right submission's key. Now the second run refuses (exit code 4, naming the first) or, with
--wait, waits; the gradebook, the CSV and the cache are those of a single run, at every offset: both at once,
0.3 s apart, and the second while the first executes notebooks.

The lock itself: a holder killed with SIGKILL leaves no stale lock; report (a reader) shares it with reports.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.grading.run.course_lock import EXIT_LOCKED, CourseLocked, course_lock
from tests.conftest import subprocess_env
from tests.course_helpers import gradebook_rows, make_course, submit
from tests.integration.test_hostile import ASSIGNMENT, solution_sources, submission


# -- the lock ------------------------------------------------------------------------------------------------
def _holder(root: Path, shared: bool = False) -> subprocess.Popen:
    """Another process that takes the course's lock, says so, and holds it until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from grader.grading.run.course_lock import course_lock
        with course_lock({str(root)!r}, "grade", shared={shared}):
            print("held", flush=True)
            time.sleep(600)
    """)
    process = subprocess.Popen([sys.executable, "-c", code, "grade", "04_rmsnorm"], stdout=subprocess.PIPE, text=True,
                               env=subprocess_env())
    assert process.stdout.readline() == "held\n"
    return process


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path):
    root = tmp_path / "course"
    holder = _holder(root)
    try:
        with pytest.raises(CourseLocked) as refused:
            with course_lock(root, "grade"):
                pass
        assert f"pid {holder.pid} (user " in str(refused.value) and "started " in str(refused.value)
        assert "grade 04_rmsnorm" in str(refused.value) and "--wait" in str(refused.value)
        with pytest.raises(CourseLocked):  # a reader waits for a writer too
            with course_lock(root, "report", shared=True):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel releases the lock
        holder.wait(30)
    started = time.monotonic()
    with course_lock(root, "grade"):
        with course_lock(root, "grade"):  # taken again in the same process (the command line, then grade()): no-op
            pass
    assert time.monotonic() - started < 1


def test_readers_share_the_lock_and_a_waiting_writer_gets_it_when_they_are_done(tmp_path):
    root = tmp_path / "course"
    reader = _holder(root, shared=True)
    try:
        with course_lock(root, "report", shared=True):  # another report at the same time
            pass
        with pytest.raises(CourseLocked):
            with course_lock(root, "grade"):
                pass
    finally:
        os.kill(reader.pid, signal.SIGTERM)
        reader.wait(30)
    with course_lock(root, "grade", wait=True):
        pass


# -- two grading runs ----------------------------------------------------------------------------------------
def _class(tmp_path: Path, name: str) -> Path:
    course = make_course(tmp_path, ASSIGNMENT, name=name)
    submit(course, "ada", submission(solution_sources()))
    submit(course, "bob", submission({}))
    return course


def _command(course: Path, *extra) -> list[str]:
    return [sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout", "60", "--jobs",
            "2", "--GradeConfig.grader_version=test-concurrent", *extra]


def _start(course: Path, *extra) -> subprocess.Popen:
    return subprocess.Popen(_command(course, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=subprocess_env())


def _state(course: Path) -> dict:
    """The gradebook, the scores and the cache (each result's tests, by key) a run leaves."""
    cache = {}
    for path in (course / "build" / "grading-cache").rglob("*.json"):
        data = json.loads(path.read_text())
        cache[path.stem] = (data["student"], data["tests"])
    csv = (course / "build" / "grades.csv").read_text().splitlines()
    return {"gradebook": gradebook_rows(course), "csv": sorted(csv), "cache": cache}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    course = _class(tmp_path_factory.mktemp("single"), "course")
    done = subprocess.run(_command(course), capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    state = _state(course)
    assert len(state["cache"]) == 2 and any("ada,03_backward" in line or "ada" in line for line in state["csv"])
    return state


def _sandboxes_started(course: Path) -> bool:
    folder = course / "build" / "grading" / ASSIGNMENT / "sandboxes"
    return folder.is_dir() and any(folder.iterdir())


def _refused(course: Path, first: subprocess.Popen, second: subprocess.Popen) -> None:
    """One of the two runs graded the class, the other refused, naming it; the course is as a single run leaves it."""
    outputs = [process.communicate(timeout=600) for process in (first, second)]
    codes = [first.returncode, second.returncode]
    assert sorted(codes) == [0, EXIT_LOCKED], outputs
    winner, loser = (first, second) if codes[0] == 0 else (second, first)
    told = outputs[[first, second].index(loser)][1]
    assert f"another run is using the course {course}: pid {winner.pid} " in told and "nothing was done" in told


def test_a_second_run_started_with_the_first_or_just_after_refuses(tmp_path, reference):
    course = _class(tmp_path, "course")
    _refused(course, _start(course), _start(course))  # together: whichever locks first grades
    assert _state(course) == reference
    first = _start(course)  # again, 0.3 s apart (every result cached: the runs sanitise, record and export)
    time.sleep(0.3)
    _refused(course, first, _start(course))
    assert _state(course) == reference


def test_a_second_run_with_wait_started_while_the_first_executes_waits_for_it(tmp_path, reference):
    course = _class(tmp_path, "course")
    first = _start(course)
    deadline = time.monotonic() + 120
    while not _sandboxes_started(course) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.poll() is None, "the first run ended before it executed anything"
    second = _start(course, "--wait")
    outputs = [process.communicate(timeout=600) for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    assert f"waiting for pid {first.pid} " in outputs[1][1]
    run = json.loads((course / "build" / "grading" / ASSIGNMENT / "run.json").read_text())
    assert run["executed"] == [] and len(run["cached"]) == 2, run  # the second run reused the first's results
    assert _state(course) == reference
