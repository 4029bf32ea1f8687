"""The whole nbgrader exchange cycle on one machine: release, fetch, submit, collect, grade, feedback.

An instructor (a temporary copy of the course) and three students (alice submits every
solution, bob only the first exercise, carol the notebook as she fetched it) each get their
own HOME and working folder; they share one temporary exchange, configured the way a real
deployment does it, in each user's ~/.jupyter/nbgrader_config.py. The instructor follows
the README: `make build`, `nbgrader release_assignment`, `nbgrader collect`, `python -m grader
grade` (both assignments in one command), `nbgrader release_feedback`; students run `nbgrader
fetch_assignment`, `submit` and `fetch_feedback`. nbgrader commands run as its `nbgrader`
script does, in one process per user for the whole cycle, because importing nbgrader costs
seconds and the cycle has dozens of steps.
"""
import csv
import html
import json
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from grader.course.build import build
from tests.conftest import ROOT, subprocess_env
from tests.course_helpers import copy_course, splice

pytestmark = pytest.mark.slow

# Two assignments, graded in one command: the cycle's steps do not depend on the notebook. Each of
# the six assignments' own tests are checked elsewhere: test_build (solutions pass, stubs fail),
# test_misconceptions (every mutant diagnosed as graded), test_no_solution_leak (no hidden test where learners read).
ASSIGNMENTS = ["02_geometry", "04_rmsnorm"]
COURSE_ID = "layernorm-rmsnorm"  # c.CourseDirectory.course_id in nbgrader_config.py
STUDENTS = {"alice": "full", "bob": "partial", "carol": "blank"}
SOLVED_EXERCISES = {"full": None, "partial": 1, "blank": 0}  # how many solution cells each types in

# One process per user for the whole cycle (importing nbgrader costs about 2 s of CPU): it reads a JSON
# list of commands per line on stdin and runs them in order, stopping at the first failure, then prints
# DONE and the exit code. ["grader", ARGS...] runs as `python -m grader ARGS` (a child process),
# [ARGS...] as `nbgrader ARGS` does (NbGraderApp.launch_instance).
DONE = "@@exchange-step-done"
DRIVER = f"""
import json, subprocess, sys, time
from nbgrader.apps.nbgraderapp import NbGraderApp

def run(argv):
    command = "python -m grader " + " ".join(argv[1:]) if argv[0] == "grader" else "nbgrader " + " ".join(argv)
    print(f"[{{time.strftime('%H:%M:%S')}}] $ {{command}}", flush=True)
    try:
        if argv[0] == "grader":  # its own process, as `make grade` runs it
            code = subprocess.run([sys.executable, "-m", *argv], stdin=subprocess.DEVNULL).returncode
        else:
            NbGraderApp.launch_instance(argv=argv)
            code = 0
    except SystemExit as exit_:
        code = exit_.code
    if argv[0] != "grader":
        app = NbGraderApp.instance()
        if getattr(app, "subapp", None) is not None:
            type(app.subapp).clear_instance()
        NbGraderApp.clear_instance()
    if code:
        print(f"{{command}} exited with {{code}}", flush=True)
    return code

for line in sys.stdin:
    code = 0
    for argv in json.loads(line):
        code = run(argv)
        if code:
            break
    print("{DONE}", code or 0, flush=True)
"""


def user_environment(home: Path) -> dict:
    """A login of its own: HOME, no inherited Jupyter folders or hub user."""
    env = subprocess_env()
    for name in list(env):
        if name.startswith("JUPYTER") or name == "PYTHONPATH":
            del env[name]
    env["HOME"] = str(home)
    return env


class Login:
    """One user's driver process (``DRIVER``), in the user's working folder, with the user's HOME."""

    def __init__(self, who: str, cwd: Path, home: Path):
        self.who = who
        self.process = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=cwd, env=user_environment(home),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the process ended

    def send(self, steps: list[list[str]]) -> None:
        self.began = time.monotonic()
        self.process.stdin.write(json.dumps(steps) + "\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 900) -> str:
        """The output of the steps last sent, once they are done; fails the test if one failed."""
        out, deadline = [], time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                pytest.fail(f"{self.who}: nbgrader timed out\n{''.join(out)[-5000:]}")
            if line is None:
                pytest.fail(f"{self.who}: the driver ended\n{''.join(out)[-8000:]}")
            if line.startswith(DONE):
                break
            out.append(line)
        text = "".join(out)
        assert line.split()[1] == "0", f"{self.who}: nbgrader failed\n{text[-8000:]}"
        print(f"[exchange] {self.who}: {time.monotonic() - self.began:.1f} s")
        return text

    def run(self, steps: list[list[str]]) -> str:
        self.send(steps)
        return self.finish()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_students(logins: dict, steps) -> dict:
    """Run each student's steps (a function of the student's id) side by side."""
    for student in STUDENTS:
        logins[student].send(steps(student))
    return {student: logins[student].finish() for student in STUDENTS}


def exercise_points(source_nb) -> tuple[list[float], float]:
    """Points of the test cells after each solution cell, in order, and the total."""
    per_exercise, total = [], 0.0
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            per_exercise.append(0.0)
        elif meta.get("grade"):
            points = float(meta.get("points", 0))
            total += points
            if per_exercise and not meta.get("solution"):
                per_exercise[-1] += points
    return per_exercise, total


def page_text(path: Path) -> str:
    """The text a reader sees in an HTML page (tags dropped, entities decoded)."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"<(script|style)\b.*?</\1>", "", text, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def hidden_test_lines(source_nb) -> list[str]:
    lines = []
    for cell in source_nb.cells:
        for block in re.findall(r"### BEGIN HIDDEN TESTS[^\n]*\n(.*?)### END HIDDEN TESTS", cell.source, re.S):
            lines += [line.strip() for line in block.splitlines() if len(line.strip()) > 8]
    return lines


@pytest.fixture(scope="module")
def cycle(tmp_path_factory):
    """Run the cycle once for every assignment; return the folders and the exported scores."""
    base = tmp_path_factory.mktemp("exchange-cycle")
    exchange = base / "exchange"
    exchange.mkdir()
    course = copy_course(base / "instructor" / "course")
    build(course, ASSIGNMENTS)  # `make build`: source notebooks, release/ and the gradebook

    users = {"instructor": {"home": base / "instructor" / "home", "work": course}}
    for student in STUDENTS:
        users[student] = {"home": base / student / "home", "work": base / student / "work"}
    for user in users.values():
        user["work"].mkdir(parents=True, exist_ok=True)
        (user["home"] / ".jupyter").mkdir(parents=True)
        (user["home"] / ".jupyter" / "nbgrader_config.py").write_text(
            "c = get_config()\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
            f"c.Exchange.root = {str(exchange)!r}\n")

    logins = {who: Login(who, user["work"], user["home"]) for who, user in users.items()}
    try:
        return run_cycle(users, logins, course, base, exchange)
    finally:  # after a failure too: no driver left behind
        for login in logins.values():
            login.close()


def run_cycle(users: dict, logins: dict, course: Path, base: Path, exchange: Path) -> dict:
    out = {}
    out["release"] = logins["instructor"].run([["release_assignment", a] for a in ASSIGNMENTS])
    out["fetch"] = run_students(logins, lambda s: [["fetch_assignment", a] for a in ASSIGNMENTS])

    spliced = {}
    for student, kind in STUDENTS.items():
        for a in ASSIGNMENTS:
            fetched = users[student]["work"] / a / f"{a}.ipynb"
            assert fetched.exists(), f"{student} did not fetch {a}"
            spliced[(student, a)] = splice(fetched, ROOT / "solutions" / f"{a}.ipynb", SOLVED_EXERCISES[kind])

    out["submit"] = run_students(logins, lambda s: [["submit", a, f"--student={s}"] for a in ASSIGNMENTS])
    # The README's instructor workflow: collect, `python -m grader grade` (nbgrader's autograde and
    # feedback around sandboxed execution, then nbgrader's CSV export), release. Both assignments
    # in one command: the same warm workers grade one after another.
    # Every user here is root, so nbgrader's check that a submission's owner matches its
    # student id cannot hold; it only logs a warning, which is switched off.
    csv_path = course / "build" / "grades.csv"
    steps = ([["collect", a, "--ExchangeCollect.check_owner=False"] for a in ASSIGNMENTS]
             + [["grader", "grade", *ASSIGNMENTS, "--root", str(course)]]  # every assignment, one warm pool
             + [["release_feedback", a] for a in ASSIGNMENTS])
    out["grade"] = logins["instructor"].run(steps)
    out["fetch_feedback"] = run_students(
        logins, lambda s: [["fetch_feedback", a, f"--student={s}"] for a in ASSIGNMENTS])

    with open(csv_path, newline="") as f:
        scores = {(r["assignment"], r["student_id"]): (float(r["raw_score"]), float(r["max_score"]))
                  for r in csv.DictReader(f)}
    return {"base": base, "course": course, "exchange": exchange, "users": users, "scores": scores, "log": out,
            "spliced": spliced}


def source_notebook(cycle, assignment):
    return nbformat.read(cycle["course"] / "source" / assignment / f"{assignment}.ipynb", as_version=4)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_students_fetch_the_release(cycle, assignment):
    """Each student's fetched copy is the student release: same cells, stubs not solutions."""
    release = nbformat.read(cycle["course"] / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    assert (cycle["exchange"] / COURSE_ID / "outbound" / assignment / f"{assignment}.ipynb").exists()
    for student in STUDENTS:
        # the fetched copy was edited in place; its cell ids and order are the release's
        fetched = nbformat.read(cycle["users"][student]["work"] / assignment / f"{assignment}.ipynb", as_version=4)
        assert [c.id for c in fetched.cells] == [c.id for c in release.cells]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_collected_submissions_are_what_students_submitted(cycle, assignment):
    for student in STUDENTS:
        submitted = cycle["course"] / "submitted" / student / assignment / f"{assignment}.ipynb"
        assert submitted.exists(), f"nbgrader collect did not bring {student}'s {assignment}"
        work = cycle["users"][student]["work"] / assignment / f"{assignment}.ipynb"
        assert nbformat.read(submitted, as_version=4) == nbformat.read(work, as_version=4)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_exported_scores(cycle, assignment):
    """Full solution = maximum; first exercise only = the points of its tests; untouched = 0."""
    per_exercise, total = exercise_points(source_notebook(cycle, assignment))
    assert total > 0 and per_exercise and per_exercise[0] > 0
    assert cycle["scores"][(assignment, "alice")] == (total, total)
    assert cycle["scores"][(assignment, "bob")] == (per_exercise[0], total), (
        f"bob solved only {cycle['spliced'][('bob', assignment)]}")
    assert cycle["scores"][(assignment, "carol")] == (0.0, total)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("student", list(STUDENTS))
def test_feedback_reaches_the_student(cycle, assignment, student):
    fetched = list((cycle["users"][student]["work"] / assignment / "feedback").glob(f"*/{assignment}.html"))
    assert len(fetched) == 1, f"{student} fetched no feedback for {assignment}"
    released = cycle["course"] / "feedback" / student / assignment / f"{assignment}.html"
    assert fetched[0].read_bytes() == released.read_bytes()


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("student", list(STUDENTS))
def test_feedback_hides_hidden_tests_but_keeps_messages(cycle, assignment, student):
    """No line of a hidden-test block is in the feedback; every test cell's output text is."""
    feedback = cycle["course"] / "feedback" / student / assignment / f"{assignment}.html"
    text = page_text(feedback)
    hidden = hidden_test_lines(source_notebook(cycle, assignment))
    assert hidden, f"{assignment} has no hidden tests"
    leaked = [line for line in hidden if line in text]
    assert not leaked, f"{student}'s feedback on {assignment} shows hidden test code: {leaked[:3]}"
    assert "HIDDEN TESTS" not in text, f"{student}'s feedback on {assignment} shows a hidden-test marker"

    autograded = nbformat.read(cycle["course"] / "autograded" / student / assignment / f"{assignment}.ipynb",
                               as_version=4)
    ansi = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    checked = 0
    for cell in autograded.cells:
        if not cell.metadata.get("nbgrader", {}).get("grade") or cell.cell_type != "code":
            continue
        for output in cell.outputs:
            if output.output_type == "stream":
                lines = output.text.splitlines()
            elif output.output_type == "error":
                lines = [f"{output.ename}: {output.evalue}" if output.evalue else output.ename]
                lines += ansi.sub("", output.traceback[-1]).splitlines() if output.traceback else []
            else:
                continue
            for line in (s.strip() for s in lines):
                if line:
                    assert " ".join(line.split()) in " ".join(text.split()), (
                        f"{student}'s feedback on {assignment} lost the message: {line}")
                    checked += 1
    assert checked, f"no test cell of {assignment} printed anything for {student}"
    if STUDENTS[student] != "full":
        assert "NotImplementedError" in text
