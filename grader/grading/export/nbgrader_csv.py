"""nbgrader's CSV export (the same columns as ``nbgrader export``), written by the csv module.

nbgrader's own export joins its fields with commas unquoted, so a name with a comma or a quote shifts
every column after it. Here every field is quoted where it must be, and learners are those of the
gradebook plus roster learners the gradebook has never seen.
"""
from __future__ import annotations

import csv
import io

from grader.grading.export.roster import Learner

COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
           "late_submission_penalty", "score", "max_score"]


def write_csv(grades, learners: list[Learner], missing: str = "zero") -> str:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for assignment, possible in grades.assignments.items():
        for learner in learners:
            record = grades.students.get(learner.nbgrader_id)
            score = grades.scores.get((assignment, learner.nbgrader_id))
            if score is None:
                values = ["", "0.0", "0.0", "0.0"] if missing == "zero" else ["", "", "", ""]
            else:
                values = [score.timestamp, str(score.raw_score), str(score.penalty), str(score.score)]
            timestamp, raw_score, penalty, total = values
            writer.writerow([assignment, grades.duedates.get(assignment, ""), timestamp, learner.nbgrader_id,
                             record.last_name if record else "", record.first_name if record else "",
                             (record.email if record and record.email else learner.email),
                             raw_score, penalty, total, str(float(possible))])
    return out.getvalue()
