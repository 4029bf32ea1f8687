"""Who each learner is outside nbgrader: a roster CSV, and how it lines up with the gradebook.

The roster is a CSV with a header row (UTF-8, a byte-order mark allowed). One column is required, the
learner's nbgrader id; the others are optional, in any order, case-insensitive:

    nbgrader_id (or student_id, id)  name  sortable_name  email  sis_user_id  sis_login_id
    lms_user_id (or canvas_user_id)  section  username  idnumber

Learners who are in the gradebook but not in the roster, and roster learners who submitted nothing,
are reported (``Reconciled``), never dropped silently.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, fields
from pathlib import Path

ALIASES = {"nbgrader_id": "nbgrader_id", "student_id": "nbgrader_id", "id": "nbgrader_id",
           "lms_user_id": "lms_user_id", "canvas_user_id": "lms_user_id"}


class RosterError(ValueError):
    """A roster that cannot be used; the text says what to fix."""


@dataclass(frozen=True)
class Learner:
    nbgrader_id: str
    name: str = ""
    sortable_name: str = ""
    email: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    lms_user_id: str = ""
    section: str = ""
    username: str = ""
    idnumber: str = ""


FIELDS = [f.name for f in fields(Learner)]


def parse_roster(text: str, where: str = "the roster") -> list[Learner]:
    """The learners of a roster's text, in its order; raises RosterError."""
    rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline="")))
    if not rows:
        raise RosterError(f"{where} is empty: it needs a header row with an nbgrader_id column")
    columns = {}
    for position, title in enumerate(rows[0]):
        key = title.strip().lower().replace(" ", "_")
        key = ALIASES.get(key, key)
        if key in FIELDS:
            if key in columns:
                raise RosterError(f"{where} has two columns for {key} ({title!r})")
            columns[key] = position
    if "nbgrader_id" not in columns:
        raise RosterError(f"{where} has no nbgrader_id column (also read: student_id, id); header: {rows[0]!r}")
    learners, seen = [], set()
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        values = {key: (row[position].strip() if position < len(row) else "") for key, position in columns.items()}
        if not values["nbgrader_id"]:
            raise RosterError(f"{where}, line {number}: no nbgrader id")
        if values["nbgrader_id"] in seen:
            raise RosterError(f"{where}, line {number}: the nbgrader id {values['nbgrader_id']!r} appears twice")
        seen.add(values["nbgrader_id"])
        learners.append(Learner(**values))
    return learners


def read_roster(path: Path) -> list[Learner]:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise RosterError(f"{path} is not UTF-8 ({error.reason} at byte {error.start}): save it as UTF-8 CSV") from None
    except OSError as error:
        raise RosterError(f"{path} cannot be read ({error.strerror})") from None
    return parse_roster(text, str(path))


@dataclass(frozen=True)
class Reconciled:
    """The roster and the gradebook side by side.

    ``learners``: everyone exported, roster order first, then gradebook learners the roster lacks;
    ``not_in_roster``: gradebook ids the roster lacks; ``no_submission``: (nbgrader id, assignment) of
    roster learners who submitted nothing for that assignment.
    """

    learners: list[Learner]
    not_in_roster: list[str]
    no_submission: list[tuple[str, str]]


def reconcile(roster: list[Learner] | None, grades) -> Reconciled:
    """Line up a roster (None: no roster, every gradebook learner as nbgrader knows them) with ``grades``
    (``gradebook.ClassGrades``)."""
    from_gradebook = {sid: Learner(nbgrader_id=sid, name=" ".join(p for p in (s.first_name, s.last_name) if p),
                                   sortable_name=", ".join(p for p in (s.last_name, s.first_name) if p),
                                   email=s.email) for sid, s in grades.students.items()}
    if roster is None:
        learners = list(from_gradebook.values())
        return Reconciled(learners, [], [(learner.nbgrader_id, a) for learner in learners for a in grades.assignments
                                          if (a, learner.nbgrader_id) not in grades.scores])
    known = {learner.nbgrader_id for learner in roster}
    not_in_roster = [sid for sid in grades.students if sid not in known]
    no_submission = [(learner.nbgrader_id, a) for learner in roster for a in grades.assignments
                     if (a, learner.nbgrader_id) not in grades.scores]
    return Reconciled([*roster, *(from_gradebook[sid] for sid in not_in_roster)], not_in_roster, no_submission)
