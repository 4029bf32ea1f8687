"""The feedback side of a grading run: one learner's pages built in a forked worker, within a budget, and the pool
those workers live in, restarted a bounded number of times.

A feedback worker is trusted code (nbgrader's HTML export of the autograded notebook, no sandbox): what it must
survive is a page too big or too slow to render, so it runs within ``GradeConfig.submission_seconds`` of CPU and
``submission_memory`` (``feedback.pages.Budget``); a learner over either gets the plain page.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable

from grader.grading.config import GradeConfig
from grader.grading.run.course_setup import load_config
from grader.grading.run.intake import expected_notebooks
from grader.grading.run.terminal import printable
from grader.grading.slots.execution_slot import die_with_parent
from grader.grading.slots.slot_pool import kill_now

MAX_FEEDBACK_POOLS = 3  # feedback pools in a row that die before any page comes back: then no more are started


def init_feedback():
    """A feedback worker: forked from the coordinator (nbgrader already imported), no sandbox."""
    # speed-ups of nbconvert are per exporter (grader.grading.feedback.pages.FeedbackExporter); the seams' verdicts
    # and switches are the coordinator's, inherited
    die_with_parent()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)  # the hard CPU budget kills (feedback_pages.Budget)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # no core file
    except (ValueError, OSError):
        pass
    gc.freeze()  # the coordinator's heap, inherited: each learner's page (BeautifulSoup's ~5,000 tags) no longer
    # sets off full collections that walk it all (18% of a learner's feedback CPU, 05_placement)


_worker_config = None  # the course's configuration, set in the coordinator before the workers fork


def feedback_marker(root: str, assignment: str, pid: int) -> Path:
    """Where a feedback worker says which learner it is working on (read when a worker was killed)."""
    return Path(root) / "build" / "grading" / assignment / "feedback-running" / f"{pid}.json"


def feedback_task(args, budget: dict | None = None):
    """One learner's feedback, in a (trusted) worker: nbgrader's HTML export is the slow part.

    Within ``GradeConfig.submission_seconds`` of CPU and ``submission_memory`` (``feedback_pages.Budget``);
    over either, the learner gets the plain page. Returns (student, problem or None), or (student, None, note)
    when the learner got the plain page. ``args``: (root, assignment, student); ``budget``: the learner's
    ``notes``, ``seconds``, ``memory`` and ``notebooks`` (missing ones: GradeConfig's defaults, the course's)."""
    global _worker_config
    from grader.grading.autograde.nbgrader_steps import generate_feedback
    from grader.grading.feedback import highlight_cache
    from grader.grading.feedback import pages as feedback_pages

    defaults, budget = GradeConfig(), budget or {}
    root, assignment, student = args
    notes, notebooks = budget.get("notes", []), budget.get("notebooks")
    seconds = budget.get("seconds", defaults.submission_seconds)
    memory = budget.get("memory", defaults.submission_memory)
    _worker_config = _worker_config or load_config(Path(root))  # once per worker
    marker = feedback_marker(root, assignment, os.getpid())
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"student": student, "started": time.time()}))
    except OSError:
        pass
    highlight_cache.new_page()
    try:
        try:
            with feedback_pages.Budget(seconds, memory):
                generate_feedback(_worker_config, Path(root), assignment, student)
        except feedback_pages.OverBudget as over:
            note = feedback_pages.over_budget_note(str(over), seconds, memory)
            feedback_pages.write_plain_pages(_worker_config, Path(root), assignment, student,
                                             notebooks or expected_notebooks(Path(root), assignment), note, notes)
            return student, None, note
    except (Exception, SystemExit) as error:  # noqa: BLE001 - nbgrader raises, or exits, on a broken notebook;
        # KeyboardInterrupt is not caught: an operator's Ctrl-C stops feedback as it stops grading
        return student, f"no feedback could be generated ({type(error).__name__}: {str(error)[:200]})"
    finally:
        marker.unlink(missing_ok=True)
    return student, None


class FeedbackWork:
    """The feedback of one assignment's run: which learner's pages are being built, in which pool.

    ``messages`` and ``unfinished`` are the run's own (shared, not copied): a learner's notes go into their page,
    and a page that cannot be written is said there. ``pool_factory(jobs)`` returns a fresh pool (anything with
    ``submit(fn, *args) -> Future`` and ``shutdown``), called at the first page and after a ``BrokenProcessPool``,
    at most ``MAX_FEEDBACK_POOLS + 1`` times in a row without a page coming back.
    """

    def __init__(self, root: Path, assignment: str, settings: GradeConfig, config, notebooks: list[str],
                 messages: dict[str, list[str]], unfinished: set[str], jobs: int,
                 pool_factory: Callable | None = None):
        self.root, self.assignment, self.settings, self.config = root, assignment, settings, config
        self.notebooks, self.messages, self.unfinished, self.jobs = notebooks, messages, unfinished, jobs
        self.pool_factory = pool_factory or self._new_pool
        self.pool: ProcessPoolExecutor | None = None  # light (forked, no torch): started at the first page
        self.pending: dict = {}  # future -> student
        self.pools_lost = 0  # pools that died since the last page came back (MAX_FEEDBACK_POOLS)

    def _pool(self):
        if self.pool is None:
            self.pool = self.pool_factory(self.jobs)
        return self.pool

    def _new_pool(self, jobs: int) -> ProcessPoolExecutor:
        global _worker_config
        _worker_config = self.config  # inherited by the forked workers: no config file read again
        return ProcessPoolExecutor(max_workers=jobs, initializer=init_feedback)

    def submit(self, student: str) -> None:
        """Ask for one learner's pages (their notes so far go on top)."""
        budget = {"notes": list(self.messages.get(student, [])), "seconds": self.settings.submission_seconds,
                  "memory": self.settings.submission_memory, "notebooks": list(self.notebooks)}
        if self.pools_lost > MAX_FEEDBACK_POOLS:
            self._none_possible(student)
            return
        try:
            future = self._pool().submit(feedback_task, (str(self.root), self.assignment, student), budget)
        except BrokenProcessPool as error:  # the pool died meanwhile: the collecting loop rebuilds it (counted)
            future = Future()
            future.set_exception(error)
        self.pending[future] = student

    def _none_possible(self, student: str) -> None:
        self.messages[student].append(f"no feedback could be generated: {MAX_FEEDBACK_POOLS + 1} feedback workers in "
                                      "a row died before writing any page (the grader's environment, not the "
                                      "notebook); the grade is recorded: tell the instructor")
        self.unfinished.add(student)

    def sweep(self) -> None:
        """Remove from feedback/*/ASSIGNMENT/ what is not the grader's (learner files an earlier run, plain
        nbgrader generate_feedback or an older nbgrader copied there): ``feedback_pages.sweep``."""
        from grader.grading.feedback.pages import sweep

        try:
            removed = sweep(self.config, self.root, self.assignment, self.notebooks)
        except Exception as error:  # noqa: BLE001 - the grader's own disk: the run goes on, and says so
            print(f"feedback/ could not be cleaned of learner files ({type(error).__name__}: {error})", file=sys.stderr)
            return
        if removed:
            print(f"removed {len(removed)} learner file(s) an earlier run left in feedback/ (e.g. "
                  f"{printable(removed[0], 200)}): only the grader's pages are released", file=sys.stderr)

    def over_budget_workers(self) -> dict[int, str]:
        """pid -> student of each feedback worker that the CPU budget (SIGXCPU) or a kill (the wall-clock
        watchdog, the kernel's OOM killer) ended while it built that learner's page."""
        found = {}
        for pid, process in list((getattr(self.pool, "_processes", None) or {}).items()):
            if process.exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
                try:
                    marker = feedback_marker(str(self.root), self.assignment, pid)
                    found[pid] = json.loads(marker.read_text())["student"]
                except (OSError, ValueError, KeyError, TypeError):
                    pass
        return found

    def _plain_pages(self, student: str) -> None:
        """The plain page for a learner whose feedback worker had to be killed, written here (milliseconds)."""
        from grader.grading.feedback.pages import over_budget_note, write_plain_pages

        note = over_budget_note("time", self.settings.submission_seconds, self.settings.submission_memory)
        try:
            write_plain_pages(self.config, self.root, self.assignment, student, self.notebooks, note,
                              self.messages.get(student, []))
            self.messages.setdefault(student, []).append(note)
        except Exception as error:  # noqa: BLE001 - the grader's own disk
            self.messages.setdefault(student, []).append(f"no feedback could be generated ({type(error).__name__})")
            self.unfinished.add(student)

    def _watch(self) -> None:
        """Kill a feedback worker that has spent three times the budget, plus 30 s, of wall-clock time on one
        learner (its CPU budget kills it sooner; this catches a worker that waits instead)."""
        limit = 3 * self.settings.submission_seconds + 30
        folder = feedback_marker(str(self.root), self.assignment, 0).parent
        for marker in folder.glob("*.json") if folder.is_dir() else []:
            try:
                started = json.loads(marker.read_text())["started"]
                if time.time() - float(started) > limit:
                    os.kill(int(marker.stem), signal.SIGKILL)
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def _rebuild_pool(self) -> None:
        """A feedback worker died: a learner whose page killed it (over budget) gets the plain page; every
        other feedback not yet written is asked of a fresh pool."""
        culprits = set(self.over_budget_workers().values())
        kill_now(self.pool)
        self.pool = None
        self.pools_lost += 1  # never an endless loop: past MAX_FEEDBACK_POOLS, submit gives up
        shutil.rmtree(feedback_marker(str(self.root), self.assignment, 0).parent, ignore_errors=True)
        for future, student in list(self.pending.items()):
            if future.done() and not isinstance(future.exception(), BrokenProcessPool):
                continue
            del self.pending[future]
            if student in culprits:
                self._plain_pages(student)
            else:
                self.submit(student)

    def drain(self) -> None:
        """Wait for every page asked for; a learner's problem or note goes into their messages."""
        while self.pending:
            done, _ = wait(list(self.pending), timeout=5, return_when=FIRST_COMPLETED)
            if not done:
                self._watch()
                continue
            future = next(iter(done))
            note = None
            try:
                student, problem, *noted = future.result()
                note = noted[0] if noted else None
                self.pools_lost = 0  # a pool that answers
            except BrokenProcessPool:
                self._rebuild_pool()
                continue
            except Exception as error:  # noqa: BLE001 - one learner's failure is recorded, the class goes on
                student, problem = self.pending[future], f"no feedback could be generated ({type(error).__name__})"
            del self.pending[future]
            if note:
                self.messages[student].append(note)
            if problem:
                self.messages[student].append(problem)
                self.unfinished.add(student)
