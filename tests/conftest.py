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

from grader.course import skip_iri_grammars  # noqa: E402 - after the sys.path insert

skip_iri_grammars()  # as in the grader's own processes: 1-3 s of CPU per test process otherwise

from grader.grading.autograde.execute import one_torch_thread  # noqa: E402 - after skip_iri_grammars()

# The checks' thousands of tiny torch calls run on one thread, as in the grader's slots: an intra-op pool's
# idle threads spin between them (~10 ms a call on a busy 2-core machine, against ~10 us on one thread).
one_torch_thread()

from grader.course.build import present_assignments  # noqa: E402 - after one_torch_thread()

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
    monkeypatch.setattr(learner, "_plain_checks", {})
    yield bundles
    attempts._stop_testing()


SLOW_TIERS = {"integration", "e2e"}
# The order the files are handed to the test processes (`make test` runs pytest-xdist's loadfile with
# --no-loadscope-reorder, so files go out in collection order): the slowest tier first and, within a tier, the
# files with slow tests first, so that at the end the many short unit files even out the two processes instead
# of one of them idling while the other runs a minute-long end-to-end file. (xdist's own reordering, by number
# of tests, sent the one-test end-to-end files last.)
TIER_ORDER = {"e2e": 0, "integration": 1, "unit": 2}


def pytest_collection_modifyitems(config, items):
    def tier(item) -> str:
        return Path(str(item.fspath)).parent.name

    for item in items:
        if tier(item) in SLOW_TIERS:
            item.add_marker(pytest.mark.slow)
    with_slow_tests = {str(item.fspath) for item in items if item.get_closest_marker("slow")}

    def rank(item) -> tuple[int, int]:
        return TIER_ORDER.get(tier(item), len(TIER_ORDER)), 0 if str(item.fspath) in with_slow_tests else 1

    items.sort(key=rank)  # stable: each file's tests stay together and in their order (module fixtures run once)


def descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every live descendant of ``pid`` (start time guards against pid reuse)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = {}, [pid]
    while frontier:
        current = frontier.pop()
        for child, (parent, start) in parents.items():
            if parent == current and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def alive(processes: dict[int, str]) -> list[int]:
    """Which of ``processes`` (pid -> start time, from ``descendants``) still run: not exited, not reused."""
    living = []
    for pid, start in processes.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if stat[19] == start and stat[0] != "Z":
                living.append(pid)
        except (OSError, IndexError):
            pass
    return living


def _default_zygote_pids() -> set[int]:
    """This test process's own warm zygote (grader.grading.sandbox.zygote_client.default_zygote), which lives as long
    as the process by design, and its sandboxes: not a leak."""
    zygote_client = sys.modules.get("grader.grading.sandbox.zygote_client")
    zygote = getattr(zygote_client, "_default_zygote", None)
    process = getattr(zygote, "process", None)
    return {process.pid, *descendants(process.pid)} if process is not None else set()


LEAK_GRACE_S = 15  # a server or a kernel told to stop may take seconds to exit on a busy machine


@pytest.fixture(scope="module", autouse=True)
def no_process_outlives_its_module():
    """A test file leaves no process of its own running: each server, kernel, pool or warm process it started is
    stopped by the time its fixtures are torn down (a leaked kernel holds half a GB until the worker exits)."""
    if not sys.platform.startswith("linux"):
        yield
        return
    before = set(descendants(os.getpid()))
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    while True:
        exempt = before | _default_zygote_pids()
        left = alive({pid: start for pid, start in descendants(os.getpid()).items() if pid not in exempt})
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, "still running after the test file's last test:\n" + "\n".join(
        f"  {pid}: {command_line(pid)}" for pid in sorted(left))


def command_line(pid: int) -> str:
    """The command line of process ``pid``, for a message ("?" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"
