"""What a grading run prints and writes at its end: the grades CSV, each assignment's summary and score table, and
why nothing was scored when no sandbox could start."""
from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from grader.grading.run.terminal import printable

if TYPE_CHECKING:
    from grader.grading.run.grading_run import GradingRun


def print_nothing_scored(problem: str, left: list[str], done: list[str]) -> None:
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


def report_run(run: "GradingRun", csv_path: Path) -> None:
    """What one assignment's run did (isolation, jobs, timings), its scores, and who it could not finish."""
    mode = (run.isolation or {}).get("mode", "unknown")
    per_notebook = sorted(run.seconds.values())
    median = per_notebook[len(per_notebook) // 2] if per_notebook else 0.0
    print(f"isolation: {mode}; {run.assignment}: {len(run.executed)} notebooks executed, {len(run.reused)} from "
          f"cache, with {run.jobs} jobs; median {median:.1f}s per notebook; "
          + ", ".join(f"{name} {value:.1f}s" for name, value in run.timings.items()))
    for line in run.refused[:20]:
        print(f"refused a result and ran the job again: {printable(line, 300)}", file=sys.stderr)
    write_run_summary(run)
    print_scores(csv_path, run.assignment, run.messages)
    if run.unfinished:
        names = ", ".join(printable(s, 60) for s in sorted(run.unfinished)[:20])
        print(f"the grader could not finish {len(run.unfinished)} learner(s) of {run.assignment} ({names}): no grade "
              "or no feedback was written for them; see their notes above, fix the cause and run the same command "
              "again.", file=sys.stderr)


def write_run_summary(run: "GradingRun") -> None:
    """build/grading/ASSIGNMENT/run.json: which jobs were executed and which came from the cache (for tests and the
    bench)."""
    summary = {"executed": sorted(map(list, run.executed)), "cached": sorted(map(list, run.reused)),
               "refused": run.refused, "cache": str(run.cache.folder)}
    (run.work / "run.json").write_text(json.dumps(summary, indent=1, ensure_ascii=True))


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
