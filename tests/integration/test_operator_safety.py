"""Operator hazards: `make clean` keeps a class's work; SIGTERM stops every process of a run.

A run interrupted half-way leaves the gradebook consistent, and running the same command
again grades the whole class.
"""
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, alive, descendants, subprocess_env
from tests.course_helpers import make_course, submit
from tests.integration.test_hostile import ASSIGNMENT, grade, solution_sources, submission


def test_make_clean_removes_only_regenerable_files(tmp_path):
    shutil.copy2(ROOT / "Makefile", tmp_path / "Makefile")
    keep = ["submitted/ada/03_backward/03_backward.ipynb", "build/gradebook.db", "autograded/ada/03_backward/x.ipynb",
            "feedback/ada/03_backward/x.html", "source/03_backward/03_backward.py",
            "release/03_backward/03_backward.ipynb"]
    gone = ["build/grading/03_backward/messages.json", "build/grades.csv", "source/03_backward/03_backward.ipynb"]
    for name in keep + gone:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    subprocess.run(["make", "clean"], cwd=tmp_path, check=True, capture_output=True)
    assert [n for n in keep if not (tmp_path / n).exists()] == []
    assert [n for n in gone if (tmp_path / n).exists()] == []
    for target in re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M):
        recipe = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True).stdout
        assert not re.search(r"rm\b[^\n]*\b(submitted|autograded|feedback|gradebook)", recipe), (target, recipe)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_every_process_and_a_rerun_completes_the_class(tmp_path):
    course = make_course(tmp_path)
    right = solution_sources()
    slow = "import time\ntime.sleep(3)\n"
    # bob's escapees start first and his notebook then sleeps, so they live for seconds: the
    # poll below sees them even on a loaded machine (after the sleep they lived ~0.5 s).
    escape = ("import subprocess, os, time\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
              "if os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\n    os._exit(0)\n"
              "time.sleep(6)\n")
    for student in ["ada", "bob", "cy", "dee"]:
        submit(course, student, submission(right, escape if student == "bob" else slow))
    command = [sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout", "60"]
    process = subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    deadline, seen = time.monotonic() + 120, {}
    while time.monotonic() < deadline and process.poll() is None:
        seen.update(descendants(process.pid))
        if any("sleep" in Path(f"/proc/{p}/cmdline").read_text(errors="replace") for p in alive(seen)):
            break  # bob's escapees are running: a notebook is mid-flight
        time.sleep(0.2)
    seen.update(descendants(process.pid))
    assert process.poll() is None, process.stdout.read()
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert "interrupted by SIGTERM" in output
    deadline = time.monotonic() + 30  # the kernel tears down namespaces asynchronously
    while alive(seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive(seen) == [], f"still running after SIGTERM: {alive(seen)}\n{output}"

    scores, messages, _ = grade(course, timeout=60)  # the same command again completes the class
    assert scores == {"ada": 7.0, "bob": 7.0, "cy": 7.0, "dee": 7.0}, messages


@pytest.mark.slow
def test_when_no_sandbox_can_start_nothing_is_scored(tmp_path):
    """An isolation level that cannot be had stops the run before any notebook executes."""
    course = make_course(tmp_path)
    submit(course, "ada", submission(solution_sources()))
    env = {**subprocess_env(), "LNCOURSE_ISOLATION": "no-such-level"}
    result = subprocess.run([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no sandbox could start" in result.stderr and "Nothing was scored" in result.stderr
    assert not (course / "build" / "grades.csv").exists()


def test_a_course_directory_others_can_enter_is_pointed_out():
    from grader.grading.run.course_setup import exposure_warning

    home = Path(tempfile.mkdtemp(prefix="lncourse-test-home-"))  # under /tmp: every folder above lets others in
    try:
        home.chmod(0o755)
        course = home / "course"
        course.mkdir()
        course.chmod(0o700)
        assert exposure_warning(course) is None
        course.chmod(0o755)
        warning = exposure_warning(course)
        assert warning and "mode 755" in warning and "chmod 700" in warning
        course.chmod(0o701)  # entering without listing still reaches source/ by name
        assert exposure_warning(course)
        home.chmod(0o700)  # a private home around it keeps everyone out
        assert exposure_warning(course) is None
    finally:
        shutil.rmtree(home)
