"""Canvas: a gradebook-import CSV, or the instructor's own Canvas export with our columns filled in.

Canvas's import (Grades → Import) reads the columns ``Student, ID, SIS User ID, SIS Login ID, Section``,
then one column per assignment titled ``Title (canvas id)``; a title without an id creates a new
assignment. The row after the header, ``Points Possible``, gives each assignment's points. Canvas
matches each row to a learner by ID (its user id), else SIS User ID, else SIS Login ID.

``fill_export`` takes a CSV exported from Canvas (Grades → Export) and fills only the columns of the
graded assignments (matched by canvas id, or by a title equal to the assignment id), for the rows of
roster learners; every other byte of the file stays as it was.
"""
from __future__ import annotations

import csv
import io
import re

from grader.grading.export import rawcsv
from grader.grading.export.gradebook import format_points
from grader.grading.export.roster import Learner

IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
POINTS_POSSIBLE = "Points Possible"
TITLED = re.compile(r"^(?P<title>.*) \((?P<id>\d+)\)$")


class CanvasError(ValueError):
    pass


def column_title(assignment: str, canvas_ids: dict[str, str]) -> str:
    canvas_id = canvas_ids.get(assignment, "")
    return f"{assignment} ({canvas_id})" if canvas_id else assignment


def cell(grades, assignment: str, learner: Learner, missing: str) -> str:
    score = grades.scores.get((assignment, learner.nbgrader_id))
    if score is None:
        return "0" if missing == "zero" else ""
    return format_points(score.score)


def identity(learner: Learner) -> list[str]:
    return [learner.sortable_name or learner.name, learner.lms_user_id, learner.sis_user_id, learner.sis_login_id,
            learner.section]


def has_identity(learner: Learner) -> bool:
    return bool(learner.lms_user_id or learner.sis_user_id or learner.sis_login_id)


def write_import(grades, learners: list[Learner], canvas_ids: dict[str, str],
                 missing: str = "zero") -> tuple[str, list[str]]:
    """(the import CSV's text, nbgrader ids left out because Canvas could not match them to anyone)."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([*IDENTITY, *(column_title(a, canvas_ids) for a in grades.assignments)])
    writer.writerow([POINTS_POSSIBLE, "", "", "", "", *(format_points(p) for p in grades.assignments.values())])
    left_out = []
    for learner in learners:
        if not has_identity(learner):
            left_out.append(learner.nbgrader_id)
            continue
        writer.writerow([*identity(learner), *(cell(grades, a, learner, missing) for a in grades.assignments)])
    return out.getvalue(), left_out


def fill_export(text: str, grades, learners: list[Learner], canvas_ids: dict[str, str],
                missing: str = "zero") -> tuple[str, dict[str, list[str]]]:
    """(the Canvas export ``text`` with the graded assignments' columns filled, what was not matched).

    The second value: ``rows not in the roster`` (Canvas names of learner rows no roster learner
    matched: kept as they were), ``roster learners not in the export`` (nbgrader ids), and
    ``assignments without a column``. With ``missing="blank"`` a learner without a submission keeps the
    cell the export had."""
    records = rawcsv.split(text)
    if not records:
        raise CanvasError("the Canvas export is empty")
    header = [v.removeprefix("\ufeff") for v in records[0].values()]
    if header[:2] != IDENTITY[:2]:
        raise CanvasError(f"this is not a Canvas gradebook export: it starts {header[:2]!r}, not {IDENTITY[:2]!r}")
    columns = {}  # assignment -> column position
    for position, title in enumerate(header):
        match = TITLED.match(title)
        if not match:
            continue
        for assignment in grades.assignments:
            wanted = canvas_ids.get(assignment)
            if (wanted and match["id"] == wanted) or (not wanted and match["title"].strip() == assignment):
                if assignment in columns:
                    raise CanvasError(f"two columns of the Canvas export match {assignment}: give its canvas id "
                                      f"(--canvas-id {assignment}=ID)")
                columns[assignment] = position
    by_key = {}
    for learner in learners:
        for position, key in ((1, learner.lms_user_id), (2, learner.sis_user_id), (3, learner.sis_login_id)):
            if key:
                by_key.setdefault((position, key), learner)
    unmatched_rows, matched = [], set()
    for record in records[1:]:
        values = record.values()
        if len(values) < len(IDENTITY) or values[0].strip() in (POINTS_POSSIBLE, "") or values[0].lstrip().startswith(
                POINTS_POSSIBLE):
            continue  # Points Possible and Canvas's other annotation rows
        learner = next((by_key[(p, values[p])] for p in (1, 2, 3) if values[p] and (p, values[p]) in by_key), None)
        if learner is None:
            unmatched_rows.append(values[0])
            continue
        matched.add(learner.nbgrader_id)
        for assignment, position in columns.items():
            if position >= len(record.fields):
                continue
            new = cell(grades, assignment, learner, missing)
            if new == "" and missing == "blank":
                continue
            record.fields[position] = rawcsv.Field(rawcsv.quote(new), new)
    return rawcsv.join(records), {
        "rows not in the roster": unmatched_rows,
        "roster learners not in the export": [learner.nbgrader_id for learner in learners
                                              if learner.nbgrader_id not in matched],
        "assignments without a column": [a for a in grades.assignments if a not in columns]}
