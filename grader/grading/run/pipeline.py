"""``python -m grader grade ASSIGNMENT``: grade a whole class safely and in parallel.

1. intake   Copy submitted/*/ASSIGNMENT into build/grading/ (submitted/ is never written):
            any bytes become a repaired notebook or the blank release plus a message
            (grader.grading.run.intake); the learner's other files follow, vetted.
2. sanitise nbgrader restores locked and test cells from the gradebook (per learner: one
            broken submission cannot stop the others).
3. execute  Each notebook is a job (grader.grading.run.jobs): the learner's folder + the assignment's
            trusted bundle, keyed by content. A job whose accepted result is cached is not
            run again; the others run in parallel (--jobs), each in its own sandbox, test cells
            in the trusted grader with the learner's functions as proxies (grader.grading.autograde.execute).
            A worker returns the result as JSON; this process alone validates it for the job
            it submitted (grader.grading.run.jobs.accept) and writes the cache and build/grading/results/.
4. record   nbgrader saves the scores in the gradebook (this process is its only writer),
            from validated results only (grader.grading.run.results: fail closed), every graded cell afresh
            (one missing from the submission scores zero: nbgrader_steps.ResetAbsentGrades); a worker writes the
            learner's feedback (hidden tests removed, grading notes on top); a CSV follows.

Steps 2-4 are pipelined per learner, so the serial nbgrader steps overlap the execution.

Processes: this coordinator, and the execution slots forked from two warm processes it starts
once (grader.grading.slots.slot_pool); each slot's zygote forks one sandbox per notebook.

Settings: grader.grading.config.GradeConfig. A run killed at any moment (even SIGKILL) leaves the
gradebook consistent; running it again re-executes only the jobs with no cached result. One run per
course at a time (grader.grading.run.course_lock): a second one refuses, or waits with --wait.
"""
from __future__ import annotations

import csv
import gc
import json
import os
import shutil
import signal
import stat
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from grader.course import course_root, tool_environment
from grader.grading.config import GradeConfig, grade_config
from grader.grading.run.intake import expected_notebooks, mirror_submission
from grader.grading.run.jobs import Job, ResultCache, accept, grader_version
from grader.grading.run.terminal import Progress, printable
from grader.grading.sandbox.isolation import IsolationError, check_level
from grader.grading.slots.execution_slot import die_with_parent, execute_task, probe
from grader.grading.slots.slot_pool import new_slot_pool
from grader.grading.startup import never_graded


def load_config(root: Path):
    """The course's nbgrader_config.py, with nbconvert validating each notebook once per step.

    nbconvert validates the whole notebook against its JSON schema after every preprocessor
    (seven per nbgrader step here, a third of the coordinator's time per learner);
    ``Exporter.optimistic_validation`` validates once, after the last one, and still raises on an
    invalid notebook. An instructor's own setting of it is kept.
    """
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    exporters = ("Exporter", "TemplateExporter", "NotebookExporter", "HTMLExporter")
    if not any("optimistic_validation" in config.get(name, {}) for name in exporters):
        config.Exporter.optimistic_validation = True
    return config


DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"  # nbgrader's Exchange.root default


def secret_folders(root: Path) -> list[str]:
    """The course and every nbgrader exchange any configuration names, for the sandbox to cover.

    nbgrader reads nbgrader_config.py from each of Jupyter's config folders (JUPYTER_CONFIG_PATH,
    ~/.jupyter, the environment's and the system's etc/jupyter) and the course; a hub usually
    sets Exchange.root globally. Every value found is hidden, not only the one that wins.
    """
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import PyFileConfigLoader

    found = [str(root), DEFAULT_EXCHANGE]
    for folder in [*jupyter_config_path(), str(root), os.getcwd()]:
        if not os.path.isfile(os.path.join(folder, "nbgrader_config.py")):
            continue
        try:
            config = PyFileConfigLoader("nbgrader_config.py", path=folder).load_config()
        except Exception:  # noqa: BLE001 - nbgrader itself only warns about a broken config file
            continue
        for section in ("Exchange", "CourseDirectory"):
            value = config.get(section, {}).get("root")
            if isinstance(value, str) and value:
                found.append(os.path.abspath(os.path.expanduser(value)))
    return list(dict.fromkeys(found))


def sandbox_options(work: Path, settings: GradeConfig | None = None, hidden: list[str] = ()) -> dict:
    """How each notebook's sandbox is confined; the uid is added per worker (``execute_task``).

    The sandbox's root is an allow-list (the Python installation, the course packages, the
    system; ``grader.grading.sandbox.isolation``), so the course root, build/, the exchange and any other
    checkout are out of its sight; ``hidden`` (``secret_folders``) covers them even where they
    lie inside an allowed folder.
    ``GradeConfig.isolation`` (auto, user, userns, basic) can only ask for basic explicitly;
    anything else is enforced or the sandbox refuses to start.
    """
    settings = settings or GradeConfig()
    return {"mode": settings.isolation, "scratch": str(work / "sandboxes"),
            "limits": {"cell_seconds": settings.cell_timeout, "notebook_seconds": settings.notebook_timeout},
            "hidden": list(hidden)}


def _init_feedback():
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


def _kill(pool: ProcessPoolExecutor | None) -> None:
    """Stop a pool's workers now (their zygotes and sandboxes die with them)."""
    if pool is None:
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError):
            pass
    for process in processes:
        process.join(5)


_worker_config = None


def _feedback_marker(root: str, assignment: str, pid: int) -> Path:
    """Where a feedback worker says which learner it is working on (read when a worker was killed)."""
    return Path(root) / "build" / "grading" / assignment / "feedback-running" / f"{pid}.json"


def _feedback_task(args, budget: dict | None = None):
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
    marker = _feedback_marker(root, assignment, os.getpid())
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


def _dask_pool(address: str, options: dict, seconds: float, grader: str, pinned: str):
    """(pool, None) once every worker of the Dask scheduler at ``address`` has started a sandbox and runs
    ``grader`` (``grader_version(pinned)`` of this process); (None or the pool, why not) otherwise: then
    nothing executes and nobody is scored."""
    from grader.grading.slots.dask_pool import DaskPool

    try:
        pool = DaskPool(address, connect_seconds=seconds)
        pool.wait_for_workers(1, seconds)
        reports = pool.reports(options, pinned)
    except Exception as error:  # noqa: BLE001 - unreachable scheduler, no workers, a worker that cannot start
        return None, f"the Dask scheduler {address} gave no usable worker ({type(error).__name__}: {str(error)[:300]})"
    broken = {worker: report["problem"] for worker, report in reports.items() if report["problem"]}
    print(f"dask: {len(reports)} workers at {printable(address, 100)}: " + ", ".join(
        f"{report['host']} slot {report['slot']} ({report['isolation']})" for report in reports.values()),
          file=sys.stderr)
    if broken:
        return pool, "Dask workers cannot start a sandbox: " + "; ".join(f"{w}: {p}" for w, p in broken.items())
    other = sorted(worker for worker, report in reports.items() if report.get("grader") != grader)
    if other:
        return pool, (f"Dask workers run another grader, Python or package versions than this coordinator "
                      f"({printable(', '.join(other), 300)}): install the same checkout with the same "
                      f"constraints.txt there")
    return pool, None


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT reached the grading run.

    Not an Exception: every ``except Exception`` that keeps one learner's failure from stopping the
    class (ours, and nbgrader's around each notebook) would take it for that learner's failure and
    grade on; nbgrader cleans up and re-raises a KeyboardInterrupt, as it does for Ctrl-C.
    """


NBGRADER_GLOB_CHARACTERS = "*?["  # in a student id, nbgrader's glob (notebook files) matches other learners
MAX_ATTEMPTS = 2  # a notebook whose worker died is run again once, then scores zero
MAX_FEEDBACK_POOLS = 3  # feedback pools in a row that die before any page comes back: then no more are started


@dataclass(frozen=True)
class Task:
    """One job on its way through the execution pool; ``attempt``: how many times it was submitted."""

    job: Job
    attempt: int = 0

    @property
    def student(self) -> str:
        return self.job.student

    @property
    def notebook(self) -> str:
        return self.job.notebook

    def resubmitted(self) -> "Task":
        return replace(self, attempt=self.attempt + 1)


@dataclass(frozen=True)
class Phases:
    """The nbgrader steps a run calls for each learner (replaceable: tests pass fakes).

    ``run_phase(config, root, assignment, student, phase, submitted_dir, results_dir="", notes=())``:
    nbgrader's "sanitize" or "record" for one learner, raising on failure, returning messages for the learner or
    None (``grader.grading.autograde.nbgrader_steps.run_phase``: the record phase's graded cells that are gone, now
    zero); ``mirror(root, work, assignment, student) -> messages``: the intake of one learner's submission
    (``grader.grading.run.intake.mirror_submission``).
    """

    run_phase: Callable
    mirror: Callable


def _nbgrader_run_phase(*args, **kwargs):
    from grader.grading.autograde.nbgrader_steps import run_phase  # nbgrader's import (about a second) at its first use

    return run_phase(*args, **kwargs)


def nbgrader_phases() -> Phases:
    """The real steps."""
    return Phases(run_phase=_nbgrader_run_phase, mirror=mirror_submission)


class GradingRun:
    """One ``grader grade`` run: sanitise, execute, record and feedback, pipelined per learner.

    The parent (this object) is the only writer of the gradebook, the result cache and
    build/grading/. Workers execute jobs (returning their results as data) and write feedback.
    Nothing a learner submits can make a method here raise: every failure becomes a message
    for that learner and zero for what was not graded.

    ``after``: the finished run of another assignment of the same course and settings, whose pools (and
    checked sandbox) this run takes over; it must not be used again.

    Seams (defaults: the real ones): ``pool_factory(jobs)`` and ``feedback_pool_factory(jobs)``
    return a fresh pool (anything with ``submit(fn, *args) -> Future`` and ``shutdown``), called
    at the first job or feedback and again after a ``BrokenProcessPool``; ``phases`` (``Phases``)
    runs nbgrader's steps. With ``GradeConfig.scheduler`` the execution pool is the Dask cluster.
    """

    def __init__(self, root: Path, assignment: str, settings: GradeConfig, config=None, *,
                 pool_factory: Callable | None = None, feedback_pool_factory: Callable | None = None,
                 phases: Phases | None = None, after: "GradingRun | None" = None):
        self.root, self.assignment, self.settings = root, assignment, settings
        self.jobs = settings.worker_count()
        self.work = root / "build" / "grading" / assignment
        self.started = time.monotonic()
        self.config = config if config is not None else load_config(root)
        self.notebooks = expected_notebooks(root, assignment)
        self.submitted_dir = os.path.relpath(self.work / "submitted", root)
        self.cache = ResultCache(settings.cache_folder(root))
        self.grader = grader_version(settings.grader_version)
        self.options = sandbox_options(self.work, settings, [*secret_folders(root), str(self.cache.folder)])
        self.executed: list[tuple[str, str]] = []  # jobs run in this run (student, notebook)
        self.reused: list[tuple[str, str]] = []  # jobs whose cached result was accepted
        self.refused: list[str] = []  # cached or returned results refused (forged, stale, another job's)
        self.progress = Progress(total=0)
        self.messages: dict[str, list[str]] = {}
        self.left: dict[str, int] = {}  # notebooks still executing, per learner
        self.executing: dict = {}  # future -> Task
        self.broken_at_submit = 0  # pools found broken when a job was sent, since the last result
        self.feedback_pools_lost = 0  # feedback pools that died since the last page came back (MAX_FEEDBACK_POOLS)
        self.feedback: dict = {}  # future -> student
        self.waiting: list[Task] = []  # tasks sanitised before the probe answered
        self.seconds: dict = {}
        self.timings = {"sanitise": 0.0, "record": 0.0}
        self.unfinished: set[str] = set()  # learners whose grade or feedback the grader itself failed to write
        self.pool_factory = pool_factory or self._new_local_pool
        self.feedback_pool_factory = feedback_pool_factory or self._new_feedback_pool
        self.phases = phases or nbgrader_phases()
        self.isolation, self.finished, self.total = None, 0, 0
        # The execution pool (warm sandboxes) starts at the first job without a cached result, so
        # a class graded before costs no zygote; the feedback pool is light (forked, no torch).
        self.pool: ProcessPoolExecutor | None = None
        self.feedback_pool: ProcessPoolExecutor | None = None
        self.probe = None
        self.probe_error: str | None = None
        if after is not None:  # the run of the assignment graded before, by this process: keep its warm pools
            self.pool, self.feedback_pool, self.probe, self.probe_error = (after.pool, after.feedback_pool,
                                                                            after.probe, after.probe_error)
            self.pool_factory, self.feedback_pool_factory = after.pool_factory, after.feedback_pool_factory

    # -- the pools -------------------------------------------------------------------
    def _execution_pool(self):
        """The warm pool; the first call starts it and its probe (the first sandbox, no learner code).

        With ``GradeConfig.scheduler`` it is a Dask cluster's workers instead (``grader.grading.slots.dask_pool``),
        each of which must start a sandbox before any job is sent.
        """
        if self.settings.scheduler:
            if self.pool is None and not self.probe_error:  # asked once: a cluster that failed is not retried
                self.pool, self.probe_error = _dask_pool(self.settings.scheduler, self.options,
                                                        self.settings.scheduler_timeout, self.grader,
                                                        self.settings.grader_version)
        elif self.pool is None:
            self.pool = self.pool_factory(self.jobs)
            self.probe = self.pool.submit(probe, self.options)
        return self.pool

    def _feedback_pool(self):
        if self.feedback_pool is None:
            self.feedback_pool = self.feedback_pool_factory(self.jobs)
        return self.feedback_pool

    def _new_feedback_pool(self, jobs: int) -> ProcessPoolExecutor:
        global _worker_config
        _worker_config = self.config  # inherited by the forked workers: no config file read again
        return ProcessPoolExecutor(max_workers=jobs, initializer=_init_feedback)

    def _submit_feedback(self, student: str) -> None:
        budget = {"notes": list(self.messages.get(student, [])), "seconds": self.settings.submission_seconds,
                  "memory": self.settings.submission_memory, "notebooks": list(self.notebooks)}
        if self.feedback_pools_lost > MAX_FEEDBACK_POOLS:
            self._no_feedback(student)
            return
        try:
            future = self._feedback_pool().submit(_feedback_task, (str(self.root), self.assignment, student), budget)
        except BrokenProcessPool as error:  # the pool died meanwhile: the collecting loop rebuilds it (counted)
            future = Future()
            future.set_exception(error)
        self.feedback[future] = student

    def _no_feedback(self, student: str) -> None:
        self.messages[student].append(f"no feedback could be generated: {MAX_FEEDBACK_POOLS + 1} feedback workers in a "
                                      "row died before writing any page (the grader's environment, not the notebook); "
                                      "the grade is recorded: tell the instructor")
        self.unfinished.add(student)

    def _sweep_feedback(self) -> None:
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

    def _over_budget_workers(self) -> dict[int, str]:
        """pid -> student of each feedback worker that the CPU budget (SIGXCPU) or a kill (the wall-clock
        watchdog, the kernel's OOM killer) ended while it built that learner's page."""
        found = {}
        for pid, process in list((getattr(self.feedback_pool, "_processes", None) or {}).items()):
            if process.exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
                try:
                    marker = _feedback_marker(str(self.root), self.assignment, pid)
                    found[pid] = json.loads(marker.read_text())["student"]
                except (OSError, ValueError, KeyError, TypeError):
                    pass
        return found

    def _feedback_over_budget(self, student: str) -> None:
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

    def _watch_feedback(self) -> None:
        """Kill a feedback worker that has spent three times the budget, plus 30 s, of wall-clock time on one
        learner (its CPU budget kills it sooner; this catches a worker that waits instead)."""
        limit = 3 * self.settings.submission_seconds + 30
        folder = _feedback_marker(str(self.root), self.assignment, 0).parent
        for marker in folder.glob("*.json") if folder.is_dir() else []:
            try:
                started = json.loads(marker.read_text())["started"]
                if time.time() - float(started) > limit:
                    os.kill(int(marker.stem), signal.SIGKILL)
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def _rebuild_feedback_pool(self) -> None:
        """A feedback worker died: a learner whose page killed it (over budget) gets the plain page; every
        other feedback not yet written is asked of a fresh pool."""
        culprits = set(self._over_budget_workers().values())
        _kill(self.feedback_pool)
        self.feedback_pool = None
        self.feedback_pools_lost += 1  # never an endless loop: past MAX_FEEDBACK_POOLS, _submit_feedback gives up
        shutil.rmtree(_feedback_marker(str(self.root), self.assignment, 0).parent, ignore_errors=True)
        for future, student in list(self.feedback.items()):
            if future.done() and not isinstance(future.exception(), BrokenProcessPool):
                continue
            del self.feedback[future]
            if student in culprits:
                self._feedback_over_budget(student)
            else:
                self._submit_feedback(student)

    def _new_local_pool(self, jobs: int) -> ProcessPoolExecutor:
        pool = new_slot_pool(jobs)
        for _ in range(jobs):
            pool.submit(int)  # start every worker (and its zygote) now, overlapping the first sanitising
        return pool

    def _rebuild_pool(self, also: list[Task] = ()) -> None:
        """A worker died (killed, out of memory): every task it held (and ``also``) runs again in a fresh pool."""
        _kill(self.pool)
        self.pool = self.pool_factory(self.jobs)
        lost, self.executing = [*self.executing.values(), *also], {}
        for task in lost:
            self._submit(task)  # counts as an attempt: a notebook that kills its worker twice scores zero

    def kill_pool(self) -> None:
        """Stop every worker now; their zygotes and sandboxes die with them (parent-death signals)."""
        _kill(self.pool)
        _kill(self.feedback_pool)

    def shutdown(self) -> None:
        for pool in (self.pool, self.feedback_pool):
            if pool is not None:
                pool.shutdown(wait=True)

    def _submit(self, task: Task) -> None:
        if task.attempt >= MAX_ATTEMPTS:
            self._done(task.student, task.notebook, None, "its grading process died twice or returned no valid "
                                                          "result; it scores zero: tell the instructor")
            return
        sent = task.resubmitted()
        if self.settings.scheduler:  # a Dask worker may not see this disk: the job travels with its bytes
            from grader.grading.slots.dask_pool import pack, run_packed

            try:
                packed = pack(task.job, self.settings.grader_version)
            except (OSError, ValueError) as error:  # the grader's own disk: this notebook scores zero
                self._done(task.student, task.notebook, None, f"its grading job could not be sent to the cluster "
                                                              f"({type(error).__name__}); it scores zero: "
                                                              f"tell the instructor")
                return
            call, argument = run_packed, packed
        else:
            call, argument = execute_task, task.job.to_json()
        try:
            future = self._execution_pool().submit(call, argument)
        except BrokenProcessPool:
            # A worker died (killed) before this job reached the pool: the job never ran, so it goes to a fresh pool
            # without counting an attempt, unless fresh pools keep breaking before any result comes back.
            self.broken_at_submit += 1
            self._rebuild_pool(also=[task if self.broken_at_submit <= MAX_ATTEMPTS else sent])
            return
        self.executing[future] = sent

    # -- steps -----------------------------------------------------------------------
    def sanitise(self, student: str) -> None:
        phase_started = time.monotonic()
        self.messages[student] = []
        try:
            self.messages[student] += self.phases.mirror(self.root, self.work, self.assignment, student)
            self._sanitise_phase(student)
        except Exception as error:  # noqa: BLE001 - the grader's own failure costs this learner, not the class
            self.messages[student].append(f"the submission could not be prepared for grading ({type(error).__name__}: "
                                          f"{str(error)[:300]}); it scores zero: tell the instructor")
        self.timings["sanitise"] += time.monotonic() - phase_started
        autograded = self.root / "autograded" / student / self.assignment
        ready = [nb for nb in self.notebooks if (autograded / f"{nb}.ipynb").exists()]
        self.left[student] = len(ready)
        files = self.work / "submitted" / student / self.assignment
        for notebook in ready:
            try:
                job = Job.make(self.assignment, student, notebook, autograded / f"{notebook}.ipynb",
                               self.root / "source" / self.assignment / f"{notebook}.ipynb", files, self.options,
                               grader=self.grader)
            except Exception as error:  # noqa: BLE001 - the grader's own failure: this notebook scores zero
                self._done(student, notebook, None,
                           f"its grading job could not be prepared ({type(error).__name__}: {str(error)[:200]}); "
                           "it scores zero: tell the instructor")
                continue
            if self.settings.use_cache:
                cached, problem = self.cache.get(job)
                if cached is not None:
                    self.reused.append((student, notebook))
                    self._accepted(job, cached)
                    continue
                if problem:
                    self.refused.append(f"{student}/{notebook}: cached {problem}")
            task = Task(job)
            self._execution_pool()
            if self.probe is not None or self.probe_error:
                self.waiting.append(task)
            else:
                self._submit(task)
        if not ready:
            self.record(student)

    def _sanitise_phase(self, student: str) -> None:
        run_phase = self.phases.run_phase
        try:
            run_phase(self.config, self.root, self.assignment, student, "sanitize", self.submitted_dir)
        except Exception as error:  # noqa: BLE001 - bad nbgrader metadata, duplicated cells...
            self.messages[student].append(f"nbgrader could not read the submission ({type(error).__name__}: "
                                          f"{str(error)[:300]}); it was graded as blank.")
            for notebook in self.notebooks:
                shutil.copyfile(self.root / "release" / self.assignment / f"{notebook}.ipynb",
                                self.work / "submitted" / student / self.assignment / f"{notebook}.ipynb")
            run_phase(self.config, self.root, self.assignment, student, "sanitize", self.submitted_dir)

    def check_probe(self, block: bool) -> bool:
        """Once the first sandbox has started, release the waiting tasks; False if none can start."""
        if self.probe is None:
            return not (self.probe_error and self.waiting)
        if not block and not self.probe.done():
            return True
        for _ in range(MAX_ATTEMPTS + 1):
            try:
                self.probe_error = self.probe.result().problem
                break
            except BrokenProcessPool as error:  # a worker died (killed?): try again in a fresh pool
                self.probe_error = f"the grading workers keep dying ({error})"
                self._rebuild_pool()
                self.probe = self.pool.submit(probe, self.options)
            except Exception as error:  # noqa: BLE001 - the worker itself could not start
                self.probe_error = f"a grading worker could not start ({type(error).__name__}: {error})"
                break
        self.probe = None
        if self.probe_error:
            return not self.waiting  # cached results are still recorded; nothing new can execute
        waiting, self.waiting = self.waiting, []
        for task in waiting:
            self._submit(task)
        return True

    def collect(self, future) -> None:
        task = self.executing.pop(future, None)
        if task is None:
            return  # a future of a pool that was replaced: its task runs again in the new one
        try:
            text, seconds = future.result()
        except BrokenProcessPool:
            self.executing[future] = task  # put back: the rebuild resubmits every task the pool held
            self._rebuild_pool()
            return
        except Exception as error:  # noqa: BLE001 - the grader's own failure: this notebook scores zero
            self._done(task.student, task.notebook, None, f"grading it failed ({type(error).__name__}: "
                                                          f"{str(error)[:300]}); it scores zero: tell the instructor")
            return
        self.broken_at_submit = 0  # a pool that answers
        result, problem = accept(task.job, text)
        if result is None:  # a worker answered for another job, or garbled: run it again, then zero
            self.refused.append(f"{task.student}/{task.notebook}: returned {problem}")
            self._submit(task)
            return
        self.executed.append((task.student, task.notebook))
        self.seconds[(task.student, task.notebook)] = seconds
        try:
            self.cache.put(task.job, result)
        except OSError as error:  # a cache that cannot be written costs time next run, not this grade
            print(f"the result cache could not be written ({type(error).__name__}): "
                  f"{printable(str(self.cache.folder), 200)}", file=sys.stderr)
        self._accepted(task.job, result)

    def _accepted(self, job: Job, result: dict) -> None:
        """An accepted result: build/grading/results/ for the record phase (grader.grading.autograde.nbgrader_steps)."""
        from grader.grading.feedback.output_budget import bound_outputs
        from grader.grading.run import results

        problem = None
        try:
            result, cut = bound_outputs(result, self.settings.notebook_output_characters)  # what nbgrader copies
            if cut:
                self.messages[job.student].append(f"{job.notebook}: {cut}")
            results.write(self.work / "results" / job.student / f"{job.notebook}.json", result)
        except (OSError, ValueError) as error:  # the grader's own disk: this notebook scores zero
            result, problem = None, (f"its result could not be stored ({type(error).__name__}: {str(error)[:200]}); "
                                     "it scores zero: tell the instructor")
        self._done(job.student, job.notebook, result, problem)

    def _done(self, student: str, notebook: str, result: dict | None, problem: str | None) -> None:
        """One notebook is finished (``result``: its accepted result, or None: it scores zero, ``problem``
        says why); the learner's last one triggers the record phase."""
        self.finished += 1
        if result is not None:
            self.isolation = result.get("isolation") or self.isolation
            self.messages[student] += [f"{notebook}: {note}" for note in result["notes"]]
        if problem:
            self.messages[student].append(f"{notebook}: {problem}")
        self.progress.update(student, notebook)
        self.left[student] -= 1
        if self.left[student] == 0:
            self.record(student)

    def record(self, student: str) -> None:
        phase_started = time.monotonic()
        try:
            told = self.phases.run_phase(self.config, self.root, self.assignment, student, "record",
                                         self.submitted_dir, str(self.work / "results"), notes=self.messages[student])
            self.messages[student] += list(told or [])  # graded cells gone since an earlier grading, now zero
        except Exception as error:  # noqa: BLE001 - one learner's failure is recorded, the class goes on
            self.messages[student].append(f"recording the grade failed: {type(error).__name__}: {str(error)[:300]}")
            self.unfinished.add(student)
        self.timings["record"] += time.monotonic() - phase_started
        self.write_messages()
        self._submit_feedback(student)

    def write_summary(self) -> None:
        """run.json: which jobs were executed and which came from the cache (for tests and the bench)."""
        summary = {"executed": sorted(map(list, self.executed)), "cached": sorted(map(list, self.reused)),
                   "refused": self.refused, "cache": str(self.cache.folder)}
        (self.work / "run.json").write_text(json.dumps(summary, indent=1, ensure_ascii=True))

    def write_messages(self) -> None:
        """messages.json, rewritten whole after every learner: it exists before anything else can fail."""
        temporary = self.work / "messages.json.tmp"
        temporary.write_text(json.dumps(self.messages, indent=1, ensure_ascii=True))
        temporary.replace(self.work / "messages.json")

    # -- the run ----------------------------------------------------------------------
    def run(self, students: list[str]) -> str | None:
        """Grade every learner; returns None, or why no sandbox could start (nothing was executed)."""
        patterns = [s for s in students if any(c in s for c in NBGRADER_GLOB_CHARACTERS)]
        for student in patterns:  # nbgrader would process every classmate's files under this learner's id
            self.messages[student] = ["this folder's name contains *, ? or [, which nbgrader reads as a pattern "
                                      "matching other learners' folders: it was not graded. Rename the folder "
                                      "(e.g. in submitted/) and run the same command again."]
            self.unfinished.add(student)
        students = [s for s in students if s not in patterns]
        self.total = len(students) * len(self.notebooks)
        self._sweep_feedback()
        self.progress.start(self.total)
        self.write_messages()
        if never_graded(self.root, self.assignment, students):
            self._execution_pool()  # a learner never graded will execute: warm the sandboxes while nbgrader loads
        for student in students:
            self.sanitise(student)
            if not self.check_probe(block=False):
                return self.probe_error
            for future in [f for f in self.executing if f.done()]:
                self.collect(future)
        if (self.waiting or self.executing) and not self.check_probe(block=True):
            return self.probe_error  # a class whose every result is cached needs no sandbox
        while self.executing:
            done, _ = wait(list(self.executing), return_when=FIRST_COMPLETED)
            for future in done:
                self.collect(future)
        self.progress.close()
        self.timings["all executed at"] = time.monotonic() - self.started
        while self.feedback:
            done, _ = wait(list(self.feedback), timeout=5, return_when=FIRST_COMPLETED)
            if not done:
                self._watch_feedback()
                continue
            future = next(iter(done))
            note = None
            try:
                student, problem, *noted = future.result()
                note = noted[0] if noted else None
                self.feedback_pools_lost = 0  # a pool that answers
            except BrokenProcessPool:
                self._rebuild_feedback_pool()
                continue
            except Exception as error:  # noqa: BLE001 - one learner's failure is recorded, the class goes on
                student, problem = self.feedback[future], f"no feedback could be generated ({type(error).__name__})"
            del self.feedback[future]
            if note:
                self.messages[student].append(note)
            if problem:
                self.messages[student].append(problem)
                self.unfinished.add(student)
        self.write_messages()
        self.timings["feedback done at"] = time.monotonic() - self.started
        return None


def exposure_warning(root: Path) -> str | None:
    """A warning when other users of the machine can enter the course directory.

    On a shared server that lets students read source/ (the hidden tests), everyone's
    submissions and the gradebook, and nbgrader collect leaves submitted/ folders 0777.
    """
    if any(not folder.stat().st_mode & stat.S_IXOTH for folder in (root, *root.parents)):
        return None  # a folder on the way (a private home) keeps everyone else out
    mode = root.stat().st_mode
    return (f"warning: other users of this machine can enter the course directory {printable(str(root), 200)} "
            f"(mode {stat.S_IMODE(mode):o}): on a shared server students could read source/, submitted/ and the "
            "gradebook. `chmod 700` it (docs/instructors.md).")


def _class_of(root: Path, assignment: str) -> list[str] | None:
    """The learners who submitted ``assignment``, or None if nobody did."""
    students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}") if p.is_dir())
    if not students:
        print(f"no submissions found under {root / 'submitted'}/*/{assignment}", file=sys.stderr)
        return None
    return students


def _prepare(root: Path, assignment: str, config) -> None:
    """Build what grading ``assignment`` needs if it is missing (its source notebook, release/, the gradebook's
    record of it); a fresh work folder."""
    from grader.grading.autograde.nbgrader_steps import gradebook_has_assignment

    built = (root / "source" / assignment / f"{assignment}.ipynb").exists() and (root / "release" / assignment).exists()
    if not built or not gradebook_has_assignment(config, root, assignment):
        from grader.course.build import build

        if built:  # a new or replaced gradebook: nbgrader could not sanitise or record anyone
            print(f"{assignment} is not in the gradebook: building it (nbgrader generate_assignment records it) "
                  "before grading", file=sys.stderr)
        build(root, [assignment])
    work = root / "build" / "grading" / assignment
    shutil.rmtree(work, ignore_errors=True)
    (work / "sandboxes").mkdir(parents=True)
    os.chmod(work / "sandboxes", 0o711)  # sandbox uids reach their own folder, list nothing


def grade(assignment: str | list[str], root: Path | None = None, csv_path: Path | None = None,
          jobs: int | None = None, cell_seconds: float | None = None, notebook_seconds: float | None = None,
          argv: list[str] = (), wait: bool = False, **settings) -> int:
    """Grade every submission of ``assignment`` (an id, or several graded one after another by the same warm
    workers); returns an exit code (0 even if submissions fail).

    One run per course at a time (``grader.grading.run.course_lock``, held from the first step to the CSV): another
    run that holds the course's lock makes this one refuse (exit code 4, the other run named on stderr), or,
    with ``wait``, wait for it.

    Settings (``grader.grading.config.GradeConfig``): its defaults, then the course's nbgrader_config.py,
    then ``argv`` (``--GradeConfig.x=...``), then the keywords given (``jobs``, ``cell_seconds``,
    ``notebook_seconds`` and any other trait by name; None means not given).

    Exit code 1: an assignment had no submissions (the others are graded); 2: no sandbox could start
    (nothing executed, nobody scored); 3: the grader itself failed to write some learners' grade or
    feedback (named on stderr); 4: another run holds the course (nothing was done); 130: interrupted (the
    gradebook holds every learner recorded so far; running again completes the class).
    """
    from grader.grading.run.course_lock import EXIT_LOCKED, CourseLocked, course_lock

    root = Path(root or course_root()).resolve()
    try:
        with course_lock(root, "grade", wait=wait):
            return _grade(assignment, root, csv_path, jobs, cell_seconds, notebook_seconds, argv, settings)
    except CourseLocked as refused:
        print(f"nothing was graded: {refused}", file=sys.stderr)
        return EXIT_LOCKED


def _grade(assignment, root: Path, csv_path, jobs, cell_seconds, notebook_seconds, argv, settings) -> int:
    """``grade``'s work, with the course's lock held."""
    assignments = [assignment] if isinstance(assignment, str) else list(dict.fromkeys(assignment))
    # nbgrader's own add_submission trips this SQLAlchemy warning on every new learner; it is noise.
    warnings.filterwarnings("ignore", message="Object of type <Submitted")
    config = load_config(root)
    options = grade_config(root, {"jobs": jobs, "cell_timeout": cell_seconds, "notebook_timeout": notebook_seconds,
                                  **settings}, argv, base=config)
    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's gradebook runs `alembic` by name
    csv_path = Path(csv_path or root / "build" / "grades.csv")
    exposure = exposure_warning(root)
    if exposure:
        print(exposure, file=sys.stderr)
    classes = {a: _class_of(root, a) for a in assignments}
    if not any(classes.values()):
        return 1
    try:
        check_level(options.isolation)  # a typo: say so now, not after a sandbox failed to start
    except IsolationError as error:
        _print_nothing_scored(str(error), [a for a, students in classes.items() if students], [])
        return 2
    from grader.grading import seams

    refused = seams.start(options.public_apis_only)  # every library's seam checked before anything executes
    if refused:
        _print_nothing_scored(refused, [a for a, students in classes.items() if students], [])
        return 2
    for name, students in classes.items():
        if students:
            _prepare(root, name, config)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def interrupt(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    run, runs, problem = None, [], None
    try:
        for sig in previous:
            signal.signal(sig, interrupt)
        for name, students in classes.items():
            if not students:
                continue
            # the next assignment keeps the warm workers (and their checked sandbox) of the one before
            run = GradingRun(root, name, options, config, after=run)
            runs.append(run)
            problem = run.run(students)
            run.timings["total"] = time.monotonic() - run.started  # this assignment's part, before the CSV export
            if problem:
                break
    except Interrupted as signal_name:
        if run is not None:
            run.kill_pool()
        print(f"\ninterrupted by {signal_name}: every process of this run was stopped; learners recorded so far keep "
              "their grades, and running the same command again grades the whole class.", file=sys.stderr)
        return 130
    except BaseException:
        if run is not None:
            run.kill_pool()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if problem:
        run.kill_pool()
        done = [r.assignment for r in runs[:-1]]
        _print_nothing_scored(problem, [a for a, students in classes.items() if students and a not in done], done)
        if done:  # their grades are in the gradebook: the CSV holds them too
            export_csv(root, csv_path)
        return 2
    run.shutdown()
    problem = export_csv(root, csv_path)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    unfinished = False
    for run in runs:
        report_run(run, csv_path)
        unfinished = unfinished or bool(run.unfinished)
    if unfinished:
        return 3
    return 0 if all(classes.values()) else 1


def _print_nothing_scored(problem: str, left: list[str], done: list[str]) -> None:
    graded = f" ({', '.join(done)} graded before it)" if done else ""
    print(f"grading stopped before any notebook ran: no sandbox could start ({printable(problem, 500)}).\n"
          f"Nothing was scored of {', '.join(left)}{graded}. Check GradeConfig.isolation (--isolation, "
          "LNCOURSE_ISOLATION) and the isolation levels in docs/instructors.md.", file=sys.stderr)


def export_csv(root: Path, csv_path: Path) -> str | None:
    """The whole gradebook in nbgrader's CSV columns (``nbgrader export``'s), quoted by the csv module: nbgrader's
    own export joins fields with bare commas, so a learner id with a comma or a quote shifted the columns after it
    and broke the score table. None, or why it failed."""
    from nbgrader.api import Gradebook

    from grader.grading.export.gradebook import GradebookError, db_url, read_class
    from grader.grading.export.nbgrader_csv import write_csv
    from grader.grading.export.roster import reconcile

    try:
        url = db_url(root)
        with Gradebook(url) as gradebook:
            assignments = sorted(a.name for a in gradebook.assignments)
        grades = read_class(root, assignments, url)
        text = write_csv(grades, reconcile(None, grades).learners, missing="zero")
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = csv_path.with_name(f".{csv_path.name}.{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8", newline="")
        temporary.replace(csv_path)
    except (GradebookError, OSError, ValueError) as error:
        return f"the grades CSV could not be written ({type(error).__name__}: {str(error)[:300]})"
    return None


def report_run(run: GradingRun, csv_path: Path) -> None:
    """What one assignment's run did (isolation, jobs, timings), its scores, and who it could not finish."""
    mode = (run.isolation or {}).get("mode", "unknown")
    per_notebook = sorted(run.seconds.values())
    median = per_notebook[len(per_notebook) // 2] if per_notebook else 0.0
    print(f"isolation: {mode}; {run.assignment}: {len(run.executed)} notebooks executed, {len(run.reused)} from "
          f"cache, with {run.jobs} jobs; median {median:.1f}s per notebook; "
          + ", ".join(f"{name} {value:.1f}s" for name, value in run.timings.items()))
    for line in run.refused[:20]:
        print(f"refused a result and ran the job again: {printable(line, 300)}", file=sys.stderr)
    run.write_summary()
    print_scores(csv_path, run.assignment, run.messages)
    if run.unfinished:
        names = ", ".join(printable(s, 60) for s in sorted(run.unfinished)[:20])
        print(f"the grader could not finish {len(run.unfinished)} learner(s) of {run.assignment} ({names}): no grade "
              "or no feedback was written for them; see their notes above, fix the cause and run the same command "
              "again.", file=sys.stderr)


def print_scores(csv_path: Path, assignment: str, messages: dict[str, list[str]]) -> None:
    """The score table; every learner-controlled string passes through ``printable`` first."""
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["assignment"] == assignment]
    names = {r["student_id"]: printable(r["student_id"], 60) for r in rows}
    width = max([len("student")] + [len(n) for n in names.values()])
    print(f"{'student':<{width}}  score / max   notes")
    for r in sorted(rows, key=lambda r: r["student_id"]):
        notes = printable("; ".join(messages.get(r["student_id"], [])), 200)
        print(f"{names[r['student_id']]:<{width}}  {float(r['raw_score']):5.1f} / {float(r['max_score']):<5.1f} "
              f"{notes}")
    print(f"scores written to {csv_path}; messages in build/grading/{assignment}/messages.json")
