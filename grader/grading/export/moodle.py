"""Moodle: a grade-import CSV (Grades → Import → CSV file).

One identifier column, which the instructor maps to the user field of the same name in Moodle's
import form (email address, username or ID number), then per assignment a grade column and a
feedback column (a short summary of the autograder's diagnoses). Moodle's import wipes grades when a
feedback column is mapped without its grade column, so the two are always written as a pair; a learner
without a grade (``--missing blank``) gets no feedback either.
"""
from __future__ import annotations

import csv
import io

from grader.grading.export.gradebook import format_points
from grader.grading.export.roster import Learner

IDENTIFIERS = ("email", "username", "idnumber")
MAX_FEEDBACK = 1000


def identifier(learner: Learner, field: str) -> str:
    return getattr(learner, field)


def feedback(score) -> str:
    """A line or two for the learner: the score, the tests not passed, the likely mistakes."""
    if score is None:
        return "No submission."
    parts = [f"Autograded: {format_points(score.score)} / {format_points(score.max_score)}."]
    if score.failed:
        parts.append("Not passed: " + ", ".join(score.failed) + ".")
    if score.diagnoses:
        parts.append("Likely mistakes: " + "; ".join(score.diagnoses) + ".")
    text = " ".join(parts)
    return text if len(text) <= MAX_FEEDBACK else text[: MAX_FEEDBACK - 1] + "…"


def write_import(grades, learners: list[Learner], field: str = "email", missing: str = "zero") -> tuple[str, list[str]]:
    """(the import CSV's text, nbgrader ids left out because the roster gives them no ``field``)."""
    if field not in IDENTIFIERS:
        raise ValueError(f"the Moodle identifier is one of {', '.join(IDENTIFIERS)}, not {field!r}")
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    header = [field]
    for assignment in grades.assignments:
        header += [assignment, f"{assignment} feedback"]
    writer.writerow(header)
    left_out = []
    for learner in learners:
        key = identifier(learner, field)
        if not key:
            left_out.append(learner.nbgrader_id)
            continue
        row = [key]
        for assignment in grades.assignments:
            score = grades.scores.get((assignment, learner.nbgrader_id))
            if score is None and missing == "blank":
                row += ["", ""]
            else:
                row += [format_points(score.score) if score else "0", feedback(score)]
        writer.writerow(row)
    return out.getvalue(), left_out
