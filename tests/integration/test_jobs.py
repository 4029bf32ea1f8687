"""Grading as hermetic, content-addressed jobs (grader.grading.run.jobs).

- a job's key changes with the submission, the bundle and the settings, and nothing else;
- a result is accepted only for the job that produced it (a forged or misfiled one is refused);
- re-grading an unchanged class executes 0 notebooks, and still rebuilds gradebook, CSV and
  feedback; a forged cache file is refused and its job re-run; changing a hidden test re-runs
  that assignment's jobs;
- killing the coordinator with SIGKILL at several points, then running again, gives the same
  CSV and gradebook as an uninterrupted run, with no duplicate rows, and leaves no process.
"""
import copy
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from grader.grading.run import jobs, results
from tests.conftest import alive, command_line, descendants, subprocess_env
from tests.course_helpers import gradebook_rows as _gradebook
from tests.course_helpers import make_course, submit
from tests.integration.test_hostile import ASSIGNMENT, solution_sources, submission, tree_digest


# -- units: keys and acceptance, no execution ------------------------------------------------
def _notebook(tmp_path: Path, name: str, code: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code, id="test-x")]  # fixed id: the bundle digest is the file's bytes
    nb.cells[0].metadata["nbgrader"] = {"grade": True, "grade_id": "test_x", "points": 1, "solution": False,
                                        "locked": True, "schema_version": 3}
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _job(tmp_path, student="ada", code="assert True", source_code="assert True", options=None, extra=None):
    folder = tmp_path / student / "files"
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (extra or {}).items():
        (folder / name).write_text(data)
    notebook = _notebook(tmp_path / student, "nb.ipynb", code)
    source = _notebook(tmp_path / "source", "nb.ipynb", source_code)
    return jobs.Job.make("A", student, "nb", notebook, source, folder,
                         options or {"mode": "auto", "limits": {"cell_seconds": 120.0}})


def _result(job: jobs.Job) -> dict:
    return {"schema": results.SCHEMA_VERSION, "assignment": job.assignment, "student": job.student,
            "notebook": job.notebook, "source_digest": job.bundle, "notebook_digest": job.notebook_digest,
            "cells": {"0": []}, "digests": {"0": results.cell_digest("assert True")},
            "tests": {"test_x": {"status": results.PASSED}}, "notes": [], "isolation": {"mode": "userns"},
            "complete": True, "executed": dict(job.submission_parts), "job": job.identity()}


def test_a_key_depends_on_submission_bundle_and_settings_only(tmp_path):
    base = _job(tmp_path)
    again = _job(tmp_path)
    assert base.key == again.key and len(base.key) == 64
    keys = {"base": base.key,
            "other code": _job(tmp_path / "1", code="assert 1").key,
            "other file": _job(tmp_path / "2", extra={"data.txt": "x"}).key,
            "other test": _job(tmp_path / "3", source_code="assert 2").key,
            "other limit": _job(tmp_path / "4", options={"mode": "auto", "limits": {"cell_seconds": 5.0}}).key,
            "other isolation": _job(tmp_path / "5", options={"mode": "basic", "limits": {"cell_seconds": 120.0}}).key}
    assert len(set(keys.values())) == len(keys), keys
    # what does not change a verdict does not change the key: the uid, scratch and hidden folders
    moved = _job(tmp_path / "6", options={"mode": "auto", "limits": {"cell_seconds": 120.0}, "uid": 61003,
                                          "scratch": "/elsewhere", "hidden": ["/x"]})
    assert moved.key == base.key
    twin = _job(tmp_path / "7", student="bob")  # the same bytes from another learner: another job
    assert twin.submission == base.submission and twin.key != base.key
    assert jobs.Job.from_json(base.to_json()) == base  # plain data: what a remote worker receives
    assert jobs.grader_version() != jobs.grader_version("v1") != jobs.grader_version("v2")
    assert len(jobs.grader_version()) == 64 and jobs.grader_version() == jobs.grader_version()


def test_the_grader_version_holds_the_environment(tmp_path, monkeypatch):
    """Another numpy, torch or Python executes every job again, pinned grader or not."""
    import importlib.metadata
    import platform

    text = jobs.environment()
    assert platform.python_version() in text.splitlines()[0]
    for name in ("numpy", "torch", "nbgrader"):
        version = importlib.metadata.version(name)
        assert any(line.startswith(f"{name}-{version}.dist-info") for line in text.splitlines()), (name, version)
    assert not [line for line in text.splitlines() if line.startswith("pip-")]  # the installer is not the environment
    before = {pin: jobs.grader_version(pin) for pin in ("", "v1")}
    base = _job(tmp_path / "a")
    monkeypatch.setattr(jobs, "_VERSION_CACHE", {})
    monkeypatch.setattr(jobs, "environment", lambda: text.replace("numpy-", "numpy-9"))
    after = {pin: jobs.grader_version(pin) for pin in ("", "v1")}
    assert all(before[pin] != after[pin] for pin in before)
    assert _job(tmp_path / "b").key != base.key


def test_packages_on_pythonpath_or_in_the_user_site_are_the_environment_too(tmp_path, monkeypatch):
    """A numpy put first on PYTHONPATH (which slots and sandboxes inherit), or by `pip install --user` where Python
    reads the user's site-packages (not in a venv), runs the jobs as surely as site-packages' own: a new one executes
    every job again."""
    import site

    monkeypatch.setattr(jobs, "_VERSION_CACHE", {})
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(site, "ENABLE_USER_SITE", False)
    before = jobs.grader_version("v1")
    overlay = tmp_path / "overlay"
    (overlay / "numpy-9.9.dist-info").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", str(overlay))
    monkeypatch.setattr(jobs, "_VERSION_CACHE", {})
    assert "numpy-9.9.dist-info" in jobs.environment().splitlines()
    with_overlay = jobs.grader_version("v1")
    (overlay / "numpy-9.9.dist-info").rename(overlay / "numpy-9.10.dist-info")
    monkeypatch.setattr(jobs, "_VERSION_CACHE", {})
    assert len({before, with_overlay, jobs.grader_version("v1")}) == 3

    user_site = tmp_path / "user-site"
    (user_site / "torch-9.9.dist-info").mkdir(parents=True)
    monkeypatch.delenv("PYTHONPATH")
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(user_site))
    monkeypatch.setattr(jobs, "_VERSION_CACHE", {})
    assert "torch-9.9.dist-info" not in jobs.environment()  # a venv's Python never reads it
    monkeypatch.setattr(site, "ENABLE_USER_SITE", True)
    assert "torch-9.9.dist-info" in jobs.environment().splitlines()
    assert jobs.grader_version("v1") != before


def test_a_result_is_accepted_only_for_its_own_job(tmp_path):
    ada, bob = _job(tmp_path, "ada"), _job(tmp_path, "bob", code="assert 1")
    good = _result(ada)
    assert jobs.accept(ada, json.dumps(good)) == (good, None)
    assert jobs.accept(bob, json.dumps(good))[1] == "the result was produced for another job"
    relabelled = {**copy.deepcopy(good), "student": "bob", "job": bob.identity()}  # claims bob's job, ada's notebook
    assert "notebook_digest differs" in jobs.accept(bob, relabelled)[1]
    other_bundle = {**copy.deepcopy(good), "source_digest": "0" * 64}
    assert "source_digest differs" in jobs.accept(ada, other_bundle)[1]
    no_job = {k: v for k, v in good.items() if k != "job"}
    assert jobs.accept(ada, no_job)[1] == "the result was produced for another job"
    assert "malformed" in jobs.accept(ada, {**good, "job": {"key": "x"}})[1]
    assert "unreadable" in jobs.accept(ada, "{not json")[1]


def test_the_cache_keeps_complete_results_and_refuses_forged_files(tmp_path):
    ada, bob = _job(tmp_path, "ada"), _job(tmp_path, "bob", code="assert 1")
    cache = jobs.ResultCache(tmp_path / "cache")
    assert cache.get(ada) == (None, None)
    cache.put(ada, {**_result(ada), "complete": False})  # stopped by a limit: not kept
    cache.put(ada, {**_result(ada), "isolation": None})  # no sandbox: not kept
    assert cache.get(ada) == (None, None)
    cache.put(ada, _result(ada))
    assert cache.get(ada) == (_result(ada), None)
    cache.put(bob, _result(ada))  # not bob's: not kept
    assert cache.get(bob) == (None, None)
    cache.path(bob.key).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(cache.path(ada.key), cache.path(bob.key))  # forged by hand: ada's result under bob's key
    assert cache.get(bob)[1] == "the result was produced for another job"
    assert [p.name for p in cache.folder.rglob("*.tmp")] == []
    carl = _job(tmp_path, "carl")
    unsaid = {k: v for k, v in _result(carl).items() if k != "executed"}  # does not say what it executed
    assert jobs.accept(carl, unsaid)[0] == unsaid  # recorded (a zero or a pass, its digests checked later) ...
    cache.put(carl, unsaid)  # ... never cached
    assert cache.get(carl) == (None, None)


def test_a_result_of_other_bytes_than_its_jobs_is_refused_and_never_cached(tmp_path):
    """The executor reports what it read (the notebook's cells, the learner's folder): a file changed between the
    job's making and its run (another grading run rewriting the folder) makes its result another job's."""
    from grader.grading.autograde.execute import execute_submission
    from tests.unit.test_grading_run import FakeSandbox

    ada = _job(tmp_path, "ada", extra={"data.txt": "1"})
    cache = jobs.ResultCache(tmp_path / "cache")

    def run(job):
        who = {"assignment": job.assignment, "student": job.student, "notebook": job.notebook}
        result = execute_submission(job.notebook_path, job.source_path, {**job.options, "files": job.files}, who=who,
                                    sandbox_factory=FakeSandbox)
        return {**result, "job": job.identity()}

    honest = run(ada)
    assert honest["executed"] == ada.submission_parts and jobs.accept(ada, honest)[0] == honest
    (Path(ada.files) / "data.txt").write_text("2")  # the folder changed after the job was made
    stale = run(ada)
    assert jobs.accept(ada, stale) == (None, "the result is of other bytes than the job's (folder changed between "
                                             "the job's making and its run)")
    cache.put(ada, stale)
    assert cache.get(ada) == (None, None)
    (Path(ada.files) / "data.txt").write_text("1")
    nb = nbformat.read(ada.notebook_path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("added", id="md"))  # the notebook changed (its code did not)
    nbformat.write(nb, ada.notebook_path)
    assert "(notebook changed" in jobs.accept(ada, run(ada))[1]

    class CopiedWhileChanged(FakeSandbox):  # the folder changes while the sandbox copies it
        def __init__(self, **options):
            (Path(options["files"]) / "data.txt").write_text("3")

    bob = _job(tmp_path, "bob", extra={"data.txt": "1"})
    who = {"assignment": "A", "student": "bob", "notebook": "nb"}
    result = execute_submission(bob.notebook_path, bob.source_path, {**bob.options, "files": bob.files}, who=who,
                                sandbox_factory=CopiedWhileChanged)
    assert "folder changed" in jobs.accept(bob, {**result, "job": bob.identity()})[1]


# -- end to end ------------------------------------------------------------------------------
def _class(tmp_path) -> Path:
    course = make_course(tmp_path)
    right = solution_sources()
    first = next(iter(right))
    submit(course, "ada", submission(right))
    submit(course, "bob", submission({first: right[first]}))  # the first exercise only
    submit(course, "cy", submission({}))  # blank
    return course


def _command(course: Path, *extra) -> list[str]:
    # other work may edit grader/ during the test: a pinned version keeps the keys still
    return [sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout", "60",
            "--jobs", "2", "--GradeConfig.grader_version=test-jobs", *extra]


def _grade(course: Path, *extra) -> dict:
    started = time.monotonic()
    done = subprocess.run(_command(course, *extra), capture_output=True, text=True, env=subprocess_env(), timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((course / "build" / "grading" / ASSIGNMENT / "run.json").read_text())
    summary.update(seconds=time.monotonic() - started, stdout=done.stdout, stderr=done.stderr)
    return summary


def _outputs(course: Path) -> tuple[str, dict]:
    return (course / "build" / "grades.csv").read_text(), _gradebook(course)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A class of three graded once, uninterrupted: its CSV and gradebook are the reference."""
    course = _class(tmp_path_factory.mktemp("jobs"))
    first = _grade(course)
    return course, first, _outputs(course)


@pytest.mark.slow
def test_regrading_an_unchanged_class_executes_nothing(graded):
    course, first, reference = graded
    assert len(first["executed"]) == 3 and first["cached"] == [], first
    feedback = sorted((course / "feedback").rglob("*.html"))
    assert len(feedback) == 3
    for path in feedback:
        path.unlink()
    submitted = tree_digest(course / "submitted")
    again = _grade(course)
    assert again["executed"] == [] and len(again["cached"]) == 3, again
    assert "0 notebooks executed, 3 from cache" in again["stdout"]
    assert _outputs(course) == reference
    assert sorted((course / "feedback").rglob("*.html")) == feedback  # rebuilt from the cached results
    assert tree_digest(course / "submitted") == submitted
    print(f"first grading {first['seconds']:.1f} s (3 executed); re-grading {again['seconds']:.1f} s (0 executed)")


@pytest.mark.slow
def test_a_forged_cache_file_is_refused_and_its_job_run_again(graded):
    course, _, reference = graded
    cache = jobs.ResultCache(course / "build" / "grading-cache")
    by_student = {}
    for path in cache.folder.rglob("*.json"):
        data = json.loads(path.read_text())
        by_student[data["student"]] = path
    assert set(by_student) == {"ada", "bob", "cy"}
    # bob's cache file now holds ada's full-marks result (valid schema, another learner's job)
    by_student["bob"].write_text(by_student["ada"].read_text())
    # cy's holds ada's result relabelled with cy's name and key (ada's notebook, ada's submission digest)
    forged = json.loads(by_student["ada"].read_text())
    forged["student"] = "cy"
    forged["job"]["key"] = by_student["cy"].stem
    by_student["cy"].write_text(json.dumps(forged))
    run = _grade(course)
    assert sorted(run["executed"]) == [["bob", ASSIGNMENT], ["cy", ASSIGNMENT]], run
    assert run["cached"] == [["ada", ASSIGNMENT]]
    assert len(run["refused"]) == 2 and "refused a result" in run["stderr"]
    assert _outputs(course) == reference  # bob and cy keep their own scores


@pytest.mark.slow
def test_changing_a_hidden_test_reruns_that_assignment(graded):
    from grader.course.build import build

    course, _, _ = graded
    script = course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py"
    text = script.read_text()
    marker = "### BEGIN HIDDEN TESTS\n"
    assert marker in text
    script.write_text(text.replace(marker, marker + "assert True  # a new hidden check\n", 1))
    build(course, [ASSIGNMENT])
    run = _grade(course)
    assert len(run["executed"]) == 3 and run["cached"] == [], run
    unchanged = _grade(course)
    assert unchanged["executed"] == [], unchanged


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_at_any_point_then_rerun_gives_the_uninterrupted_result(graded, tmp_path):
    _, _, reference = graded
    course = _class(tmp_path)
    submitted = tree_digest(course / "submitted")
    work, cache = course / "build" / "grading" / ASSIGNMENT, course / "build" / "grading-cache"
    points = {  # when to kill, each run resuming the last one
        "while sanitising": lambda: any((course / "autograded").glob("*/*/*.ipynb")),
        "after the first result": lambda: any(cache.rglob("*.json")),
        "while writing feedback": lambda: any((course / "feedback").glob("*/*")),
    }
    killed = []
    for point, reached in points.items():
        process = subprocess.Popen(_command(course), env=subprocess_env(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        seen, deadline = {}, time.monotonic() + 300
        while process.poll() is None and not reached() and time.monotonic() < deadline:
            seen.update(descendants(process.pid))
            time.sleep(0.05)
        seen.update(descendants(process.pid))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            killed.append(point)
        process.wait(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and alive(seen):
            time.sleep(0.2)
        survivors = {p: command_line(p) for p in alive(seen)}
        assert survivors == {}, f"left running after SIGKILL {point}"
    assert killed, "every run finished before it could be killed"
    last = _grade(course)
    assert _outputs(course) == reference, (killed, last)
    gradebook = _gradebook(course)
    assert len(gradebook["submissions"]) == len(set(gradebook["submissions"])) == 3
    assert len(gradebook["grades"]) == len(set(gradebook["grades"]))
    assert tree_digest(course / "submitted") == submitted
    assert not list(cache.rglob("*.tmp")) and work.exists()
    print(f"killed {killed}; the last run executed {len(last['executed'])}, reused {len(last['cached'])}")
