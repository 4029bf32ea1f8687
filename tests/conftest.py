"""Shared fixtures: the repository root and the assignments present in source/.

The tiers are folders: unit/ (in-process, fast; a few tests beside them go through a real
sandbox and are marked slow), integration/ (sandboxes, real nbgrader, builds, subprocesses) and
e2e/ (servers, browsers, Linux users, installs, Dask). Everything under integration/ and e2e/ is
marked slow here; `make check` runs unit/ without the slow ones, `make test` everything.
"""
import os
import sys
import time
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.implementations

from grader.course import skip_iri_grammars  # noqa: E402

skip_iri_grammars()  # as in the grader's own processes: 1-3 s of CPU per test process otherwise

from grader.grading.execute import one_torch_thread  # noqa: E402

# The checks' thousands of tiny torch calls run on one thread, as in the grader's slots: an intra-op pool's
# idle threads spin between them (~10 ms a call on a busy 2-core machine, against ~10 us on one thread).
one_torch_thread()

from grader.course.build import present_assignments  # noqa: E402

# LNCOURSE_ASSIGNMENTS=03_backward,04_rmsnorm restricts the suite while authoring.
_only = [a for a in os.environ.get("LNCOURSE_ASSIGNMENTS", "").split(",") if a]
ASSIGNMENTS = [a for a in present_assignments(ROOT) if not _only or a in _only]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session", autouse=True)
def built_courses_folder(tmp_path_factory):
    """Where tests.course_helpers builds the courses make_course copies: pytest's temporary tree."""
    from tests import course_helpers

    course_helpers.BUILT_COURSES = tmp_path_factory.mktemp("built-courses")
    yield course_helpers.BUILT_COURSES
    course_helpers.BUILT_COURSES = None


def subprocess_env() -> dict:
    """Environment for child processes: headless matplotlib, the venv's tools on PATH."""
    env = dict(os.environ)
    env["MPLBACKEND"] = "Agg"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.fixture
def shown(monkeypatch):
    """A live-kernel attempt log whose displays are captured: every mime bundle shown, in order."""
    from grader import attempts, learner

    bundles = []
    attempts._testing(live=True, display=bundles.append)
    monkeypatch.setattr(learner, "_solutions", {})
    monkeypatch.setattr(learner, "_plain_hints", {})
    yield bundles
    attempts._stop_testing()


SLOW_TIERS = {"integration", "e2e"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).parent.name in SLOW_TIERS:
            item.add_marker(pytest.mark.slow)


def live_children(pid: int) -> dict[int, str]:
    """pid -> command line of every live (not zombie) descendant of ``pid``; {} where /proc cannot tell."""
    found, frontier = {}, [pid]
    while frontier:
        current = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                try:
                    state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
                    command = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except (OSError, IndexError):
                    continue
                if state != "Z" and child not in found:
                    found[child] = command[:200]
                    frontier.append(child)
    return found


def _default_zygote_pids() -> set[int]:
    """This test process's own warm zygote (grader.grading.sandbox.client.default_zygote), which lives as long
    as the process by design, and its sandboxes: not a leak."""
    client = sys.modules.get("grader.grading.sandbox.client")
    zygote = getattr(client, "_default_zygote", None)
    process = getattr(zygote, "process", None)
    return {process.pid, *live_children(process.pid)} if process is not None else set()


LEAK_GRACE_S = 15  # a server or a kernel told to stop may take seconds to exit on a busy machine


@pytest.fixture(scope="module", autouse=True)
def no_process_outlives_its_module():
    """A test file leaves no process of its own running: each server, kernel, pool or warm process it started is
    stopped by the time its fixtures are torn down (a leaked kernel holds half a GB until the worker exits)."""
    if not sys.platform.startswith("linux"):
        yield
        return
    before = set(live_children(os.getpid()))
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    while True:
        left = {pid: command for pid, command in live_children(os.getpid()).items()
                if pid not in before and pid not in _default_zygote_pids()}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, "still running after the test file's last test:\n" + "\n".join(
        f"  {pid}: {command}" for pid, command in sorted(left.items()))
