"""``python -m grader grade ASSIGNMENT``: grade a whole class safely and in parallel.

1. intake   Copy submitted/*/ASSIGNMENT into build/grading/ (submitted/ is never written):
            any bytes become a repaired notebook or the blank release plus a message
            (grader.intake); the learner's other files follow, vetted.
2. sanitise nbgrader restores locked and test cells from the gradebook (per learner: one
            broken submission cannot stop the others).
3. execute  In parallel (--jobs), each notebook runs in its own sandbox; test cells run in
            the trusted grader with the learner's functions as proxies (grader.execute).
4. record   nbgrader saves the scores in the gradebook (this process is its only writer),
            from validated results only (grader.results: fail closed); a worker writes the
            learner's feedback (hidden tests removed, grading notes on top); a CSV follows.

Steps 2-4 are pipelined per learner, so the serial nbgrader steps overlap the execution.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import stat
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from grader.build import course_root, tool_environment
from grader.intake import expected_notebooks, mirror_submission
from grader.terminal import printable

SANDBOX_UID_BASE = 61000  # one unprivileged uid per parallel slot when grading as root


def load_config(root: Path):
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


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


def sandbox_options(work: Path, cell_seconds: float = 120.0, hidden: list[str] = ()) -> dict:
    """How each notebook's sandbox is confined; the uid is added per worker (``_execute_task``).

    The sandbox's root is an allow-list (the Python installation, the course packages, the
    system; ``grader.sandbox.isolation``), so the course root, build/, the exchange and any other
    checkout are out of its sight; ``hidden`` (``secret_folders``) covers them even where they
    lie inside an allowed folder.
    ``LNCOURSE_ISOLATION`` (auto, user, userns, basic) can only ask for basic explicitly;
    anything else is enforced or the sandbox refuses to start.
    """
    return {"mode": os.environ.get("LNCOURSE_ISOLATION", "auto"), "scratch": str(work / "sandboxes"),
            "limits": {"cell_seconds": cell_seconds}, "hidden": list(hidden)}


_slot = None


def _init_slot(counter):
    """Number this worker (its sandbox uid) and warm it: its zygote imports everything once."""
    global _slot
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler is for the parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
    with counter.get_lock():
        _slot = counter.value
        counter.value += 1
    import grader.execute  # noqa: F401
    from grader import oracles
    from grader.sandbox.client import default_zygote

    oracles._torch()
    default_zygote()


def _sandbox_uid() -> int:
    return SANDBOX_UID_BASE + (_slot or 0)  # one uid per parallel slot


def _probe(options: dict) -> str | None:
    """Start one sandbox with the class's options: None if it works, else why not (no learner code runs)."""
    from grader.sandbox import client

    problem = None
    for _ in range(2):  # a zygote that died under us gets one fresh start
        try:
            limits = client.Limits(**options.get("limits", {}))
            with client.Sandbox(**{k: v for k, v in options.items() if k != "limits"}, uid=_sandbox_uid(),
                                limits=limits) as box:
                if box.run_cell("1 + 1")["error"]:
                    return "a sandbox started but could not run a cell"
            return None
        except client.SandboxError as error:
            problem = str(error)
            client._default_zygote = None
    return problem


def nbgrader_app(root: Path, app_class, argv: list[str]) -> str | None:
    """Run an nbgrader app in this process, in the course root; returns an error message or None."""
    previous = os.getcwd()
    os.chdir(root)
    try:
        app = app_class()
        app.initialize([*argv, "--log-level=ERROR"])
        app.start()
    except SystemExit as exit_:
        return None if not exit_.code else f"nbgrader {app_class.__name__} failed (exit {exit_.code})"
    except Exception as error:  # noqa: BLE001
        return f"nbgrader {app_class.__name__} failed: {error}"
    finally:
        os.chdir(previous)
    return None


def _execute_task(task: dict) -> dict:
    """Execute one learner notebook (in a pool worker) and write its result; returns a summary."""
    from grader import results
    from grader.execute import execute_submission
    from grader.sandbox import client

    root, work = Path(task["root"]), Path(task["work"])
    who = {"assignment": task["assignment"], "student": task["student"], "notebook": task["notebook"]}
    options = {**task["options"], "uid": _sandbox_uid(), "files": task["files"]}
    started = time.monotonic()
    for attempt in range(2):
        result = execute_submission(str(root / "autograded" / task["student"] / task["assignment"]
                                        / f"{task['notebook']}.ipynb"),
                                    str(root / "source" / task["assignment"] / f"{task['notebook']}.ipynb"),
                                    options, who=who)
        if (result["isolation"] is not None and not result.get("retry")) or attempt:
            break
        client._default_zygote = None  # no sandbox started, or its zygote died: once more with a fresh one
    results.write(work / "results" / task["student"] / f"{task['notebook']}.json", result)
    return {"seconds": time.monotonic() - started, "notes": result["notes"], "isolation": result["isolation"]}


_worker_config = None


def _feedback_task(args):
    """One learner's feedback, in a (trusted) worker: nbgrader's HTML export is the slow part."""
    global _worker_config
    from grader.nbgrader_steps import generate_feedback

    root, assignment, student = args
    _worker_config = _worker_config or load_config(Path(root))  # once per worker
    try:
        generate_feedback(_worker_config, Path(root), assignment, student)
    except BaseException as error:  # noqa: BLE001 - nbgrader exits or raises on a broken notebook
        return student, f"no feedback could be generated ({type(error).__name__}: {str(error)[:200]})"
    return student, None


def progress(done: int, total: int, started: float) -> None:
    elapsed = time.monotonic() - started
    eta = elapsed / done * (total - done) if done else 0
    bar = "#" * int(30 * done / total) + "-" * (30 - int(30 * done / total))
    print(f"\r[{bar}] {done}/{total}  elapsed {elapsed:5.1f}s  eta {eta:5.1f}s", end="", file=sys.stderr, flush=True)


class Interrupted(Exception):
    """SIGTERM or SIGINT reached the grading run."""


MAX_ATTEMPTS = 2  # a notebook whose worker died is run again once, then scores zero


class GradingRun:
    """One ``grader grade`` run: sanitise, execute, record and feedback, pipelined per learner.

    The parent (this object) is the gradebook's only writer. Workers execute notebooks and
    write feedback. Nothing a learner submits can make a method here raise: every failure
    becomes a message for that learner and zero for what was not graded.
    """

    def __init__(self, root: Path, assignment: str, jobs: int, cell_seconds: float, notebook_seconds: float | None):
        import multiprocessing

        self.root, self.assignment, self.jobs = root, assignment, jobs
        self.work = root / "build" / "grading" / assignment
        self.started = time.monotonic()
        self.config = load_config(root)
        self.notebooks = expected_notebooks(root, assignment)
        self.submitted_dir = os.path.relpath(self.work / "submitted", root)
        self.options = sandbox_options(self.work, cell_seconds, secret_folders(root))
        if notebook_seconds:
            self.options["limits"]["notebook_seconds"] = notebook_seconds
        self.messages: dict[str, list[str]] = {}
        self.left: dict[str, int] = {}  # notebooks still executing, per learner
        self.executing: dict = {}  # future -> task
        self.feedback: dict = {}  # future -> student
        self.waiting: list[dict] = []  # tasks sanitised before the probe answered
        self.seconds: dict = {}
        self.timings = {"sanitise": 0.0, "record": 0.0}
        self.unfinished: set[str] = set()  # learners whose grade or feedback the grader itself failed to write
        self.isolation, self.finished, self.total = None, 0, 0
        self.counter = multiprocessing.Value("i", 0)
        self.pool = self._new_pool()
        self.probe = self.pool.submit(_probe, self.options)
        self.probe_error: str | None = None

    # -- the pool --------------------------------------------------------------------
    def _new_pool(self) -> ProcessPoolExecutor:
        with self.counter.get_lock():
            self.counter.value = 0
        pool = ProcessPoolExecutor(max_workers=self.jobs, initializer=_init_slot, initargs=(self.counter,))
        for _ in range(self.jobs):
            pool.submit(int)  # start every worker (and its zygote) now, overlapping the first sanitising
        return pool

    def _rebuild_pool(self) -> None:
        """A worker died (killed, out of memory): every task it held runs again in a fresh pool."""
        self.kill_pool()
        self.pool = self._new_pool()
        lost, self.executing = list(self.executing.values()), {}
        for task in lost:
            self._submit(task)
        for future, student in list(self.feedback.items()):
            if future.done() and not isinstance(future.exception(), BrokenProcessPool):
                continue
            del self.feedback[future]
            self.feedback[self.pool.submit(_feedback_task, (str(self.root), self.assignment, student))] = student

    def kill_pool(self) -> None:
        """Stop every worker now; their zygotes and sandboxes die with them (parent-death signals)."""
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            try:
                process.kill()
            except (OSError, ValueError):
                pass
        for process in processes:
            process.join(5)

    def _submit(self, task: dict) -> None:
        if task["attempt"] >= MAX_ATTEMPTS:
            self._done(task, None, "its grading process died twice; it scores zero: tell the instructor")
            return
        task = {**task, "attempt": task["attempt"] + 1}
        self.executing[self.pool.submit(_execute_task, task)] = task

    # -- steps -----------------------------------------------------------------------
    def sanitise(self, student: str) -> None:
        phase_started = time.monotonic()
        self.messages[student] = []
        try:
            self.messages[student] += mirror_submission(self.root, self.work, self.assignment, student)
            self._sanitise_phase(student)
        except Exception as error:  # noqa: BLE001 - the grader's own failure costs this learner, not the class
            self.messages[student].append(f"the submission could not be prepared for grading ({type(error).__name__}: "
                                          f"{str(error)[:300]}); it scores zero: tell the instructor")
        self.timings["sanitise"] += time.monotonic() - phase_started
        autograded = self.root / "autograded" / student / self.assignment
        ready = [nb for nb in self.notebooks if (autograded / f"{nb}.ipynb").exists()]
        self.left[student] = len(ready)
        files = str(self.work / "submitted" / student / self.assignment)
        for notebook in ready:
            task = {"root": str(self.root), "work": str(self.work), "assignment": self.assignment, "student": student,
                    "notebook": notebook, "options": self.options, "files": files, "attempt": 0}
            if self.probe is not None:
                self.waiting.append(task)
            else:
                self._submit(task)
        if not ready:
            self.record(student)

    def _sanitise_phase(self, student: str) -> None:
        from grader.nbgrader_steps import run_phase

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
            return True
        if not block and not self.probe.done():
            return True
        for attempt in range(MAX_ATTEMPTS + 1):
            try:
                self.probe_error = self.probe.result()
                break
            except BrokenProcessPool as error:  # a worker died (killed?): try again in a fresh pool
                self.probe_error = f"the grading workers keep dying ({error})"
                self._rebuild_pool()
                self.probe = self.pool.submit(_probe, self.options)
            except Exception as error:  # noqa: BLE001 - the worker itself could not start
                self.probe_error = f"a grading worker could not start ({type(error).__name__}: {error})"
                break
        self.probe = None
        if self.probe_error:
            return False
        waiting, self.waiting = self.waiting, []
        for task in waiting:
            self._submit(task)
        return True

    def collect(self, future) -> None:
        task = self.executing.pop(future, None)
        if task is None:
            return  # a future of a pool that was replaced: its task runs again in the new one
        try:
            summary = future.result()
        except BrokenProcessPool:
            self.executing[future] = task  # put back: the rebuild resubmits every task the pool held
            self._rebuild_pool()
            return
        except Exception as error:  # noqa: BLE001 - the grader's own failure: this notebook scores zero
            self._done(task, None, f"grading it failed ({type(error).__name__}: {str(error)[:300]}); "
                                   "it scores zero: tell the instructor")
            return
        self._done(task, summary, None)

    def _done(self, task: dict, summary: dict | None, problem: str | None) -> None:
        student, notebook = task["student"], task["notebook"]
        self.finished += 1
        if summary is not None:
            self.seconds[(student, notebook)] = summary["seconds"]
            self.isolation = summary["isolation"] or self.isolation
            self.messages[student] += [f"{notebook}: {note}" for note in summary["notes"]]
        if problem:
            self.messages[student].append(f"{notebook}: {problem}")
        progress(self.finished, self.total, self.started)
        self.left[student] -= 1
        if self.left[student] == 0:
            self.record(student)

    def record(self, student: str) -> None:
        from grader.nbgrader_steps import run_phase

        phase_started = time.monotonic()
        try:
            run_phase(self.config, self.root, self.assignment, student, "record", self.submitted_dir,
                      str(self.work / "results"), notes=self.messages[student])
        except Exception as error:  # noqa: BLE001
            self.messages[student].append(f"recording the grade failed: {type(error).__name__}: {str(error)[:300]}")
            self.unfinished.add(student)
        self.timings["record"] += time.monotonic() - phase_started
        self.write_messages()
        future = self.pool.submit(_feedback_task, (str(self.root), self.assignment, student))
        self.feedback[future] = student

    def write_messages(self) -> None:
        """messages.json, rewritten whole after every learner: it exists before anything else can fail."""
        temporary = self.work / "messages.json.tmp"
        temporary.write_text(json.dumps(self.messages, indent=1, ensure_ascii=True))
        temporary.replace(self.work / "messages.json")

    # -- the run ----------------------------------------------------------------------
    def run(self, students: list[str]) -> str | None:
        """Grade every learner; returns None, or why no sandbox could start (nothing was executed)."""
        self.total = len(students) * len(self.notebooks)
        self.write_messages()
        for student in students:
            self.sanitise(student)
            if not self.check_probe(block=False):
                return self.probe_error
            for future in [f for f in self.executing if f.done()]:
                self.collect(future)
        if not self.check_probe(block=True):
            return self.probe_error
        while self.executing:
            done, _ = wait(list(self.executing), return_when=FIRST_COMPLETED)
            for future in done:
                self.collect(future)
        print(file=sys.stderr)
        self.timings["all executed at"] = time.monotonic() - self.started
        while self.feedback:
            future = next(iter(self.feedback))
            try:
                student, problem = future.result()
            except BrokenProcessPool:
                self._rebuild_pool()
                continue
            except Exception as error:  # noqa: BLE001
                student, problem = self.feedback[future], f"no feedback could be generated ({type(error).__name__})"
            del self.feedback[future]
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


def grade(assignment: str, root: Path | None = None, csv_path: Path | None = None, jobs: int | None = None,
          cell_seconds: float = 120.0, notebook_seconds: float | None = None) -> int:
    """Grade every submission of ``assignment``; returns an exit code (0 even if submissions fail).

    Exit code 2: no sandbox could start (nothing executed, nobody scored); 3: the grader itself
    failed to write some learners' grade or feedback (named on stderr); 130: interrupted
    (the gradebook holds every learner recorded so far; running again completes the class).
    """
    # nbgrader's own add_submission trips this SQLAlchemy warning on every new learner; it is noise.
    warnings.filterwarnings("ignore", message="Object of type <Submitted")
    root = Path(root or course_root()).resolve()
    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's gradebook runs `alembic` by name
    csv_path = Path(csv_path or root / "build" / "grades.csv")
    exposure = exposure_warning(root)
    if exposure:
        print(exposure, file=sys.stderr)
    students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}") if p.is_dir())
    if not students:
        print(f"no submissions found under {root / 'submitted'}/*/{assignment}", file=sys.stderr)
        return 1
    if not (root / "source" / assignment / f"{assignment}.ipynb").exists() or not (root / "release" / assignment).exists():
        from grader.build import build

        build(root, [assignment])
    work = root / "build" / "grading" / assignment
    shutil.rmtree(work, ignore_errors=True)
    (work / "sandboxes").mkdir(parents=True)
    os.chmod(work / "sandboxes", 0o711)  # sandbox uids reach their own folder, list nothing
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def interrupt(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    run = None
    try:
        for sig in previous:
            signal.signal(sig, interrupt)
        run = GradingRun(root, assignment, jobs or os.cpu_count() or 1, cell_seconds, notebook_seconds)
        problem = run.run(students)
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
        print(f"grading stopped before any notebook ran: no sandbox could start ({printable(problem, 500)}).\n"
              "Nothing was scored. Check LNCOURSE_ISOLATION and the README's isolation table.", file=sys.stderr)
        return 2
    run.pool.shutdown(wait=True)
    from nbgrader.apps import ExportApp

    problem = nbgrader_app(root, ExportApp, [f"--to={csv_path}"])
    if problem:
        print(problem, file=sys.stderr)
        return 1
    run.timings["total"] = time.monotonic() - run.started
    mode = (run.isolation or {}).get("mode", "unknown")
    per_notebook = sorted(run.seconds.values())
    median = per_notebook[len(per_notebook) // 2] if per_notebook else 0.0
    print(f"isolation: {mode}; {len(run.seconds)} notebooks with {run.jobs} jobs; median {median:.1f}s per notebook; "
          + ", ".join(f"{name} {value:.1f}s" for name, value in run.timings.items()))
    print_scores(csv_path, assignment, run.messages)
    if run.unfinished:
        names = ", ".join(printable(s, 60) for s in sorted(run.unfinished)[:20])
        print(f"the grader could not finish {len(run.unfinished)} learner(s) ({names}): no grade or no feedback was "
              "written for them; see their notes above, fix the cause and run the same command again.", file=sys.stderr)
        return 3
    return 0


def print_scores(csv_path: Path, assignment: str, messages: dict[str, list[str]]) -> None:
    """The score table; every learner-controlled string passes through ``printable`` first."""
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["assignment"] == assignment]
    names = {r["student_id"]: printable(r["student_id"], 60) for r in rows}
    width = max([len("student")] + [len(n) for n in names.values()])
    print(f"{'student':<{width}}  score / max   notes")
    for r in sorted(rows, key=lambda r: r["student_id"]):
        notes = printable("; ".join(messages.get(r["student_id"], [])), 200)
        print(f"{names[r['student_id']]:<{width}}  {float(r['raw_score']):5.1f} / {float(r['max_score']):<5.1f} {notes}")
    print(f"scores written to {csv_path}; messages in build/grading/{assignment}/messages.json")
