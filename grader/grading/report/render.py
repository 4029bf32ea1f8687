"""``python -m grader report ASSIGNMENT``: read the last grading, analyse it, write the .json, .csv and .html
(the package's docstring says what each holds)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from grader.grading.report.analysis import analyse
from grader.grading.report.html import render_html
from grader.grading.report.plots import plots
from grader.grading.report.reading import exercises_of, read_attempt_logs, read_results
from grader.grading.report.spreadsheet import render_csv


def _write(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def build_report(root: Path, assignment: str, identify: bool = False, out: Path | None = None) -> dict:
    """Read the last grading of ``assignment`` and write the three files; returns the document
    plus where it went (``"files"``) and how long it took (``"seconds"``)."""
    from grader.grading.run.intake import expected_notebooks

    started = time.monotonic()
    results_by_student, skipped_results = read_results(root / "build" / "grading" / assignment / "results", assignment)
    exercises, test_exercise = exercises_of(root, assignment)
    notebooks = sorted({nb for per in results_by_student.values() for nb in per}
                       | set(expected_notebooks(root, assignment)))
    logs, skipped_logs, problem = read_attempt_logs(root, assignment, sorted(results_by_student), notebooks, exercises)
    document = analyse(assignment, results_by_student, skipped_results, logs, skipped_logs, problem, exercises,
                       test_exercise, identify)
    images = plots(document)
    out = Path(out or root / "build" / "reports")
    out.mkdir(parents=True, exist_ok=True)
    files = {suffix: out / f"{assignment}.{suffix}" for suffix in ("html", "csv", "json")}
    _write(files["json"], json.dumps(document, indent=1, ensure_ascii=True, allow_nan=False) + "\n")
    _write(files["csv"], render_csv(document))
    _write(files["html"], render_html(document, images))
    return {**document, "files": {k: str(v) for k, v in files.items()}, "seconds": time.monotonic() - started}


def is_plain_assignment(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and name.isprintable()


def report(assignment: str, root: Path | None = None, identify: bool = False, out: Path | None = None) -> int:
    """``python -m grader report``: 0 when written, 1 when there is nothing to report on."""
    from grader.grading.run.terminal import printable

    if root is None:
        from grader.course import course_root

        root = course_root()
    root = Path(root).resolve()
    if not is_plain_assignment(assignment):
        print(f"not an assignment id: {printable(assignment, 100)}", file=sys.stderr)
        return 1
    results_dir = root / "build" / "grading" / assignment / "results"
    if not results_dir.is_dir() or results_dir.is_symlink():
        print(f"no grading results under {printable(str(results_dir), 300)}: run `python -m grader grade "
              f"{printable(assignment, 100)}` first", file=sys.stderr)
        return 1
    made = build_report(root, assignment, identify=identify, out=out)
    skipped = sum(made["skipped_results"].values())
    print(f"report on {printable(assignment, 100)}: {made['learners']} learner(s)"
          + (f", {skipped} result file(s) skipped" if skipped else "")
          + (f"; attempt logs: {made['attempts_problem']}" if made["attempts_problem"] else "")
          + f" ({made['seconds']:.1f} s)")
    for path in made["files"].values():
        print(f"  {printable(path, 300)}")
    if made["learners"] == 0:
        print("no valid result was found: the report is empty", file=sys.stderr)
    return 0
