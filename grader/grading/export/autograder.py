"""One submitted notebook, graded as ``python -m grader grade`` grades a class, into per-test data.

For hosts that hand us one submission at a time (Gradescope, PrairieLearn). Nothing here grades: the
same steps run in the same order, one learner instead of a class,

1. intake     ``grader.grading.run.intake.mirror_submission`` (any bytes: a repaired notebook or the blank release);
2. sanitise   nbgrader restores the locked and test cells (``nbgrader_steps.run_phase``);
3. execute    one ``grader.grading.run.jobs.Job`` through ``jobs.run_job`` (the sandbox, the hidden tests, the
              diagnoses), its result accepted by ``jobs.accept`` and written by ``results.write``;
4. record     nbgrader records the scores in the course copy's gradebook, from that validated result only,

and each test's points are then read back from that gradebook (fail closed: only what nbgrader recorded
counts). Isolation: ``GradeConfig.isolation`` ($LNCOURSE_ISOLATION, else auto). Where no sandbox can start
in auto mode (a container without user namespaces or CAP_SYS_ADMIN, as Gradescope's), the notebook runs
again at ``basic`` (resource limits only), and ``Graded.instructor_notes`` says so; it is never skipped.
"""
from __future__ import annotations

import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

HIDDEN_MARKER = "### BEGIN HIDDEN TESTS"
DEGRADED = ("isolation degraded to basic: no sandbox could start at '{mode}' here ({why}). The notebook ran with "
            "resource limits only, seeing what the grading user sees; its hidden tests still ran in the trusted "
            "grader.")


@dataclass
class TestOutcome:
    name: str  # the test cell's grade_id
    score: float  # from the gradebook
    max_score: float
    status: str  # grader.grading.run.results status: passed, failed, not_run, mismatch
    output: str  # the diagnosis: the check's message and the catalogue's names
    hidden: bool  # the cell holds hidden tests


@dataclass
class Graded:
    assignment: str
    tests: list[TestOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # for the learner (intake and grading messages)
    instructor_notes: list[str] = field(default_factory=list)  # isolation and the like: never for the learner
    readable: bool = True  # the submitted notebook could be read (else it was graded as the blank release)
    isolation: str = ""
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)


def place_submission(submission: Path, course: Path, assignment: str, student: str) -> list[str]:
    """Copy the host's submission folder to submitted/STUDENT/ASSIGNMENT/ (links stay links: the intake
    refuses them). A single notebook under another name is taken as the assignment's, and said."""
    target = course / "submitted" / student / assignment
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if Path(submission).is_dir():
        shutil.copytree(submission, target, symlinks=True)
    else:
        target.mkdir()
    wanted = [f"{n}.ipynb" for n in expected(course, assignment)]
    notebooks = sorted(p.name for p in target.iterdir() if p.suffix == ".ipynb" and not p.is_symlink())
    if len(wanted) == 1 and wanted[0] not in notebooks and len(notebooks) == 1:
        (target / notebooks[0]).rename(target / wanted[0])
        return [f"{notebooks[0]} was graded as {wanted[0]} (the only notebook submitted)"]
    return []


def expected(course: Path, assignment: str) -> list[str]:
    from grader.grading.run.intake import expected_notebooks

    return expected_notebooks(course, assignment)


def readable(course: Path, assignment: str, student: str, notebook: str) -> bool:
    """Whether the intake can read the learner's notebook (else it grades the blank release in its place)."""
    from grader.grading.run import intake, notebook_repair
    try:
        folder = intake.open_submission(course, student, assignment)
    except (intake.Unreadable, OSError):
        return False
    try:
        raw = intake.read_regular(folder, f"{notebook}.ipynb", intake.MAX_NOTEBOOK_BYTES)
    except (intake.Unreadable, OSError):
        return False
    finally:
        os.close(folder)
    release = notebook_repair.Release.read(course / "release" / assignment / f"{notebook}.ipynb")
    return notebook_repair.intake_notebook(raw, release, notebook)[0] is not None


def diagnosis_text(result: dict, grade_id: str, index: int | None) -> str:
    """What a test cell said (its outputs at ``index`` in the executed notebook): the check's message (no test
    source ever appears in one), then the catalogue's names of the misconceptions it diagnosed."""
    from grader import catalogue

    test = result.get("tests", {}).get(grade_id, {})
    if test.get("status") == "passed":
        return "passed"
    lines = []
    for output in result.get("cells", {}).get(str(index), []) if index is not None else []:
        if output.get("output_type") == "error":
            lines.append(f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip())
        elif output.get("output_type") == "stream" and str(output.get("text", "")).strip():
            lines.append(str(output.get("text", "")).rstrip())
    for mid in test.get("misconceptions", []):
        known = catalogue.get(mid)
        lines.append(f"Likely mistake: {known.name} [{mid}]" if known else f"Likely mistake: [{mid}]")
    return "\n".join(lines) or str(test.get("message") or test.get("status") or "not graded")


def grade_notebook(course: Path, submission: Path, assignment: str, student: str = "learner") -> Graded:
    """Grade ``submission`` (a folder) against the built course copy ``course`` (source/, release/ and a
    gradebook that records ``assignment``; written to). Raises only for the grader's own failures."""
    from grader.grading.autograde.nbgrader_steps import run_phase
    from grader.grading.config import grade_config
    from grader.grading.run.course_setup import load_config, sandbox_options, secret_folders

    started = time.monotonic()
    # nbgrader's own add_submission trips this SQLAlchemy warning on every new learner (as in pipeline.grade)
    warnings.filterwarnings("ignore", message="Object of type <Submitted")
    from grader.course import tool_environment

    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's gradebook runs `alembic` by name (as pipeline.grade)
    course = Path(course).resolve()
    graded = Graded(assignment)
    graded.notes += place_submission(Path(submission), course, assignment, student)
    notebooks = expected(course, assignment)
    graded.readable = all(readable(course, assignment, student, n) for n in notebooks)
    config = load_config(course)
    settings = grade_config(course, base=config)
    work = course / "build" / "grading" / assignment
    submitted_dir = sanitised_mirror(config, course, work, assignment, student, notebooks, graded)
    options = sandbox_options(work, settings, secret_folders(course))
    kept = {notebook: execute_notebook(course, work, assignment, student, notebook, options, graded)
            for notebook in notebooks}
    run_phase(config, course, assignment, student, "record", submitted_dir, str(work / "results"), notes=graded.notes)
    add_test_outcomes(graded, kept, recorded_grades(config, course, assignment, student))
    graded.seconds = time.monotonic() - started
    return graded


def sanitised_mirror(config, course: Path, work: Path, assignment: str, student: str, notebooks: list[str],
                     graded: Graded) -> str:
    """Steps 1 and 2: the intake's mirror in ``work``, sanitised by nbgrader (the blank release where nbgrader
    cannot read it, which ``graded.notes`` says); the mirror's folder relative to ``course``."""
    from grader.grading.autograde.nbgrader_steps import run_phase
    from grader.grading.run import intake

    shutil.rmtree(work, ignore_errors=True)
    (work / "sandboxes").mkdir(parents=True)
    os.chmod(work / "sandboxes", 0o711)
    graded.notes += intake.mirror_submission(course, work, assignment, student)
    submitted_dir = os.path.relpath(work / "submitted", course)
    try:
        run_phase(config, course, assignment, student, "sanitize", submitted_dir)
    except Exception as error:  # noqa: BLE001 - as grader grade: the blank release in its place
        graded.notes.append(f"nbgrader could not read the submission ({type(error).__name__}); it was graded as blank.")
        for notebook in notebooks:
            shutil.copyfile(course / "release" / assignment / f"{notebook}.ipynb",
                            work / "submitted" / student / assignment / f"{notebook}.ipynb")
        run_phase(config, course, assignment, student, "sanitize", submitted_dir)
    return submitted_dir


def execute_notebook(course: Path, work: Path, assignment: str, student: str, notebook: str, options: dict,
                     graded: Graded) -> tuple[dict, object, dict[str, int]]:
    """Step 3 for one notebook, again at ``basic`` where no sandbox starts at the configured mode (which
    ``graded.instructor_notes`` says); its result written for nbgrader's record step. Returns the result, the
    source notebook, and each test cell's index in the executed notebook."""
    import nbformat

    from grader.grading.run import jobs, results
    from grader.grading.slots.execution_slot import sandbox_uid

    autograded = course / "autograded" / student / assignment / f"{notebook}.ipynb"
    source = course / "source" / assignment / f"{notebook}.ipynb"
    files = work / "submitted" / student / assignment
    result = None
    for attempt_mode in dict.fromkeys([options["mode"], "basic"]):
        job = jobs.Job.make(assignment, student, notebook, autograded, source, files,
                            {**options, "mode": attempt_mode})
        result, problem = jobs.accept(job, jobs.run_job(job.to_json(), sandbox_uid=sandbox_uid()))
        if result is None:
            raise RuntimeError(f"the grader's own result was refused: {problem}")
        if result.get("isolation") is not None:
            break
        why = "; ".join(result.get("notes", [])) or "no reason given"
        if attempt_mode != "basic":
            graded.instructor_notes.append(DEGRADED.format(mode=attempt_mode, why=why[:300]))
    if result.get("isolation") is None:
        raise RuntimeError("no sandbox could start, even at isolation 'basic': "
                           + "; ".join(result.get("notes", [])))
    graded.isolation = str((result.get("isolation") or {}).get("mode", ""))
    results.write(work / "results" / student / f"{notebook}.json", result)
    graded.notes += [f"{notebook}: {note}" for note in result.get("notes", [])]
    executed = {grade_id: index for index, grade_id in
                results.autograded_tests(nbformat.read(autograded, as_version=4)).items()}
    return result, nbformat.read(source, as_version=4), executed


def add_test_outcomes(graded: Graded, kept: dict[str, tuple], recorded: dict[tuple[str, str], tuple[float, float]]):
    """Each test cell's points as nbgrader recorded them (none recorded: zero of the cell's points), its status
    and diagnosis from the notebook's result."""
    from grader.grading.run import results

    for notebook, (result, source_nb, executed) in kept.items():
        for index, grade_id in results.autograded_tests(source_nb).items():
            score, possible = recorded.get((notebook, grade_id), (0.0, float(
                source_nb.cells[index].metadata["nbgrader"].get("points", 0) or 0)))
            graded.tests.append(TestOutcome(
                grade_id, score, possible, result["tests"].get(grade_id, {}).get("status", "not_run"),
                diagnosis_text(result, grade_id, executed.get(grade_id)),
                HIDDEN_MARKER in source_nb.cells[index].source))


def recorded_grades(config, course: Path, assignment: str, student: str) -> dict[tuple[str, str], tuple[float, float]]:
    """(notebook, test cell) -> (score, points) as nbgrader recorded them in the gradebook."""
    from nbgrader.api import Gradebook

    from grader.grading.autograde.nbgrader_steps import course_directory
    from grader.grading.export.gradebook import points

    found = {}
    with Gradebook(course_directory(config, course, assignment, student).db_url) as gb:
        submission = gb.find_submission(assignment, student)
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                if grade.cell_type == "code":
                    found[(notebook.name, grade.name)] = (points(grade.score), points(grade.max_score))
    return found


def stop_sandboxes() -> None:
    """End this process's zygote (the one ``run_job`` started), so the host's process exits cleanly."""
    from grader.grading.sandbox import zygote_client

    zygote = getattr(zygote_client, "_default_zygote", None)
    if zygote is not None:
        try:
            zygote.close()
        except Exception:  # noqa: BLE001 - it dies with this process anyway
            pass
        zygote_client._default_zygote = None
