"""The scores of a class, read from nbgrader's gradebook: the one place any export takes points from.

A score is the gradebook's total for the submission less its late penalty (never below 0), as
nbgrader's own export computes it. Grading fails closed into the gradebook (``grader.grading.run.results``), so
a blank or hostile submission is 0 here; a score that is not a finite number is read as 0, and said.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

# grader.grading.autograde.nbgrader_steps.DIAGNOSIS_HEADING (not imported: it imports nbgrader)
DIAGNOSIS_HEADING = "Autograder diagnosis:"


class GradebookError(ValueError):
    pass


@dataclass(frozen=True)
class StudentRecord:
    first_name: str = ""
    last_name: str = ""
    email: str = ""


@dataclass(frozen=True)
class Score:
    score: float
    max_score: float
    timestamp: str = ""
    failed: tuple[str, ...] = ()  # test cells that earned less than their points
    diagnoses: tuple[str, ...] = ()  # "test_x: name [id]" lines of the automatic comments
    raw_score: float = 0.0  # before the late penalty
    penalty: float = 0.0


@dataclass
class ClassGrades:
    assignments: dict[str, float] = field(default_factory=dict)  # name -> points possible, in the order asked
    duedates: dict[str, str] = field(default_factory=dict)
    students: dict[str, StudentRecord] = field(default_factory=dict)  # nbgrader id -> record, sorted by id
    scores: dict[tuple[str, str], Score] = field(default_factory=dict)  # (assignment, student) -> score
    warnings: list[str] = field(default_factory=list)


def points(value) -> float:
    """A gradebook number as a finite float >= 0 (anything else: 0)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0


def diagnosis_lines(comment: str | None) -> list[str]:
    if not comment or DIAGNOSIS_HEADING not in comment:
        return []
    lines = comment.split(DIAGNOSIS_HEADING, 1)[1].splitlines()
    return [line.strip()[2:].strip() for line in lines if line.strip().startswith("- ")]


def db_url(root: Path) -> str:
    from grader.grading.autograde.nbgrader_steps import course_directory
    from grader.grading.run.course_setup import load_config

    return course_directory(load_config(root), root, "", "").db_url


def read_class(root: Path, assignments: list[str], url: str | None = None) -> ClassGrades:
    """Every learner's score of ``assignments`` (each must be in the gradebook); raises GradebookError."""
    import os

    from nbgrader.api import Gradebook, MissingEntry

    from grader.course import tool_environment

    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's gradebook runs `alembic` by name (as pipeline.grade)
    url = url or db_url(Path(root))
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise GradebookError(f"no gradebook at {url.removeprefix('sqlite:///')}: run `python -m grader grade` first")
    grades = ClassGrades()
    import warnings

    warnings.filterwarnings("ignore", message="Object of type <Submitted")  # nbgrader's own noise (as pipeline.grade)
    with Gradebook(url) as gb:
        known = {a.name: a for a in gb.assignments}
        unknown = [a for a in assignments if a not in known]
        if unknown:
            raise GradebookError(f"not in the gradebook: {', '.join(unknown)} (it holds: "
                                 f"{', '.join(sorted(known)) or 'nothing'})")
        for name in assignments:
            grades.assignments[name] = points(known[name].max_score)
            grades.duedates[name] = str(known[name].duedate or "")
        for student in sorted(gb.students, key=lambda s: s.id):
            grades.students[student.id] = StudentRecord(student.first_name or "", student.last_name or "",
                                                        student.email or "")
        for name in assignments:
            for student in grades.students:
                try:
                    submission = gb.find_submission(name, student)
                except MissingEntry:
                    continue
                raw = submission.score
                if raw is None or not math.isfinite(float(raw)):
                    grades.warnings.append(f"{student}/{name}: the gradebook's score is {raw!r}; exported as 0")
                penalty = points(submission.late_submission_penalty)
                score = max(0.0, points(raw) - penalty)
                failed, diagnoses = [], []
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        if grade.cell_type == "code" and points(grade.score) < points(grade.max_score):
                            failed.append(grade.name)
                    for comment in notebook.comments:
                        diagnoses += diagnosis_lines(comment.auto_comment)
                grades.scores[(name, student)] = Score(score, grades.assignments[name],
                                                       str(submission.timestamp or ""), tuple(failed), tuple(diagnoses),
                                                       points(raw), penalty)
    return grades


def format_points(value: float) -> str:
    """7 -> "7", 3.5 -> "3.5", 2/3 -> "0.666667": what an LMS reads as a number."""
    text = f"{round(float(value), 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text
