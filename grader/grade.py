"""``python -m grader grade ASSIGNMENT``: grade a whole class safely and in parallel.

1. mirror   Copy submitted/*/ASSIGNMENT into build/grading/ (submitted/ is never written),
            and check every notebook file: a file that is not a notebook is replaced there
            by the blank release (zero points) and the learner gets a message saying why.
2. sanitise nbgrader restores locked and test cells from the gradebook (per learner: one
            broken submission cannot stop the others).
3. execute  In parallel (--jobs), each notebook runs in its own sandbox; test cells run in
            the trusted grader with the learner's functions as proxies (grader.execute).
4. record   nbgrader saves the scores in the gradebook (this process is its only writer);
            a worker writes the learner's feedback (hidden tests removed); a CSV follows.

Steps 2-4 are pipelined per learner, so the serial nbgrader steps overlap the execution.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import nbformat

from grader.build import course_root, tool_environment
from grader.sandbox.client import paths_to_hide

MAX_NOTEBOOK_BYTES = 20 * 2**20
SANDBOX_UID_BASE = 61000  # one unprivileged uid per parallel slot when grading as root


def load_config(root: Path):
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


def assignment_notebooks(root: Path, assignment: str) -> list[str]:
    return sorted(p.stem for p in (root / "source" / assignment).glob("*.ipynb"))


def check_notebook_file(path: Path) -> str | None:
    """None if ``path`` is a readable notebook, else a message for the learner."""
    if path.is_symlink() or not path.is_file():
        return "is not a regular file"
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        return f"is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB"
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text (was it saved with another encoding?)"
    try:
        json.loads(text)
    except ValueError as error:
        return f"is not valid JSON, perhaps truncated ({error.msg} at line {error.lineno})"
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as error:  # noqa: BLE001 - nbformat raises several kinds
        return f"is not a valid Jupyter notebook ({str(error).splitlines()[0][:200]})"
    return None


def mirror_submission(root: Path, work: Path, assignment: str, student: str) -> list[str]:
    """Copy one learner's submission into the private mirror; returns messages for the learner."""
    source = root / "submitted" / student / assignment
    target = work / "submitted" / student / assignment
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    messages = []
    for path in sorted(source.iterdir()):
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_NOTEBOOK_BYTES:
            shutil.copyfile(path, target / path.name)
    for timestamp in ["timestamp.txt"]:
        if (source / timestamp).is_file():
            shutil.copyfile(source / timestamp, target / timestamp)
    expected = assignment_notebooks(root, assignment)
    found = sorted(p.name for p in source.glob("*.ipynb"))
    for notebook in expected:
        path = source / f"{notebook}.ipynb"
        blank = root / "release" / assignment / f"{notebook}.ipynb"
        if not path.exists():
            messages.append(f"{notebook}.ipynb is missing from the submission (found: {', '.join(found) or 'no notebook'}); "
                            "it scores zero. Submit the notebook under its original name.")
            shutil.copyfile(blank, target / f"{notebook}.ipynb")
            continue
        problem = check_notebook_file(path)
        if problem:
            messages.append(f"{notebook}.ipynb {problem}; it could not be graded and scores zero.")
            shutil.copyfile(blank, target / f"{notebook}.ipynb")
        else:
            source_nb = nbformat.read(root / "source" / assignment / f"{notebook}.ipynb", as_version=4)
            expected_ids = [c.metadata["nbgrader"]["grade_id"] for c in source_nb.cells if "nbgrader" in c.metadata]
            messages += repair_metadata(target / f"{notebook}.ipynb", expected_ids)
    return messages


def repair_metadata(path: Path, expected_ids: list[str]) -> list[str]:
    """Undo metadata damage that would make nbgrader reject the whole notebook.

    A pasted copy of a graded cell is dropped (the first one is kept) and an unknown
    nbgrader schema version is reset; the learner's work is graded and told what happened.
    """
    nb = nbformat.read(path, as_version=4)
    messages, seen, cells, changed = [], set(), [], False
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if isinstance(meta, dict):
            grade_id = meta.get("grade_id")
            if grade_id in seen:
                messages.append(f"{path.stem}: cell '{grade_id}' appears more than once (copied?); only the first copy "
                                "was graded.")
                changed = True
                continue
            seen.add(grade_id)
            if meta.get("schema_version") != 3:
                messages.append(f"{path.stem}: cell '{grade_id}' had nbgrader schema_version "
                                f"{meta.get('schema_version')!r}; it was reset to 3.")
                meta["schema_version"] = 3
                changed = True
        cells.append(cell)
    missing = [grade_id for grade_id in expected_ids if grade_id not in seen]
    if missing:
        messages.append(f"{path.stem}: cells {', '.join(missing)} were deleted from the notebook; graded cells "
                        "among them score zero. Start again from a fresh copy of the assignment to restore them.")
    if changed:
        nb.cells = cells
        nbformat.write(nb, path)
    return messages


def sandbox_options(root: Path, work: Path, config, cell_seconds: float = 120.0) -> dict:
    """How each notebook's sandbox is confined; the uid is added per worker (``_execute_task``)."""
    extra_roots = [Path(__file__).resolve().parent.parent]  # the grader's own checkout, if it is a course
    extra_roots = [r for r in extra_roots if (r / "nbgrader_config.py").exists() and r != root]
    exchange = [Path(config.Exchange.root)] if "Exchange" in config and "root" in config.Exchange else [
        Path("/srv/nbgrader/exchange")]
    return {"mode": os.environ.get("LNCOURSE_ISOLATION", "auto"), "hide": paths_to_hide([root, *extra_roots], exchange),
            "scratch": str(work / "sandboxes"),
            "limits": {"cell_seconds": cell_seconds}}


_slot = None


def _init_slot(counter):
    """Number this worker (its sandbox uid) and warm it: its zygote imports everything once."""
    global _slot
    with counter.get_lock():
        _slot = counter.value
        counter.value += 1
    import grader.execute  # noqa: F401
    from grader import oracles
    from grader.sandbox.client import default_zygote

    oracles._torch()
    default_zygote()


def _warm(_):
    return None


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


def _execute_task(args):
    from grader.execute import execute_submission

    root, work, assignment, student, notebook, options = args
    root, work = Path(root), Path(work)
    started = time.monotonic()
    options = {**options, "uid": SANDBOX_UID_BASE + (_slot or 0)}  # one uid per parallel slot
    result = execute_submission(str(root / "autograded" / student / assignment / f"{notebook}.ipynb"),
                                str(root / "source" / assignment / f"{notebook}.ipynb"), options)
    out = work / "results" / student / f"{notebook}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    return student, notebook, time.monotonic() - started, result["notes"], result.get("isolation")


_worker_config = None


def _feedback_task(args):
    """One learner's feedback, in a (trusted) worker: nbgrader's HTML export is the slow part."""
    global _worker_config
    from grader.nbgrader_steps import generate_feedback

    root, assignment, student = args
    _worker_config = _worker_config or load_config(Path(root))  # once per worker
    try:
        generate_feedback(_worker_config, Path(root), assignment, student)
    except Exception as error:  # noqa: BLE001 - nbgrader exits or raises on a broken notebook
        return student, f"no feedback could be generated ({type(error).__name__}: {str(error)[:200]})"
    return student, None


def progress(done: int, total: int, started: float) -> None:
    elapsed = time.monotonic() - started
    eta = elapsed / done * (total - done) if done else 0
    bar = "#" * int(30 * done / total) + "-" * (30 - int(30 * done / total))
    print(f"\r[{bar}] {done}/{total}  elapsed {elapsed:5.1f}s  eta {eta:5.1f}s", end="", file=sys.stderr, flush=True)


def grade(assignment: str, root: Path | None = None, csv_path: Path | None = None, jobs: int | None = None,
          cell_seconds: float = 120.0) -> int:
    """Grade every submission of ``assignment``; returns an exit code (0 even if submissions fail).

    The steps are pipelined: while the parent sanitises the next learner and records the
    finished ones (nbgrader's gradebook has one writer: this process), the workers execute
    notebooks and write feedback, so neither core waits for the serial steps.
    """
    started = time.monotonic()
    # nbgrader's own add_submission trips this SQLAlchemy warning on every new learner; it is noise.
    warnings.filterwarnings("ignore", message="Object of type <Submitted")
    root = Path(root or course_root()).resolve()
    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's gradebook runs `alembic` by name
    csv_path = Path(csv_path or root / "build" / "grades.csv")
    jobs = jobs or os.cpu_count() or 1
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
    # Start the workers (and their zygotes) now, so their imports overlap the first sanitising.
    import multiprocessing

    counter = multiprocessing.Value("i", 0)
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_init_slot, initargs=(counter,))
    for slot in range(jobs):
        pool.submit(_warm, slot)
    config = load_config(root)
    from grader.nbgrader_steps import run_phase

    notebooks = assignment_notebooks(root, assignment)
    submitted_dir = os.path.relpath(work / "submitted", root)
    options = sandbox_options(root, work, config, cell_seconds)
    timings = {"sanitise": 0.0, "record": 0.0}
    messages: dict[str, list[str]] = {}
    left: dict[str, int] = {}  # notebooks still executing, per learner
    executing, feedback = {}, []
    seconds, isolation, finished = {}, None, 0

    def sanitise(student: str) -> None:
        phase_started = time.monotonic()
        messages[student] = mirror_submission(root, work, assignment, student)
        try:
            run_phase(config, root, assignment, student, "sanitize", submitted_dir)
        except Exception as error:  # noqa: BLE001 - bad nbgrader metadata, duplicated cells...
            messages[student].append(f"nbgrader could not read the submission ({type(error).__name__}: "
                                     f"{str(error)[:300]}); it was graded as blank.")
            for notebook in notebooks:
                shutil.copyfile(root / "release" / assignment / f"{notebook}.ipynb",
                                work / "submitted" / student / assignment / f"{notebook}.ipynb")
            run_phase(config, root, assignment, student, "sanitize", submitted_dir)
        timings["sanitise"] += time.monotonic() - phase_started
        ready = [nb for nb in notebooks if (root / "autograded" / student / assignment / f"{nb}.ipynb").exists()]
        left[student] = len(ready)
        for notebook in ready:
            task = (str(root), str(work), assignment, student, notebook, options)
            executing[pool.submit(_execute_task, task)] = student
        if not ready:
            record(student)

    def record(student: str) -> None:
        phase_started = time.monotonic()
        try:
            run_phase(config, root, assignment, student, "record", submitted_dir, str(work / "results"))
        except Exception as error:  # noqa: BLE001
            messages[student].append(f"recording the grade failed: {type(error).__name__}: {str(error)[:300]}")
        timings["record"] += time.monotonic() - phase_started
        feedback.append(pool.submit(_feedback_task, (str(root), assignment, student)))

    def collect(future) -> None:
        nonlocal isolation, finished
        student = executing.pop(future)
        finished += 1
        try:
            _, notebook, duration, notes, isolation = future.result()
            seconds[(student, notebook)] = duration
            messages[student] += [f"{notebook}: {note}" for note in notes]
        except Exception as error:  # noqa: BLE001 - the grader's own failure: this notebook scores zero
            messages[student].append(f"grading a notebook failed ({type(error).__name__}: {str(error)[:300]}); "
                                     "it scores zero: tell the instructor")
        progress(finished, len(students) * len(notebooks), started)
        left[student] -= 1
        if left[student] == 0:
            record(student)

    with pool:
        for student in students:
            sanitise(student)
            for future in [f for f in executing if f.done()]:
                collect(future)
        while executing:
            done, _ = wait(list(executing), return_when=FIRST_COMPLETED)
            for future in done:
                collect(future)
        print(file=sys.stderr)
        timings["all executed at"] = time.monotonic() - started
        for future in feedback:
            student, problem = future.result()
            if problem:
                messages[student].append(problem)
    timings["feedback done at"] = time.monotonic() - started
    from nbgrader.apps import ExportApp

    problem = nbgrader_app(root, ExportApp, [f"--to={csv_path}"])
    if problem:
        print(problem, file=sys.stderr)
        return 1
    timings["total"] = time.monotonic() - started
    (work / "messages.json").write_text(json.dumps(messages, indent=1))
    mode = (isolation or {}).get("mode", "unknown")
    per_notebook = sorted(seconds.values())
    median = per_notebook[len(per_notebook) // 2] if per_notebook else 0.0
    print(f"isolation: {mode}; {len(seconds)} notebooks with {jobs} jobs; median {median:.1f}s per notebook; "
          + ", ".join(f"{name} {value:.1f}s" for name, value in timings.items()))
    print_scores(csv_path, assignment, messages)
    return 0


def print_scores(csv_path: Path, assignment: str, messages: dict[str, list[str]]) -> None:
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["assignment"] == assignment]
    width = max([len("student")] + [len(r["student_id"]) for r in rows])
    print(f"{'student':<{width}}  score / max   notes")
    for r in sorted(rows, key=lambda r: r["student_id"]):
        notes = "; ".join(messages.get(r["student_id"], []))
        print(f"{r['student_id']:<{width}}  {float(r['raw_score']):5.1f} / {float(r['max_score']):<5.1f} {notes[:200]}")
    print(f"scores written to {csv_path}; messages in build/grading/{assignment}/messages.json")
