"""grader.grading.autograde.gradebook_engines: nbgrader's gradebooks share one engine per database in a process."""
import os
import shutil
import sqlite3

import pytest

from grader.course.build import tool_environment
from grader.grading.autograde import gradebook_engines
from grader.grading.seams.nbgrader import install_gradebook_engine

# slow: real nbgrader gradebooks (~15 s)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory):
    """An empty gradebook file, made once (a new one costs nbgrader an `alembic` run, seconds)."""
    path = tmp_path_factory.mktemp("gradebook") / "empty.db"
    previous = os.environ["PATH"]
    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader runs `alembic` by name
    try:
        from nbgrader import api

        api.Gradebook(f"sqlite:///{path}").close()
    finally:
        os.environ["PATH"] = previous
    return path


def database(empty_gradebook, folder, name="gradebook.db") -> str:
    shutil.copyfile(empty_gradebook, folder / name)
    return f"sqlite:///{folder / name}"


def test_gradebooks_of_one_database_share_an_engine_and_still_work_after_close(tmp_path, empty_gradebook):
    install_gradebook_engine()
    install_gradebook_engine()  # idempotent
    from nbgrader import api

    url = database(empty_gradebook, tmp_path)
    with api.Gradebook(url) as first:
        first.add_assignment("a1")
        first.add_student("ada")
        engine = first.engine
    with api.Gradebook(url) as second:  # the first one's close disposed the engine's connections
        assert second.engine is engine
        assert [a.name for a in second.assignments] == ["a1"] and [s.id for s in second.students] == ["ada"]
    with api.Gradebook(database(empty_gradebook, tmp_path, "other.db")) as other:
        assert other.engine is not engine and other.assignments == []


def test_a_forked_child_makes_its_own_engine(tmp_path, empty_gradebook):
    install_gradebook_engine()
    from nbgrader import api

    url = database(empty_gradebook, tmp_path)
    with api.Gradebook(url) as parent:
        parent.add_student("ada")
        parents_engine = id(parent.engine)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a fresh engine, the same data
        try:
            with api.Gradebook(url) as child:
                ok = (id(child.engine) != parents_engine and len(gradebook_engines._engines) == 1
                      and [s.id for s in child.students] == ["ada"])
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    assert answer == b"1"



def test_the_schema_is_made_only_where_a_table_is_missing(tmp_path, empty_gradebook, monkeypatch):
    install_gradebook_engine()
    from nbgrader import api

    monkeypatch.setenv("PATH", tool_environment()["PATH"])  # a new gradebook: nbgrader runs `alembic`
    made = []
    original = gradebook_engines.original["create_all"]
    monkeypatch.setitem(gradebook_engines.original, "create_all",
                        lambda *args, **kwargs: made.append(1) or original(*args, **kwargs))
    url = database(empty_gradebook, tmp_path)
    with api.Gradebook(url) as first:
        first.add_student("ada")
    with api.Gradebook(url) as second:
        assert [s.id for s in second.students] == ["ada"]
    assert made == []  # every table was there
    (tmp_path / "gradebook.db").unlink()  # replaced by an empty file under the same name
    (tmp_path / "gradebook.db").write_bytes(b"")
    with api.Gradebook(url) as third:
        assert third.students == []
        third.add_student("bo")
    assert made == [1]
    with sqlite3.connect(tmp_path / "gradebook.db") as db:  # a table dropped: made again
        db.execute("DROP TABLE grade")
    with api.Gradebook(url) as fourth:
        assert [s.id for s in fourth.students] == ["bo"]
    assert made == [1, 1]
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'grade'").fetchone() == (1,)
