"""Before grading: an assignment the gradebook does not record (a new or replaced gradebook) is built first.

Without its record nbgrader can neither sanitise nor record any learner: every learner would score zero with
"No assignment with ID ... exists in the database". The check reads the gradebook and never creates one.
"""
import sqlite3

import pytest
from traitlets.config import Config

from grader.grading.autograde.nbgrader_steps import gradebook_has_assignment
from grader.grading.run import course_setup

ASSIGNMENT = "03_backward"


def config_for(db):
    config = Config()
    config.CourseDirectory.db_url = f"sqlite:///{db}"
    return config


def gradebook_with(db, names):
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE assignment (id VARCHAR(32) PRIMARY KEY, name VARCHAR(128))")
        connection.executemany("INSERT INTO assignment VALUES (?, ?)", [(str(i), n) for i, n in enumerate(names)])


def test_a_missing_gradebook_lacks_it_and_is_not_created(tmp_path):
    db = tmp_path / "gradebook.db"
    assert not gradebook_has_assignment(config_for(db), tmp_path, ASSIGNMENT)
    assert not db.exists()


@pytest.mark.parametrize("names, expected", [([ASSIGNMENT], True), (["04_rmsnorm", ASSIGNMENT], True),
                                             (["04_rmsnorm"], False), ([], False)])
def test_the_assignment_table_decides(tmp_path, names, expected):
    db = tmp_path / "gradebook.db"
    gradebook_with(db, names)
    assert gradebook_has_assignment(config_for(db), tmp_path, ASSIGNMENT) is expected


def test_a_database_without_nbgraders_tables_lacks_it(tmp_path):
    db = tmp_path / "gradebook.db"
    sqlite3.connect(db).close()
    assert not gradebook_has_assignment(config_for(db), tmp_path, ASSIGNMENT)


def test_an_unreadable_gradebook_is_left_to_the_per_learner_steps(tmp_path):
    db = tmp_path / "gradebook.db"
    db.write_bytes(b"not a database" * 100)
    assert gradebook_has_assignment(config_for(db), tmp_path, ASSIGNMENT)


@pytest.mark.parametrize("recorded", [True, False])
def test_prepare_builds_only_an_assignment_the_gradebook_lacks(tmp_path, monkeypatch, capsys, recorded):
    for folder in ["source", "release"]:
        (tmp_path / folder / ASSIGNMENT).mkdir(parents=True)
    (tmp_path / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text("{}")
    db = tmp_path / "gradebook.db"
    gradebook_with(db, [ASSIGNMENT] if recorded else ["04_rmsnorm"])
    built = []
    monkeypatch.setattr("grader.course.build.build", lambda root, assignments: built.append(assignments))
    course_setup.prepare(tmp_path, ASSIGNMENT, config_for(db))
    assert built == ([] if recorded else [[ASSIGNMENT]])
    assert ("not in the gradebook" in capsys.readouterr().err) is not recorded
