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

import os
import signal
import sys
import time
import warnings
from pathlib import Path

from grader.course import course_root, tool_environment
from grader.grading.config import GradeConfig, grade_config
from grader.grading.run.course_setup import class_of, exposure_warning, load_config, prepare
from grader.grading.run.grading_run import GradingRun
from grader.grading.run.summary import export_csv, print_nothing_scored, report_run
from grader.grading.sandbox.levels import IsolationError, check_level


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT reached the grading run.

    Not an Exception: every ``except Exception`` that keeps one learner's failure from stopping the
    class (ours, and nbgrader's around each notebook) would take it for that learner's failure and
    grade on; nbgrader cleans up and re-raises a KeyboardInterrupt, as it does for Ctrl-C.
    """


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
    classes = {a: class_of(root, a) for a in assignments}
    if not any(classes.values()):
        return 1
    refused = _refused_before_running(options)
    if refused:
        print_nothing_scored(refused, [a for a, students in classes.items() if students], [])
        return 2
    for name, students in classes.items():
        if students:
            prepare(root, name, config)
    ran = _run_assignments(root, classes, options, config)
    if ran is None:
        return 130
    return _finish(root, csv_path, classes, *ran)


def _refused_before_running(options: GradeConfig) -> str | None:
    """Why nothing may execute (an unknown isolation level, a library seam that fails its check), or None."""
    try:
        check_level(options.isolation)  # a typo: say so now, not after a sandbox failed to start
    except IsolationError as error:
        return str(error)
    from grader.grading import seams

    return seams.start(options.public_apis_only)  # every library's seam checked before anything executes


def _run_assignments(root: Path, classes: dict, options: GradeConfig, config) -> tuple[list, str | None] | None:
    """Each assignment's run in turn, by the same warm workers: (runs, why the last one stopped or None), or None
    when SIGTERM or SIGINT stopped them (every process of the run is stopped first)."""
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
        return None
    except BaseException:
        if run is not None:
            run.kill_pool()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return runs, problem


def _finish(root: Path, csv_path: Path, classes: dict, runs: list, problem: str | None) -> int:
    """The CSV, each run's summary and scores; the exit code ``grade`` documents."""
    run = runs[-1]
    if problem:
        run.kill_pool()
        done = [r.assignment for r in runs[:-1]]
        print_nothing_scored(problem, [a for a, students in classes.items() if students and a not in done], done)
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
