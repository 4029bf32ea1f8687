"""Grade every submission of one assignment through nbgrader and export the scores.

nbgrader does the work it is good at (restoring locked cells, running the notebook,
recording grades in the gradebook, feedback, CSV export); this module drives it and
prints a score table.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from grader.build import course_root, run_nbgrader


def submitted_students(root: Path, assignment: str) -> list[str]:
    return sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}") if p.is_dir())


def grade(assignment: str, root: Path | None = None, csv_path: Path | None = None) -> int:
    """Autograde ``submitted/*/assignment``, write feedback and a CSV; returns an exit code."""
    root = Path(root or course_root())
    csv_path = Path(csv_path or root / "build" / "grades.csv")
    students = submitted_students(root, assignment)
    if not students:
        print(f"no submissions found under {root / 'submitted'}/*/{assignment}", file=sys.stderr)
        return 1
    if not (root / "release" / assignment).exists() or not (root / "source" / assignment / f"{assignment}.ipynb").exists():
        from grader.build import build

        build(root, [assignment])
    for step in (("autograde", assignment, "--create", "--force"), ("generate_feedback", assignment, "--force")):
        result = run_nbgrader(root, *step)
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr)
            print(f"nbgrader {step[0]} reported errors (see above); grades of the others are kept", file=sys.stderr)
    result = run_nbgrader(root, "export", f"--to={csv_path}")
    if result.returncode != 0:
        print(result.stdout + result.stderr, file=sys.stderr)
        return 1
    print_scores(csv_path, assignment)
    return 0


def print_scores(csv_path: Path, assignment: str) -> None:
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["assignment"] == assignment]
    width = max([len("student")] + [len(r["student_id"]) for r in rows])
    print(f"{'student':<{width}}  score / max")
    for r in sorted(rows, key=lambda r: r["student_id"]):
        print(f"{r['student_id']:<{width}}  {float(r['raw_score']):5.1f} / {float(r['max_score']):.1f}")
    print(f"scores written to {csv_path}")
