"""The class report as CSV: one row per figure, cells a spreadsheet would run as a formula neutralised."""
from __future__ import annotations

import csv
import io

CSV_COLUMNS = ["section", "notebook", "id", "name", "count", "learners", "percent", "ci_low", "ci_high", "lift",
               "median", "q1", "q3", "note"]


def neutralise(value) -> str:
    """A CSV cell a spreadsheet will not run: text starting with = + - @ (or a tab or return) gets a "'"."""
    text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def render_csv(document: dict) -> str:
    """The document (``analysis.analyse``) as CSV text, columns ``CSV_COLUMNS``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in _rows(document):
        writer.writerow([neutralise(row.get(column)) for column in CSV_COLUMNS])
    return buffer.getvalue()


def _rows(d: dict) -> list[dict]:
    rows = []
    for row in d["tests"]:
        rows.append({"section": "test", "notebook": row["notebook"], "id": row["test"], "name": row["exercise"],
                     "count": row["passed"], "learners": row["learners"], "percent": row["percent"],
                     "ci_low": row["ci_low"], "ci_high": row["ci_high"]})
    for row in d["misconceptions"]:
        rows.append({"section": "misconception", "id": row["id"], "name": row["name"], "count": row["count"],
                     "learners": row["learners"], "percent": row["percent"], "ci_low": row["ci_low"],
                     "ci_high": row["ci_high"], "note": row["note"]})
    for row in d["pairs"]:
        rows.append({"section": "pair", "id": f"{row['a']} & {row['b']}", "name": f"{row['name_a']} & {row['name_b']}",
                     "count": row["count"], "learners": row["learners"], "lift": row["lift"]})
    for row in d["attempts"]:
        for kind in ("checks", "hints"):
            stats = row[kind] or {}
            rows.append({"section": f"attempts_{kind}", "id": row["exercise"], "learners": row["learners"],
                         "median": stats.get("median"), "q1": stats.get("q1"), "q3": stats.get("q3")})
    for reason, count in d["skipped_results"].items():
        rows.append({"section": "skipped_result", "id": reason, "count": count})
    for reason, count in d["skipped_notebooks"].items():
        rows.append({"section": "skipped_notebook", "id": reason, "count": count})
    for student, row in (d.get("by_learner") or {}).items():
        rows.append({"section": "learner", "id": student, "name": " ".join(row["misconceptions"]),
                     "note": " ".join(row["failed"])})
    return rows
