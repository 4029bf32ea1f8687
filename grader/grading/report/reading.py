"""What the class report reads, never writes: the last grading's results, the instructor's
notebooks (exercise names) and the attempt logs in the submitted notebooks.

Anything unreadable, malformed or hostile is skipped and counted by reason, never fatal.
"""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

MAX_LEVEL = 1000  # a hint level above this is not a level
MAX_RECORDS = 100_000  # attempt records taken from one notebook
ATTEMPT_MIME = b"application/vnd.lncourse.attempt+json"  # grader.attempts' output type: no log without it

SKIP_REASONS = [  # (words of grader.grading.run.results.load's message, the category counted)
    ("no result was produced", "not a regular file"),
    ("too large", "too large"),
    ("unreadable", "unreadable"),
    ("malformed", "malformed"),
    ("does not belong", "for another learner, notebook or assignment"),
]


def _skip_category(problem: str) -> str:
    return next((category for words, category in SKIP_REASONS if words in problem), "invalid")


# ------------------------------------------------------------------ the grading's results
def read_results(results_dir: Path, assignment: str) -> tuple[dict, Counter]:
    """student -> {notebook: result} of every valid result, and the skipped ones counted by reason.

    Validated like the record phase (``grader.grading.run.results.load``: schema, the learner, notebook and
    assignment the result says it is for); a symlinked folder or file is never followed.
    """
    from grader.grading.run import results
    found: dict[str, dict[str, dict]] = {}
    skipped: Counter = Counter()
    try:
        entries = sorted(os.scandir(results_dir), key=lambda e: e.name)
    except OSError:
        return found, skipped
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            skipped["not a folder of results"] += 1
            continue
        try:
            files = sorted(os.scandir(entry.path), key=lambda e: e.name)
        except OSError:
            skipped["unreadable"] += 1
            continue
        for file in files:
            if not file.name.endswith(".json"):
                continue  # results.write's temporary files
            notebook = file.name[: -len(".json")]
            result, problem = results.load(Path(file.path), {"assignment": assignment, "student": entry.name,
                                                              "notebook": notebook})
            if result is None:
                skipped[_skip_category(problem or "")] += 1
            else:
                found.setdefault(entry.name, {})[notebook] = result
    return found, skipped


# ------------------------------------------------------------------ the instructor's notebooks
def exercises_of(root: Path, assignment: str) -> tuple[list[str], dict[str, str]]:
    """The assignment's exercises (solution cells' grade_ids, in order) and test -> exercise,
    from the instructor's notebooks (source/, else release/)."""
    import nbformat

    exercises: list[str] = []
    test_exercise: dict[str, str] = {}
    for folder in (root / "source" / assignment, root / "release" / assignment):
        paths = sorted(folder.glob("*.ipynb"))
        if not paths:
            continue
        for path in paths:
            try:
                nb = nbformat.read(path, as_version=4)
            except Exception:  # noqa: BLE001 - an instructor's notebook that does not read: no exercise names
                continue
            _add_exercises(nb, exercises, test_exercise)
        break
    return exercises, test_exercise


def _add_exercises(nb, exercises: list[str], test_exercise: dict[str, str]) -> None:
    """Append ``nb``'s solution cells to ``exercises``; map each test cell to the solution before it."""
    current = None
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not isinstance(meta, dict) or not isinstance(meta.get("grade_id"), str):
            continue
        if meta.get("solution"):
            current = meta["grade_id"]
            if current not in exercises:
                exercises.append(current)
        elif meta.get("grade") and cell.cell_type == "code" and current:
            test_exercise[meta["grade_id"]] = current


# ------------------------------------------------------------------ the attempt logs
def read_attempt_logs(root: Path, assignment: str, students: list[str], notebooks: list[str],
                      exercises: list[str]) -> tuple[dict | None, Counter, str | None]:
    """student -> [valid, deduplicated attempt records] of the learners whose submitted
    notebooks hold any, the notebooks skipped counted by reason, and why there are no
    logs at all (``grader.attempts`` missing) or None.

    Each notebook is read as the intake reads it: never through a link, only a regular file,
    at most ``intake.MAX_NOTEBOOK_BYTES``, UTF-8 JSON nested at most ``notebook_repair.MAX_JSON_DEPTH``
    deep. Only records of this assignment's exercises are kept.
    """
    try:
        from grader.attempts import read_attempts
    except ImportError as error:
        return None, Counter(), f"the attempt logs could not be read: grader.attempts is not available ({error})"
    from grader.grading.run import intake
    known = set(exercises)
    logs: dict[str, list[dict]] = {}
    skipped: Counter = Counter()
    for student in students:
        try:
            folder = intake.open_submission(root, student, assignment)
        except intake.Missing:
            skipped["no submitted folder"] += 1
            continue
        except (intake.Unreadable, OSError):
            skipped["submitted folder unreadable"] += 1
            continue
        records: dict[tuple, dict] = {}
        try:
            for notebook in notebooks:
                _add_records(folder, notebook, read_attempts, known, records, skipped)
        finally:
            os.close(folder)
        if records:
            logs[student] = list(records.values())
    return logs, skipped, None


def _add_records(folder: int, notebook: str, read_attempts, known: set[str], records: dict, skipped: Counter) -> None:
    """Add the valid attempt records of one submitted notebook (``folder``: the learner's
    submission, an open descriptor) to ``records``, keyed so that repeats count once."""
    from grader.grading.run import intake, notebook_repair
    try:
        raw = intake.read_regular(folder, f"{notebook}.ipynb", intake.MAX_NOTEBOOK_BYTES)
        if ATTEMPT_MIME not in raw:
            return  # no attempt log: not worth parsing
        document = load_json(raw)
    except intake.Missing:
        skipped["no submitted notebook"] += 1
        return
    except (intake.Unreadable, OSError):
        skipped["notebook not a readable regular file"] += 1
        return
    except notebook_repair.Rejected:
        skipped["notebook not valid JSON"] += 1
        return
    try:
        found = read_attempts(document)
    except Exception:  # noqa: BLE001 - read_attempts should never raise; if it does, skip
        skipped["attempt log unreadable"] += 1
        return
    bad = 0
    for record in list(found)[:MAX_RECORDS] if isinstance(found, list) else []:
        clean = valid_record(record, known)
        if clean is None:
            bad += 1
        else:
            records.setdefault((clean["exercise"], clean["kind"], clean["check"], clean["time"]), clean)
    if bad:
        skipped["attempt records malformed"] += bad


def load_json(raw: bytes):
    """The JSON value of a learner's notebook, with the intake's bounds (UTF-8, at most
    ``notebook_repair.MAX_JSON_VALUES`` values, nested at most as deep as the interpreter allows, no
    huge integers, no NaN); raises ``notebook_repair.Rejected``. Lighter than ``notebook_repair.parse_json``:
    the report uses only validated records, so strings need no repair."""
    from grader.grading.run import notebook_repair
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise notebook_repair.Rejected("is not UTF-8 text") from None
    if sum(text.count(c) for c in ",[{") > notebook_repair.MAX_JSON_VALUES:
        raise notebook_repair.Rejected("holds too many JSON values")
    try:
        return json.loads(text, parse_int=notebook_repair.json_int, parse_float=notebook_repair.json_float,
                          parse_constant=lambda _: None)
    except (RecursionError, ValueError):
        raise notebook_repair.Rejected("is not valid JSON") from None


def valid_record(record, exercises: set[str]) -> dict | None:
    """The fields the report uses, or None for a record that is not one of this assignment's."""
    if not isinstance(record, dict):
        return None
    exercise, kind, check = record.get("exercise"), record.get("kind"), record.get("check")
    when, level = record.get("time"), record.get("level")
    if type(exercise) is not str or exercise not in exercises or kind not in ("check", "hint"):
        return None
    if check is not None and (type(check) is not str or len(check) > 200):
        return None
    if type(when) not in (int, float) or not math.isfinite(when):
        return None
    if level is not None and (type(level) is not int or not 0 <= level <= MAX_LEVEL):
        return None
    return {"exercise": exercise, "kind": kind, "check": check, "time": float(when), "level": level}
