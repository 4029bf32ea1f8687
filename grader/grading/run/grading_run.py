"""One assignment's grading run (``GradingRun``): every learner sanitised, executed, recorded and given feedback,
pipelined per learner, with the pools that execute their notebooks. ``grader.grading.run.pipeline`` says the steps
and drives one run per assignment."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from grader.grading.config import GradeConfig
from grader.grading.run.course_setup import load_config, sandbox_options, secret_folders
from grader.grading.run.feedback_work import FeedbackWork
from grader.grading.run.intake import expected_notebooks, mirror_submission
from grader.grading.run.jobs import Job, ResultCache, accept, grader_version
from grader.grading.run.terminal import Progress, printable
from grader.grading.slots.execution_slot import execute_task, probe
from grader.grading.slots.slot_pool import kill_now, new_slot_pool
from grader.grading.startup import never_graded


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


NBGRADER_GLOB_CHARACTERS = "*?["  # in a student id, nbgrader's glob (notebook files) matches other learners
MAX_ATTEMPTS = 2  # a notebook whose worker died is run again once, then scores zero


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


def _pool_call(job: Job, settings: GradeConfig) -> tuple[Callable, object]:
    """(function, argument) that executes ``job`` in the pool: a Dask worker may not see this disk, so there the
    job travels with its bytes (``dask_pool.pack``; OSError or ValueError when they cannot be read)."""
    if not settings.scheduler:
        return execute_task, job.to_json()
    from grader.grading.slots.dask_pool import pack, run_packed

    return run_packed, pack(job, settings.grader_version)


def _new_local_pool(jobs: int) -> ProcessPoolExecutor:
    """The local execution pool, every worker (and its zygote) started now, overlapping the first sanitising."""
    pool = new_slot_pool(jobs)
    for _ in range(jobs):
        pool.submit(int)
    return pool


def _without_glob_ids(students: list[str], messages: dict[str, list[str]], unfinished: set[str]) -> list[str]:
    """The learners nbgrader can grade: an id holding *, ? or [ is told why not, and left out."""
    patterns = [s for s in students if any(c in s for c in NBGRADER_GLOB_CHARACTERS)]
    for student in patterns:  # nbgrader would process every classmate's files under this learner's id
        messages[student] = ["this folder's name contains *, ? or [, which nbgrader reads as a pattern matching other "
                             "learners' folders: it was not graded. Rename the folder (e.g. in submitted/) and run "
                             "the same command again."]
        unfinished.add(student)
    return [s for s in students if s not in patterns]


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
        self.waiting: list[Task] = []  # tasks sanitised before the probe answered
        self.seconds: dict = {}
        self.timings = {"sanitise": 0.0, "record": 0.0}
        self.unfinished: set[str] = set()  # learners whose grade or feedback the grader itself failed to write
        self.pool_factory = pool_factory or _new_local_pool
        self.phases = phases or nbgrader_phases()
        self.isolation, self.finished, self.total = None, 0, 0
        self.feedback = FeedbackWork(root, assignment, settings, self.config, self.notebooks, self.messages,
                                     self.unfinished, self.jobs, feedback_pool_factory)
        # The execution pool (warm sandboxes) starts at the first job without a cached result, so
        # a class graded before costs no zygote.
        self.pool: ProcessPoolExecutor | None = None
        self.probe = None
        self.probe_error: str | None = None
        if after is not None:  # the run of the assignment graded before, by this process: keep its warm pools
            self.pool, self.probe, self.probe_error = after.pool, after.probe, after.probe_error
            self.pool_factory = after.pool_factory
            self.feedback.pool, self.feedback.pool_factory = after.feedback.pool, after.feedback.pool_factory

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

    def _rebuild_pool(self, also: list[Task] = ()) -> None:
        """A worker died (killed, out of memory): every task it held (and ``also``) runs again in a fresh pool."""
        kill_now(self.pool)
        self.pool = self.pool_factory(self.jobs)
        lost, self.executing = [*self.executing.values(), *also], {}
        for task in lost:
            self._submit(task)  # counts as an attempt: a notebook that kills its worker twice scores zero

    def kill_pool(self) -> None:
        """Stop every worker now; their zygotes and sandboxes die with them (parent-death signals)."""
        kill_now(self.pool)
        kill_now(self.feedback.pool)

    def shutdown(self) -> None:
        for pool in (self.pool, self.feedback.pool):
            if pool is not None:
                pool.shutdown(wait=True)

    def _submit(self, task: Task) -> None:
        if task.attempt >= MAX_ATTEMPTS:
            self._done(task.student, task.notebook, None, "its grading process died twice or returned no valid "
                                                          "result; it scores zero: tell the instructor")
            return
        sent = task.resubmitted()
        try:
            call, argument = _pool_call(task.job, self.settings)
        except (OSError, ValueError) as error:  # the grader's own disk: this notebook scores zero
            self._done(task.student, task.notebook, None, f"its grading job could not be sent to its worker "
                                                          f"({type(error).__name__}); it scores zero: "
                                                          "tell the instructor")
            return
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
        self.feedback.submit(student)

    def write_messages(self) -> None:
        """messages.json, rewritten whole after every learner: it exists before anything else can fail."""
        temporary = self.work / "messages.json.tmp"
        temporary.write_text(json.dumps(self.messages, indent=1, ensure_ascii=True))
        temporary.replace(self.work / "messages.json")

    # -- the run ----------------------------------------------------------------------
    def run(self, students: list[str]) -> str | None:
        """Grade every learner; returns None, or why no sandbox could start (nothing was executed)."""
        students = _without_glob_ids(students, self.messages, self.unfinished)
        self.total = len(students) * len(self.notebooks)
        self.feedback.sweep()
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
        self.feedback.drain()
        self.write_messages()
        self.timings["feedback done at"] = time.monotonic() - self.started
        return None
