"""GradingRun (grader.grading.run.pipeline), step by step, with fake pools and a fake nbgrader.

No sandbox, no nbgrader, no subprocess: the pools are synchronous (``submit`` returns a future
that is already complete), the nbgrader phases write and log what the real ones would read,
and a fake worker builds each result with the real executor (``execute_submission``) over a
fake sandbox, so what the run accepts or refuses is judged by the real ``accept``.

- a cached result is reused and nothing is submitted;
- every executed result is accepted and written to the cache and build/grading/A/results/;
- a result claiming another job is refused, run again, and after MAX_ATTEMPTS scores zero;
- a BrokenProcessPool rebuilds the pool and resubmits what it held (twice: zero);
- a probe that fails stops the run before anything executes;
- the record phase runs once per learner, after all that learner's notebooks;
- a learner id with a glob character is not graded and is told why.
"""
import contextlib
import json
import shutil
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import nbformat
import pytest

from grader.grading.autograde.execute import execute_submission
from grader.grading.config import GradeConfig
from grader.grading.run import feedback_work, grading_run, pipeline, results, summary
from grader.grading.run.jobs import Job, ResultCache
from grader.grading.slots import execution_slot

ASSIGNMENT = "A"
NOTEBOOKS = ("nb1", "nb2")


# -- a tiny course -------------------------------------------------------------------------------
def _source_notebook(name: str):
    """An instructor's notebook: imports, one solution cell, one autograded test."""
    nb = nbformat.v4.new_notebook()
    cells = [nbformat.v4.new_code_cell("import math", id="imports"),
             nbformat.v4.new_code_cell("answer = 1", id="solution"),
             nbformat.v4.new_code_cell("assert math.pi > 3", id="test")]
    cells[1].metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": f"answer_{name}",
                                     "locked": False, "schema_version": 3}
    cells[2].metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": f"test_{name}", "points": 1,
                                     "locked": True, "schema_version": 3}
    nb.cells = cells
    return nb


@pytest.fixture
def course(tmp_path) -> Path:
    root = tmp_path / "course"
    for name in NOTEBOOKS:
        path = root / "source" / ASSIGNMENT / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(_source_notebook(name), path)
    (root / "build" / "grading" / ASSIGNMENT).mkdir(parents=True)  # what grade() makes before a run
    return root


class FakeNbgrader:
    """The nbgrader phases: sanitise copies the instructor's notebooks to autograded/, record
    logs which results it found; ``events`` is shared with the workers (one timeline)."""

    def __init__(self, events: list):
        self.events = events
        self.recorded: dict[str, list[list[str]]] = {}  # student -> the result files seen, per record call

    def run_phase(self, config, root, assignment, student, phase, submitted_dir, results_dir="", notes=()):
        if phase == "sanitize":
            for name in NOTEBOOKS:
                target = Path(root) / "autograded" / student / assignment / f"{name}.ipynb"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(root) / "source" / assignment / f"{name}.ipynb", target)
        else:
            seen = sorted(p.stem for p in (Path(results_dir) / student).glob("*.json"))
            self.recorded.setdefault(student, []).append(seen)
        self.events.append((phase, student))

    def mirror(self, root, work, assignment, student):
        (Path(work) / "submitted" / student / assignment).mkdir(parents=True, exist_ok=True)
        return []

    def phases(self) -> grading_run.Phases:
        return grading_run.Phases(run_phase=self.run_phase, mirror=self.mirror)


# -- fake workers and pools ----------------------------------------------------------------------
class FakeSandbox:
    """Runs nothing: every learner cell succeeds with no output, and no learner name exists."""

    isolation = {"mode": "userns"}
    launcher_died = False

    def __init__(self, **options):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run_cell(self, source):
        return {"outputs": [], "error": None}

    def lookup(self, name):
        raise KeyError(name)

    def budget(self):
        return contextlib.nullcontext()


def honest(job: Job, attempt: int) -> str:
    """What a real worker returns for ``job``: the executor's result plus the job's identity (``run_job``)."""
    who = {"assignment": job.assignment, "student": job.student, "notebook": job.notebook}
    result = execute_submission(job.notebook_path, job.source_path, {**job.options, "files": job.files}, who=who,
                                sandbox_factory=FakeSandbox)
    result["job"] = job.identity()
    return json.dumps(result)


class FakePool:
    """A synchronous pool: ``submit`` runs the function's stand-in now and returns a completed Future."""

    def __init__(self, workers: "Workers"):
        self.workers, self.closed = workers, False

    def submit(self, fn, *args):
        future = Future()
        try:
            future.set_result(self.workers.answer(fn, args))
        except BaseException as error:  # noqa: BLE001 - carried by the future, as a real pool does
            future.set_exception(error)
        return future

    def shutdown(self, wait=True, cancel_futures=False):
        self.closed = True


USERNS_PROBE = execution_slot.ProbeResult(None, "userns")  # the probe's answer where every sandbox starts


class Workers:
    """What the pools' workers do: the probe's answer, ``execute(job, attempt) -> result text``
    (``attempt``: 1 for the first execution of that job in this run), and feedback that always works."""

    def __init__(self, events: list, execute=honest, probe=USERNS_PROBE):
        self.events, self.execute, self.probe = events, execute, probe
        self.executions: list[tuple[str, str]] = []  # (student, notebook), every execution in order
        self.pools: list[FakePool] = []
        self.feedback_pools: list[FakePool] = []

    def answer(self, fn, args):
        if fn is execution_slot.probe:
            return self.probe
        if fn is execution_slot.execute_task:
            job = Job.from_json(args[0])
            self.executions.append((job.student, job.notebook))
            self.events.append(("execute", job.student))
            return self.execute(job, self.executions.count((job.student, job.notebook))), 0.01
        if fn is feedback_work.feedback_task:
            root, assignment, student = args[0]
            return student, None
        raise AssertionError(f"unexpected submission {fn!r}")

    def pool(self, jobs: int) -> FakePool:
        self.pools.append(FakePool(self))
        return self.pools[-1]

    def feedback_pool(self, jobs: int) -> FakePool:
        self.feedback_pools.append(FakePool(self))
        return self.feedback_pools[-1]


class Harness:
    """One course, its fake nbgrader and workers; ``grade`` makes and runs a GradingRun."""

    def __init__(self, root: Path, **workers):
        self.root, self.events = root, []
        self.nbgrader = FakeNbgrader(self.events)
        self.workers = Workers(self.events, **workers)

    def grade(self, students: list[str]) -> tuple[grading_run.GradingRun, str | None]:
        settings = GradeConfig(jobs=2, grader_version="test-grading-run", isolation="auto")
        run = grading_run.GradingRun(self.root, ASSIGNMENT, settings, config={}, pool_factory=self.workers.pool,
                                  feedback_pool_factory=self.workers.feedback_pool, phases=self.nbgrader.phases())
        return run, run.run(students)

    def job(self, run: grading_run.GradingRun, student: str, notebook: str) -> Job:
        """The job the run made for a learner's notebook (the same inputs give the same key)."""
        sanitised = self.root / "autograded" / student / ASSIGNMENT / f"{notebook}.ipynb"
        return Job.make(ASSIGNMENT, student, notebook, sanitised,
                        self.root / "source" / ASSIGNMENT / f"{notebook}.ipynb",
                        run.work / "submitted" / student / ASSIGNMENT, run.options, grader=run.grader)

    def result_path(self, student: str, notebook: str) -> Path:
        return self.root / "build" / "grading" / ASSIGNMENT / "results" / student / f"{notebook}.json"

    def messages(self) -> dict:
        return json.loads((self.root / "build" / "grading" / ASSIGNMENT / "messages.json").read_text())


ZERO = "its grading process died twice or returned no valid result; it scores zero: tell the instructor"


# -- the tests -----------------------------------------------------------------------------------
def test_every_executed_result_is_accepted_cached_and_written(course):
    harness = Harness(course)
    run, problem = harness.grade(["ada", "bob"])
    assert problem is None
    expected = [(s, nb) for s in ("ada", "bob") for nb in NOTEBOOKS]
    assert sorted(harness.workers.executions) == expected  # each job once
    assert sorted(run.executed) == expected and run.reused == [] and run.refused == []
    cache = ResultCache(run.cache.folder)
    for student, notebook in expected:
        cached, why_not = cache.get(harness.job(run, student, notebook))
        assert why_not is None and cached["tests"] == {f"test_{notebook}": {"status": results.PASSED, "message": ""}}
        written = json.loads(harness.result_path(student, notebook).read_text())
        assert written == cached
    assert run.isolation == {"mode": "userns"}
    assert run.unfinished == set() and harness.messages() == {"ada": [], "bob": []}
    summary.write_run_summary(run)
    written = json.loads((run.work / "run.json").read_text())
    assert written["executed"] == [list(e) for e in expected] and written["cached"] == []


def test_a_cached_result_is_reused_and_nothing_is_submitted(course):
    Harness(course).grade(["ada"])  # fills the cache
    again = Harness(course)
    run, problem = again.grade(["ada"])
    assert problem is None
    assert again.workers.pools == [] and again.workers.executions == []  # no pool, no probe, no job
    assert sorted(run.reused) == [("ada", nb) for nb in NOTEBOOKS] and run.executed == []
    assert all(again.result_path("ada", nb).is_file() for nb in NOTEBOOKS)
    assert again.nbgrader.recorded == {"ada": [list(NOTEBOOKS)]}


def _forged_for(victim: tuple[str, str]):
    """A worker that answers ``victim``'s job with a result naming another job (another key)."""
    def execute(job: Job, attempt: int) -> str:
        text = honest(job, attempt)
        if (job.student, job.notebook) != victim:
            return text
        result = json.loads(text)
        result["job"] = {**result["job"], "key": "0" * 64}
        return json.dumps(result)
    return execute


def test_a_result_for_another_job_is_refused_rerun_then_scores_zero(course):
    harness = Harness(course, execute=_forged_for(("ada", "nb1")))
    run, problem = harness.grade(["ada"])
    assert problem is None
    assert harness.workers.executions.count(("ada", "nb1")) == grading_run.MAX_ATTEMPTS
    assert run.refused == ["ada/nb1: returned the result was produced for another job"] * grading_run.MAX_ATTEMPTS
    assert run.executed == [("ada", "nb2")]
    assert not harness.result_path("ada", "nb1").exists() and harness.result_path("ada", "nb2").exists()
    assert ResultCache(run.cache.folder).get(harness.job(run, "ada", "nb1")) == (None, None)
    assert harness.messages()["ada"] == [f"nb1: {ZERO}"]
    assert harness.nbgrader.recorded == {"ada": [["nb2"]]}  # still recorded, once: nb1 scores zero


def _breaking(victim: tuple[str, str], times: int):
    """A worker whose process dies (BrokenProcessPool) on ``victim``'s first ``times`` executions."""
    def execute(job: Job, attempt: int) -> str:
        if (job.student, job.notebook) == victim and attempt <= times:
            raise BrokenProcessPool("a worker died")
        return honest(job, attempt)
    return execute


def test_a_broken_pool_is_rebuilt_and_what_it_held_runs_again(course):
    harness = Harness(course, execute=_breaking(("ada", "nb1"), times=1))
    run, problem = harness.grade(["ada"])
    assert problem is None
    assert len(harness.workers.pools) == 2 and harness.workers.pools[0].closed  # the broken one was stopped
    assert harness.workers.executions.count(("ada", "nb1")) == 2
    assert sorted(run.executed) == [("ada", nb) for nb in NOTEBOOKS]
    assert all(harness.result_path("ada", nb).exists() for nb in NOTEBOOKS)
    assert harness.messages()["ada"] == []


def test_a_notebook_that_breaks_the_pool_twice_scores_zero(course):
    harness = Harness(course, execute=_breaking(("ada", "nb1"), times=grading_run.MAX_ATTEMPTS))
    run, problem = harness.grade(["ada", "bob"])
    assert problem is None
    assert harness.workers.executions.count(("ada", "nb1")) == grading_run.MAX_ATTEMPTS
    assert len(harness.workers.pools) == 1 + grading_run.MAX_ATTEMPTS
    assert harness.messages()["ada"] == [f"nb1: {ZERO}"]
    assert not harness.result_path("ada", "nb1").exists()
    assert harness.result_path("ada", "nb2").exists() and harness.messages()["bob"] == []
    assert harness.nbgrader.recorded == {"ada": [["nb2"]], "bob": [list(NOTEBOOKS)]}


class BrokenAtSubmit(FakePool):
    """A pool already broken when a job is sent (a worker was killed in between): ``submit`` raises, as
    ProcessPoolExecutor's does, for the first ``left[0]`` executions sent to any pool."""

    def __init__(self, workers, left: list):
        super().__init__(workers)
        self.left = left

    def submit(self, fn, *args):
        if fn is execution_slot.execute_task and self.left[0] > 0:
            self.left[0] -= 1
            raise BrokenProcessPool("a child process terminated abruptly")
        return super().submit(fn, *args)


def _broken_at_submit(harness: "Harness", times: int) -> None:
    left = [times]

    def pool(jobs):
        harness.workers.pools.append(BrokenAtSubmit(harness.workers, left))
        return harness.workers.pools[-1]
    harness.workers.pool = pool


def test_a_job_sent_to_an_already_broken_pool_costs_no_attempt(course):
    """The job never ran: it goes to a fresh pool uncharged, so breaking its worker once more still gives full marks."""
    harness = Harness(course, execute=_breaking(("ada", "nb1"), times=grading_run.MAX_ATTEMPTS - 1))
    _broken_at_submit(harness, times=1)
    run, problem = harness.grade(["ada"])
    assert problem is None and harness.messages()["ada"] == []
    assert sorted(run.executed) == [("ada", nb) for nb in NOTEBOOKS]
    assert harness.workers.pools[0].closed and len(harness.workers.pools) == 1 + 1 + (grading_run.MAX_ATTEMPTS - 1)


def test_pools_that_are_always_broken_end_the_run_with_zero(course):
    """Every fresh pool broken before any result: each job is charged after a few tries, and the run ends."""
    harness = Harness(course)
    _broken_at_submit(harness, times=10**6)
    run, problem = harness.grade(["ada"])
    assert problem is None and run.executed == []
    assert harness.messages()["ada"] == [f"{nb}: {ZERO}" for nb in NOTEBOOKS]


def test_a_probe_that_fails_stops_the_run_before_anything_executes(course):
    harness = Harness(course, probe=execution_slot.ProbeResult("user namespaces are disabled"))
    run, problem = harness.grade(["ada", "bob"])
    assert problem == "user namespaces are disabled"
    assert harness.workers.executions == [] and run.executed == []
    assert not (run.work / "results").exists()
    assert "record" not in {phase for phase, _ in harness.events}


def test_record_runs_once_per_learner_after_all_their_notebooks(course):
    harness = Harness(course)
    run, problem = harness.grade(["ada", "bob", "cy"])
    assert problem is None
    records = [(i, student) for i, (phase, student) in enumerate(harness.events) if phase == "record"]
    assert sorted(student for _, student in records) == ["ada", "bob", "cy"]  # exactly once each
    for index, student in records:
        executed = [i for i, (phase, s) in enumerate(harness.events) if phase == "execute" and s == student]
        assert len(executed) == len(NOTEBOOKS) and max(executed) < index
    assert harness.nbgrader.recorded == {s: [list(NOTEBOOKS)] for s in ("ada", "bob", "cy")}
    assert len(harness.workers.feedback_pools) == 1  # feedback asked once per learner, in one pool


def test_a_signal_during_a_learners_record_stops_the_run_and_is_not_that_learners_failure(course):
    """SIGTERM's handler raises Interrupted wherever the coordinator is: inside nbgrader's record of
    one learner it must not be caught as that learner's failure (exit 3, the class graded on)."""
    harness = Harness(course)
    record = harness.nbgrader.run_phase

    def interrupted_during_bob(config, root, assignment, student, phase, *args, **kwargs):
        if phase == "record" and student == "bob":
            try:  # nbgrader's own handling around each notebook
                raise pipeline.Interrupted("SIGTERM")
            except Exception:  # noqa: BLE001 - what nbgrader does with a notebook's failure
                raise AssertionError("an interrupt was taken for a notebook's failure") from None
        return record(config, root, assignment, student, phase, *args, **kwargs)

    harness.nbgrader.run_phase = interrupted_during_bob
    with pytest.raises(pipeline.Interrupted):
        harness.grade(["ada", "bob", "cy"])
    assert "bob" not in harness.nbgrader.recorded


def test_a_learner_id_with_a_glob_character_is_not_graded_and_told_why(course):
    harness = Harness(course)
    run, problem = harness.grade(["a*b", "ada"])
    assert problem is None
    assert {student for _, student in harness.events} == {"ada"}  # neither sanitised, executed nor recorded
    message = harness.messages()["a*b"]
    assert len(message) == 1 and "contains *, ? or [" in message[0] and "not graded" in message[0]
    assert run.unfinished == {"a*b"}
    assert harness.nbgrader.recorded == {"ada": [list(NOTEBOOKS)]}


def test_a_second_assignment_keeps_the_first_ones_warm_pools_and_checked_sandbox(course):
    """``grader grade A B``: B's run takes over A's pools; no second pool, no second probe."""
    for name in NOTEBOOKS:
        path = course / "source" / "B" / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(_source_notebook(name), path)
    (course / "build" / "grading" / "B").mkdir(parents=True)
    harness = Harness(course)
    probes = []
    answer = harness.workers.answer
    harness.workers.answer = lambda fn, args: ((probes.append(1) if fn is execution_slot.probe else None)
                                               or answer(fn, args))
    settings = GradeConfig(jobs=2, grader_version="test-grading-run", isolation="auto")
    first = grading_run.GradingRun(course, ASSIGNMENT, settings, config={}, pool_factory=harness.workers.pool,
                                feedback_pool_factory=harness.workers.feedback_pool, phases=harness.nbgrader.phases())
    assert first.run(["ada"]) is None
    second = grading_run.GradingRun(course, "B", settings, config={}, phases=harness.nbgrader.phases(), after=first)
    assert second.run(["ada", "bob"]) is None
    assert len(harness.workers.pools) == 1 and len(harness.workers.feedback_pools) == 1 and probes == [1]
    assert sorted(second.executed) == [(s, nb) for s in ("ada", "bob") for nb in NOTEBOOKS]
    assert all((course / "build" / "grading" / "B" / "results" / s / f"{nb}.json").is_file()
               for s in ("ada", "bob") for nb in NOTEBOOKS)
    assert [e for e in harness.events if e[0] == "record"] == [("record", "ada")] * 2 + [("record", "bob")]


def test_a_second_assignment_after_a_failed_probe_executes_nothing(course):
    harness = Harness(course, probe=execution_slot.ProbeResult("no user namespaces"))
    first, problem = harness.grade(["ada"])
    assert problem == "no user namespaces"
    (course / "build" / "grading" / "B").mkdir(parents=True)
    for name in NOTEBOOKS:
        path = course / "source" / "B" / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(_source_notebook(name), path)
    second = grading_run.GradingRun(course, "B", first.settings, config={}, phases=harness.nbgrader.phases(),
                                    after=first)
    assert second.run(["ada"]) == "no user namespaces" and harness.workers.executions == []


def test_grade_runs_each_assignment_after_the_one_before_and_names_one_nobody_submitted(course, monkeypatch, capsys):
    """grade([A, C, B]): C has no submissions (named, skipped, exit 1); B's run is made after A's; one export."""
    for assignment in ("A", "B", "C"):
        (course / "source" / assignment).mkdir(parents=True, exist_ok=True)
        (course / "source" / assignment / f"{assignment}.ipynb").write_text("{}")
        (course / "release" / assignment).mkdir(parents=True)
    for assignment in ("A", "B"):
        (course / "submitted" / "ada" / assignment).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    made, exported = [], []

    class Run:
        def __init__(self, root, assignment, settings, config, after=None):
            self.assignment, self.after, self.unfinished = assignment, after, set()
            self.started, self.timings = 0.0, {}
            made.append(self)

        def run(self, students):
            return None

        def shutdown(self):
            pass

    monkeypatch.setattr(pipeline, "GradingRun", Run)
    # no gradebook here
    monkeypatch.setattr("grader.grading.autograde.nbgrader_steps.gradebook_has_assignment", lambda *a: True)
    monkeypatch.setattr(pipeline, "export_csv", lambda root, csv_path: exported.append(csv_path))
    monkeypatch.setattr(pipeline, "report_run", lambda run, csv_path: None)
    assert pipeline.grade(["A", "C", "B"], root=course) == 1
    assert [r.assignment for r in made] == ["A", "B"] and made[0].after is None and made[1].after is made[0]
    assert len(exported) == 1 and "no submissions found" in capsys.readouterr().err
    assert pipeline.grade(["A", "B"], root=course) == 0


@pytest.mark.parametrize("raised, told", [(SystemExit(1), "SystemExit"), (ValueError("broken cell"), "broken cell")])
def test_feedback_that_nbgrader_cannot_make_is_a_message(tmp_path, monkeypatch, raised, told):
    from grader.grading.autograde import nbgrader_steps
    def failing(*args):
        raise raised

    monkeypatch.setattr(feedback_work, "_worker_config", object())
    monkeypatch.setattr(nbgrader_steps, "generate_feedback", failing)
    student, message = feedback_work.feedback_task((str(tmp_path), ASSIGNMENT, "ada"))
    assert student == "ada" and "no feedback could be generated" in message and told in message


def test_an_operators_interrupt_stops_feedback(tmp_path, monkeypatch):
    from grader.grading.autograde import nbgrader_steps
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(feedback_work, "_worker_config", object())
    monkeypatch.setattr(nbgrader_steps, "generate_feedback", interrupted)
    with pytest.raises(KeyboardInterrupt):
        feedback_work.feedback_task((str(tmp_path), ASSIGNMENT, "ada"))


def test_feedback_pools_that_always_die_end_the_run_with_a_message(course):
    """A feedback worker that can never start (every fresh pool broken, e.g. its initializer fails) is not
    restarted for ever: after MAX_FEEDBACK_POOLS + 1 pools the run ends, grades recorded, each learner told."""
    harness = Harness(course)
    started = []

    class DeadPool(FakePool):
        def submit(self, fn, *args):
            raise BrokenProcessPool("the initializer failed")

    def dead_feedback_pool(jobs):
        started.append(jobs)
        return DeadPool(harness.workers)

    harness.workers.feedback_pool = dead_feedback_pool
    run, problem = harness.grade(["ada", "bob"])
    assert problem is None and sorted(run.executed) == [(s, nb) for s in ("ada", "bob") for nb in NOTEBOOKS]
    assert len(started) == feedback_work.MAX_FEEDBACK_POOLS + 1
    assert run.unfinished == {"ada", "bob"}
    for student in ("ada", "bob"):
        assert any("no feedback could be generated" in m for m in harness.messages()[student])
        assert [s for phase, s in harness.events if phase == "record"].count(student) == 1  # the grade is recorded
