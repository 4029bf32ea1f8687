"""The grader's own processes fail mid-run: the class is still graded, and fairly.

A pool worker killed while it executes a notebook, and a zygote killed while sandboxes are
being forked: every notebook the dead process held runs again, so honest learners lose
nothing; nothing earns points it did not earn.
"""
import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import alive, descendants, subprocess_env
from tests.course_helpers import make_course, submit
from tests.integration.test_hostile import ASSIGNMENT, WRONG, solution_sources, submission

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_killed_workers_and_zygotes_cost_no_honest_points(tmp_path):
    course = make_course(tmp_path)
    right = solution_sources()
    slow = "import time\ntime.sleep(2)\n"
    honest = [f"honest{i}" for i in range(5)]
    for student in honest:
        submit(course, student, submission(right, slow))
    submit(course, "wrong", submission(WRONG, slow))
    command = [sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout", "60",
               "--jobs", "2"]
    process = subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    killed, deadline = [], time.monotonic() + 240
    while len(killed) < 2 and time.monotonic() < deadline and process.poll() is None:
        tree = descendants(process.pid)
        zygotes = [p for p in tree if "grader.grading.sandbox.zygote" in cmdline(p)]
        busy = [z for z in zygotes if any(parent(p) == z for p in tree)]  # a zygote with a sandbox running
        # the pool's workers: forked by the coordinator's forkserver (their zygotes come from its factory)
        forkservers = [p for p in tree if "multiprocessing.forkserver" in cmdline(p) and parent(p) == process.pid]
        workers = [p for p in tree if parent(p) in forkservers]
        if busy and workers and not killed:
            killed.append(("worker", workers[0]))  # the pool breaks: every notebook in flight runs again
            subprocess.run(["kill", "-9", str(workers[0])])
        elif busy and len(killed) == 1 and busy[0] != killed[0][1]:
            killed.append(("zygote", busy[0]))
            subprocess.run(["kill", "-9", str(busy[0])])
        time.sleep(0.1)
    output, _ = process.communicate(timeout=600)
    assert [kind for kind, _ in killed] == ["worker", "zygote"], output
    assert process.returncode == 0, output
    with open(course / "build" / "grades.csv", newline="") as f:
        scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}
    assert scores == {**{s: 7.0 for s in honest}, "wrong": 0.0}, output
    deadline = time.monotonic() + 30  # the run has exited: its processes' last exits may still be reaped
    while alive(descendants(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive(descendants(process.pid)) == []
