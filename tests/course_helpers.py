"""Helpers several test modules share: a headless browser, a course copy, solutions typed into a notebook, a local
Jupyter server (its environment, its port, waiting for it and stopping it).

Not a test module (no ``test_`` prefix): importing it runs nothing and collects nothing.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat

from tests.conftest import ROOT

# What every course copy has: the course's nbgrader configuration and the package metadata.
COURSE_FILES = ["nbgrader_config.py", "pyproject.toml"]
# Generated notebooks and byte code are never copied: a copy is built from the percent scripts.
SOURCE_IGNORE = shutil.ignore_patterns("*.ipynb", "__pycache__")


# -- a headless browser ------------------------------------------------------------------------------------
CHROMIUM = "/usr/bin/chromium"  # Debian's chromium (tools/ensure-chromium installs it): playwright drives it
# No sandbox (root in containers), no GPU, and nothing that reaches the network by itself.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def require_chromium() -> str:
    """CHROMIUM's path; a test without it is skipped, or fails under CI (which must run every browser test)."""
    if not os.path.exists(CHROMIUM):
        import pytest

        message = f"{CHROMIUM} is missing: run tools/ensure-chromium (as root it installs Debian's chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


def launch_chromium(playwright):
    """A headless chromium (``require_chromium`` first) from a ``sync_playwright()`` context."""
    return playwright.chromium.launch(executable_path=require_chromium(), args=CHROMIUM_ARGS, headless=True)


# -- a course copy -----------------------------------------------------------------------------------------
def copy_course(course: Path, assignments: list[str] | None = None) -> Path:
    """``course`` (created, with its parents) holding the course files and source/ for ``assignments``
    (all of source/ when None), not built."""
    course.mkdir(parents=True)
    for name in COURSE_FILES:
        shutil.copy2(ROOT / name, course / name)
    if assignments is None:
        shutil.copytree(ROOT / "source", course / "source", ignore=SOURCE_IGNORE)
    else:
        (course / "source").mkdir()
        for assignment in assignments:
            shutil.copytree(ROOT / "source" / assignment, course / "source" / assignment, ignore=SOURCE_IGNORE)
    return course


# assignment -> a course built once per test process (a build costs seconds: jupytext, nbgrader's
# generate_assignment, a new gradebook); make_course hands out copies of it. They are built in
# BUILT_COURSES, a folder of pytest's temporary tree (tests/conftest.py sets it): pytest removes it in a
# later session even if this process is killed.
_BUILT: dict[str, Path] = {}
BUILT_COURSES: Path | None = None


def _built_course(assignment: str) -> Path:
    if assignment not in _BUILT:
        from grader.course.build import build

        assert BUILT_COURSES is not None, "tests/conftest.py's built_courses_folder fixture sets BUILT_COURSES"
        course = copy_course(BUILT_COURSES / assignment / "course", [assignment])
        build(course, [assignment])
        _BUILT[assignment] = course
    return _BUILT[assignment]


def make_course(tmp_path: Path, assignment: str = "03_backward", name: str = "course") -> Path:
    """A course folder ``tmp_path/name`` with ``assignment``'s source, release and gradebook, as `make build`
    leaves them: a copy (files, modes and times) of one course this process built."""
    course = tmp_path / name
    shutil.copytree(_built_course(assignment), course, symlinks=True)
    return course


def submit(course: Path, student: str, content, assignment: str = "03_backward") -> None:
    """Put a submission in submitted/STUDENT/ASSIGNMENT/: a notebook, raw bytes, or (file name, notebook)."""
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True)
    if isinstance(content, bytes):
        (folder / f"{assignment}.ipynb").write_bytes(content)
    elif isinstance(content, tuple):
        nbformat.write(content[1], folder / content[0])
    else:
        nbformat.write(content, folder / f"{assignment}.ipynb")


# -- solutions ---------------------------------------------------------------------------------------------
def solution_sources(assignment: str, ids) -> dict[str, str]:
    """The solution code of the cells ``ids`` of source/ASSIGNMENT (markers removed), by cell id."""
    from grader.course.build import SOLUTION_MARKER, script_to_notebook

    source = script_to_notebook(ROOT / "source" / assignment / f"{assignment}.py")  # the .ipynb is git-ignored
    return {c.id: SOLUTION_MARKER.sub("", c.source) for c in source.cells if c.id in ids}


def type_solutions(nb, solutions: Path, how_many: int | None = None) -> list[str]:
    """Copy into ``nb`` each solution cell's source from the notebook ``solutions`` (same cell id).

    Only the first ``how_many`` solution cells (all when None); returns their ids.
    """
    solved = {c.id: c for c in nbformat.read(solutions, as_version=4).cells}
    answer_ids = [c.id for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    chosen = answer_ids if how_many is None else answer_ids[:how_many]
    for cell in nb.cells:
        if cell.id in chosen:
            assert cell.id in solved, f"{solutions} has no cell {cell.id!r}"
            cell.source = solved[cell.id].source
    return chosen


def splice(fetched: Path, solutions: Path, how_many: int | None) -> list[str]:
    """Type the solutions into the notebook file ``fetched`` (see type_solutions); returns the ids."""
    nb = nbformat.read(fetched, as_version=4)
    chosen = type_solutions(nb, solutions, how_many)
    nbformat.write(nb, fetched)
    return chosen


# -- a local Jupyter server --------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jupyter_folders(base: Path) -> dict[str, str]:
    """Environment variables giving a Jupyter server a home, configuration and settings of its own under ``base``."""
    return dict(HOME=str(base / "home"), JUPYTER_CONFIG_DIR=str(base / "config"), JUPYTER_DATA_DIR=str(base / "data"),
                JUPYTER_RUNTIME_DIR=str(base / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(base / "settings"),
                JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"))


def wait_for_server(process: subprocess.Popen, url: str, token: str, log_path: Path, seconds: float,
                    what: str = "JupyterLab", reply_timeout: float = 5) -> float:
    """Poll ``url``/api/status until it answers 200; fail, with the log's tail, if the server exits or
    ``seconds`` pass. Returns the seconds it took."""
    began = time.monotonic()
    while True:
        assert process.poll() is None, f"{what} exited with {process.returncode}:\n{log_path.read_text()[-4000:]}"
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=reply_timeout) as reply:
                if reply.status == 200:
                    return time.monotonic() - began
        except OSError:
            pass
        assert time.monotonic() - began < seconds, (
            f"{what} did not answer in {seconds:.0f} s:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.5)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group (server and kernels), SIGKILL if it lingers. The group is
    signalled even when its leader has exited (``make`` gone, the server it started still running)."""
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def gradebook_rows(course: Path) -> dict:
    """Every row of the gradebook's grading tables that a run writes, without database ids."""
    with sqlite3.connect(course / "build" / "gradebook.db") as db:
        def rows(query):
            return sorted(tuple(map(str, row)) for row in db.execute(query))

        return {
            "submissions": rows("select s.id, a.name from submitted_assignment sa join student s on "
                                "sa.student_id = s.id "
                                "join assignment a on sa.assignment_id = a.id"),
            "notebooks": rows("select count(*) from submitted_notebook"),
            "grades": rows("select st.id, c.name, g.auto_score, g.manual_score, g.needs_manual_grade from grade g "
                           "join base_cell c on g.cell_id = c.id join submitted_notebook n on g.notebook_id = n.id "
                           "join submitted_assignment sa on n.assignment_id = sa.id "
                           "join student st on sa.student_id = st.id"),
            "comments": rows("select st.id, c.name, m.auto_comment from comment m "
                             "join base_cell c on m.cell_id = c.id join submitted_notebook n on m.notebook_id = n.id "
                             "join submitted_assignment sa on n.assignment_id = sa.id "
                             "join student st on sa.student_id = st.id"),
        }
