"""nbgrader, used in-process for what it does well: sanitising and recording grades.

``IsolatedAutograde`` is nbgrader's own Autograde converter with its Execute step replaced:

- phase "sanitize": nbgrader's sanitising preprocessors only (clear outputs, deduplicate ids,
  restore locked and test cells from the gradebook, check metadata); writes autograded/.
- phase "record": ``ReplayResults`` puts in the outputs that ``grader.grading.autograde.execute`` produced in
  the sandbox, then nbgrader's own grading preprocessors save the scores to the gradebook,
  and ``SaveDiagnoses`` (right after ``SaveAutoGrades``) adds the autograder's diagnosis of
  each failed test to the automatic comment of its exercise's solution cell.

Both run in the trusted grading process; submissions never touch the gradebook.
"""
from __future__ import annotations

import glob
import html
import stat
from pathlib import Path

import nbformat
from nbgrader.converters.base import BaseConverter
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, SaveAutoGrades
from traitlets import List, Unicode

from grader.grading.autograde.execute import error_output
from grader.grading.run import results
from grader.grading.run.results import autograded_tests, cell_digest, file_digest, notebook_digest
from grader.grading.seams import nbgrader as nbgrader_seam

# speed only, after its self-check: one gradebook engine per process (its compiled SQL kept between steps)
nbgrader_seam.install_speed_patches()


class ReplayResults(NbGraderPreprocessor):
    """Fill each code cell's outputs from the sandboxed run (results/<student>/<notebook>.json).

    Fails closed: an autograded test cell keeps its points only if a valid result for this
    learner, notebook and exact cell text says the trusted grader saw it pass; otherwise it
    gets an error output (zero) saying why.
    """

    results_dir = Unicode("", help="Folder of the JSON results written by grader.grading.autograde.execute"
                          ).tag(config=True)
    source_notebook = Unicode("", help="The instructor's notebook the result must have been run against"
                              ).tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        expected = {"assignment": str(info["assignment"]), "student": str(info["student"]),
                    "notebook": str(info["notebook"]), "notebook_digest": notebook_digest(nb)}
        if self.source_notebook:
            expected["source_digest"] = file_digest(Path(self.source_notebook))
        path = Path(self.results_dir) / info["student"] / f"{info['notebook']}.json"
        result, problem = results.load(path, expected)
        resources["grader_result"] = result  # validated, or None: SaveDiagnoses reads it
        tests = autograded_tests(nb)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            key = str(index)
            if result is None:
                outputs = [error_output("NotGraded", f"not graded: {problem}")] if index in tests else []
            elif result["digests"].get(key) != cell_digest(cell.source):
                outputs = [error_output("NotRun", "not run: this cell was not part of the graded run")]
            elif index in tests:
                outputs = test_outputs(result, tests[index], result["cells"].get(key, []))
            else:
                outputs = result["cells"].get(key, [])
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
            cell.execution_count = None
        if result is None:
            self.log.warning("%s/%s: %s", info["student"], info["notebook"], problem)
        return nb, resources


def test_outputs(result: dict, grade_id: str, recorded: list) -> list[dict]:
    """A test cell's outputs: what it printed if it passed, else an error output (zero points)."""
    status = result["tests"].get(grade_id, {}).get("status", "not_run")
    if status == results.PASSED:
        printed = [o for o in recorded if o.get("output_type") == "stream" and o.get("name") == "stdout"]
        if len(printed) == len(recorded):
            return printed
        status = "failed"  # a pass must not carry an error: treat the contradiction as a failure
    errors = [o for o in recorded if o.get("output_type") == "error"]
    if errors and status != results.PASSED:
        return [o for o in recorded if o.get("output_type") in ("stream", "error")]
    message = result["tests"].get(grade_id, {}).get("message") or status
    return [error_output("NotGraded", f"{grade_id}: {message}")]


DIAGNOSIS_HEADING = "Autograder diagnosis:"


def diagnosis_lines(nb, result: dict | None) -> dict[str, list[str]]:
    """grade_id of a solution cell -> one line per failed test of that exercise that has a diagnosis.

    A test belongs to the nearest solution cell before it (the exercise it tests). The line
    names each misconception by its catalogue name and id ("- test_rms_norm: <name>
    [rms.eps_outside_sqrt]"); an id the catalogue does not know is shown alone.
    """
    if not result:
        return {}
    from grader import catalogue

    lines: dict[str, list[str]] = {}
    solution = None
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not isinstance(meta, dict):
            continue
        if meta.get("solution") and isinstance(meta.get("grade_id"), str):
            solution = meta["grade_id"]
        elif cell.cell_type == "code" and meta.get("grade") and solution is not None:
            test = result["tests"].get(str(meta.get("grade_id")), {})
            ids = test.get("misconceptions") or []
            if test.get("status") == results.PASSED or not ids:
                continue
            named = []
            for mid in ids:
                known = catalogue.get(mid)
                named.append(f"{known.name} [{mid}]" if known else mid)
            lines.setdefault(solution, []).append(f"- {meta['grade_id']}: " + "; ".join(named))
    return lines


def with_diagnosis(comment: str | None, lines: list[str]) -> str | None:
    """``comment`` (nbgrader's own automatic comment, e.g. "No response.") with the diagnosis
    appended; a diagnosis already there (a re-grade that skipped SaveAutoGrades) is replaced."""
    kept = (comment or "").split(DIAGNOSIS_HEADING, 1)[0].rstrip()
    if not lines:
        return kept or None
    return "\n\n".join(part for part in (kept, DIAGNOSIS_HEADING + "\n\n" + "\n".join(lines)) if part)


class SaveDiagnoses(NbGraderPreprocessor):
    """Write each failed test's diagnosis into the automatic comment of its exercise's solution cell.

    nbgrader keeps comments on solution and task cells only; the formgrader shows the automatic
    comment in the comment box and the feedback prints it under the cell. Runs after
    SaveAutoGrades, which resets that comment on every grading. Never raises: a diagnosis that
    cannot be written costs no points and stops nothing (the scores are already saved).
    """

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        try:
            lines = diagnosis_lines(nb, resources.get("grader_result"))
            if lines:
                self._save(info, lines)
        except Exception as error:  # noqa: BLE001 - see the class docstring
            self.log.warning("%s/%s: the autograder's diagnosis was not saved (%s: %s)", info.get("student"),
                             info.get("notebook"), type(error).__name__, str(error)[:200])
        return nb, resources

    def _save(self, info: dict, lines: dict[str, list[str]]) -> None:
        from nbgrader.api import Gradebook

        with Gradebook(info["db_url"]) as gradebook:
            try:
                for solution, texts in lines.items():
                    comment = gradebook.find_comment(solution, info["notebook"], info["assignment"], info["student"])
                    comment.auto_comment = with_diagnosis(comment.auto_comment, texts)
                gradebook.db.commit()
            except Exception:
                gradebook.db.rollback()
                raise


def _points(value: float) -> str:
    return f"{value:g} point" + ("" if value == 1 else "s")


def reset_absent(submitted, present_grades: set[str], present_comments: set[str], notebook: str) -> list[str]:
    """Give every grade and comment of the gradebook's ``submitted`` notebook whose cell is not in the notebook
    being recorded a fresh verdict; returns messages for the learner. Does not commit.

    nbgrader's SaveAutoGrades writes only the cells it sees: a graded cell deleted (or renamed) since an earlier
    grading kept that grading's points. An absent cell scores zero: its automatic score is 0, and a manual score
    or extra credit an instructor gave it (to a cell that is no longer there) is removed and named in the message.
    A present cell is left to nbgrader: an instructor's manual score and comment on it are never touched (nbgrader
    flags a re-graded cell that has one for review). An absent cell's automatic comment (nbgrader's "No response.",
    our diagnosis) is cleared; an instructor's own comment text is kept (it gives no points).
    """
    taken, removed = [], []
    for grade in submitted.grades:
        if grade.name in present_grades:
            continue
        had = (grade.manual_score if grade.manual_score is not None else grade.auto_score or 0.0) + \
            (grade.extra_credit or 0.0)
        if had > 0:
            taken.append(f"{grade.name} ({_points(had)})")
        if grade.manual_score is not None or grade.extra_credit:
            removed.append(grade.name)
        if ((grade.auto_score, grade.manual_score, grade.extra_credit, grade.needs_manual_grade)
                != (0.0, None, None, False)):
            grade.auto_score, grade.manual_score, grade.extra_credit, grade.needs_manual_grade = 0.0, None, None, False
    for comment in submitted.comments:
        if comment.name not in present_comments and comment.auto_comment is not None:
            comment.auto_comment = None
    if not taken and not removed:
        return []
    message = (f"{notebook}: graded cell(s) {', '.join(taken or removed)} are missing from this submission: "
               "they score zero, not what an earlier grading gave them")
    if removed:
        message += f" (the instructor's manual score or extra credit of {', '.join(removed)} was removed)"
    return [message + "."]


class ResetAbsentGrades(NbGraderPreprocessor):
    """Right before SaveAutoGrades: every graded cell of this submission's notebook that SaveAutoGrades will not
    see (deleted, renamed, its grading metadata stripped) gets zero (``reset_absent``), so a re-grade gives every
    graded cell a fresh grade. Its messages join this notebook's grading notes and the run's messages."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.messages: list[str] = []

    def preprocess(self, nb, resources):
        from nbgrader import utils
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        grades = {c.metadata.nbgrader["grade_id"] for c in nb.cells if utils.is_grade(c) or utils.is_task(c)}
        comments = {c.metadata.nbgrader["grade_id"] for c in nb.cells if utils.is_solution(c) or utils.is_task(c)}
        with Gradebook(info["db_url"]) as gradebook:
            try:
                submitted = gradebook.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
                told = reset_absent(submitted, grades, comments, str(info["notebook"]))
                gradebook.db.commit()
            except Exception:
                gradebook.db.rollback()
                raise
        if told:
            self.messages += told
            notes = resources.setdefault("grading_notes", [])
            notes += told
            nb.cells = [c for c in nb.cells if c.get("id") != "grading-notes"]
            nb.cells.insert(0, grading_notes_cell(notes))
        return nb, resources


def reset_missing_notebooks(coursedir, assignment: str, student: str) -> list[str]:
    """Zero every grade of a notebook of this submission that has no autograded file to record (its sanitising
    failed): without it nbgrader would keep that notebook's earlier grades. Returns messages."""
    from nbgrader.api import Gradebook, MissingEntry

    folder = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
    messages = []
    with Gradebook(coursedir.db_url, coursedir.course_id) as gradebook:
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return []
        try:
            for submitted in submission.notebooks:
                if not (folder / f"{submitted.name}.ipynb").is_file():
                    messages += reset_absent(submitted, set(), set(), submitted.name)
            gradebook.db.commit()
        except Exception:
            gradebook.db.rollback()
            raise
    return messages


def grading_notes_cell(messages: list[str]) -> nbformat.NotebookNode:
    """A markdown cell for the top of the feedback: the grader's notes for this learner, escaped."""
    items = "\n".join(f"<li>{html.escape(m, quote=True)}</li>" for m in messages)
    cell = nbformat.v4.new_markdown_cell(f"<div class=\"grading-notes\"><strong>Grading notes</strong><ul>\n{items}\n"
                                         f"</ul></div>")
    cell.id = "grading-notes"
    return cell


class AddGradingNotes(NbGraderPreprocessor):
    """Put the grader's notes for this learner (intake, repair, sandbox) at the top of the notebook."""

    notes = List(Unicode(), default_value=[], help="Messages for this learner").tag(config=True)

    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if c.get("id") != "grading-notes"]  # a re-grade replaces them
        resources["grading_notes"] = list(self.notes)  # ResetAbsentGrades may add to them
        if self.notes:
            nb.cells.insert(0, grading_notes_cell(list(self.notes)))
        return nb, resources


def _as_class(pp):
    """An entry of an nbgrader preprocessor list: a class, a dotted name (imported) or an instance."""
    if isinstance(pp, str):
        from traitlets.utils.importstring import import_item

        return import_item(pp)
    return pp


def record_preprocessors(autograde_preprocessors) -> list:
    """The record phase: nbgrader's ``Autograde.autograde_preprocessors`` (nbgrader's defaults, or
    the instructor's ``c.Autograde.autograde_preprocessors``), in its order, with its Execute step
    (or a subclass of it) replaced by ``ReplayResults`` + ``AddGradingNotes``, ``ResetAbsentGrades``
    added right before each ``SaveAutoGrades`` and ``SaveDiagnoses`` right after it. Every other entry,
    the instructor's own included, runs as configured."""
    preprocessors = []
    for pp in map(_as_class, autograde_preprocessors):
        kind = pp if isinstance(pp, type) else type(pp)
        if issubclass(kind, Execute):
            preprocessors += [ReplayResults, AddGradingNotes]
        elif issubclass(kind, SaveAutoGrades):
            preprocessors += [ResetAbsentGrades, pp, SaveDiagnoses]
        else:
            preprocessors.append(pp)
    if ReplayResults not in preprocessors:
        raise ValueError("Autograde.autograde_preprocessors has no Execute step to replace")
    return preprocessors


class IsolatedAutograde(nbgrader_seam.phased_autograde_class()):
    phase = Unicode("sanitize", help="'sanitize' (before execution) or 'record' (after)").tag(config=True)
    results_dir = Unicode("", help="Where grader.grading.autograde.execute wrote its results").tag(config=True)
    source_notebook_dir = Unicode("", help="The instructor's notebooks (source/<assignment>)").tag(config=True)
    notes = List(Unicode(), default_value=[], help="The grader's messages for this learner").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.told: list[str] = []  # the record phase's messages for this learner (ResetAbsentGrades), all notebooks

    def phase_preprocessors(self) -> list:
        """This phase's preprocessors, configured (``PhasedAutograde`` registers them with the exporter)."""
        if self.phase == "sanitize":
            preprocessors = [_as_class(pp) for pp in self.sanitize_preprocessors]
        else:
            preprocessors = record_preprocessors(self.autograde_preprocessors)
        instances = []
        for pp in preprocessors:
            instance = pp(parent=self) if isinstance(pp, type) else pp
            if isinstance(instance, ReplayResults):
                instance.results_dir = self.results_dir
                instance.source_notebook = self._source_notebook
            if isinstance(instance, AddGradingNotes):
                instance.notes = list(self.notes)
            if isinstance(instance, ResetAbsentGrades):
                instance.messages = self.told
            instances.append(instance)
        return instances

    def init_assignment(self, assignment_id: str, student_id: str) -> None:
        if self.phase != "record":
            return super().init_assignment(assignment_id, student_id)
        ignore = self.coursedir.ignore
        # Input and output are one folder here: copying a file (timestamp.txt, the source's
        # extra files) onto itself would delete it first and fail.
        self.coursedir.ignore = [*ignore, "*"]
        try:
            super().init_assignment(assignment_id, student_id)
        finally:
            self.coursedir.ignore = ignore

    def init_destination(self, assignment_id: str, student_id: str) -> bool:
        if self.phase == "record":
            return True  # input and output are the same folder: never delete it
        return super().init_destination(assignment_id, student_id)

    def convert_single_notebook(self, notebook_filename: str) -> None:
        self.set_sanitizing(self.phase == "sanitize")
        name = Path(notebook_filename).name
        self._source_notebook = str(Path(self.source_notebook_dir) / name) if self.source_notebook_dir else ""
        self.register_phase_preprocessors()
        if self.phase == "record":
            # The sanitise phase left nbgrader's read-only (0444) notebook, rewritten here in place:
            # root writes it anyway, an instructor who is not root must make it writable first
            # (nbgrader's set_permissions makes it 0444 again afterwards).
            path = Path(notebook_filename)
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        BaseConverter.convert_single_notebook(self, notebook_filename)


def course_directory(config, root: Path, assignment: str, student: str):
    """nbgrader's CourseDirectory for one learner's submission of one assignment."""
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    # nbgrader globs with student_id, then reads the id back from the matched path: escaped, a
    # learner folder named "*" or "[ab]" matches itself only, never every other learner's folder.
    coursedir.root, coursedir.assignment_id, coursedir.student_id = str(root), assignment, glob.escape(student)
    return coursedir


def gradebook_has_assignment(config, root: Path, assignment: str) -> bool:
    """Whether the course's gradebook records ``assignment`` (nbgrader generate_assignment put it there).

    Read only: a missing sqlite file is not created. Without the record nbgrader cannot sanitise or record any
    learner. A gradebook that cannot be read counts as having it: the per-learner steps then say what is wrong.
    """
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.exc import SQLAlchemyError

    db_url = course_directory(config, root, assignment, "").db_url
    if db_url.startswith("sqlite:///") and not Path(db_url.removeprefix("sqlite:///")).is_file():
        return False
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            if "assignment" not in inspect(connection).get_table_names():
                return False
            query = text("SELECT 1 FROM assignment WHERE name = :name")
            return connection.execute(query, {"name": assignment}).first() is not None
    except SQLAlchemyError:
        return True
    finally:
        engine.dispose()


def run_phase(config, root: Path, assignment: str, student: str, phase: str, submitted_dir: str,
              results_dir: str = "", notes: list[str] = ()) -> list[str]:
    """Run one phase for one student's submission; raises on nbgrader errors. Returns the record phase's
    messages for the learner: graded cells missing from the submission whose earlier points were taken back."""
    coursedir = course_directory(config, root, assignment, student)
    coursedir.submitted_directory = submitted_dir
    converter = IsolatedAutograde(coursedir=coursedir, config=config)
    converter.phase = phase
    converter.results_dir = results_dir
    converter.source_notebook_dir = str(Path(root) / "source" / assignment)
    converter.notes = [str(n) for n in notes]
    converter.force = True
    converter.set_sanitizing(phase == "sanitize")  # selects the input folder: submitted or autograded
    if phase == "record":
        converter.told += reset_missing_notebooks(coursedir, assignment, student)
    converter.start()
    return list(converter.told)


def generate_feedback(config, root: Path, assignment: str, student: str) -> None:
    """nbgrader's GenerateFeedback (HTML, hidden tests removed) for one learner; raises on nbgrader errors.
    Only the notebooks' pages (and the files release_feedback reads) reach feedback/: never a learner's
    own files (``grader.grading.feedback.pages``)."""
    from grader.grading.feedback.pages import converter_class

    converter = converter_class()(coursedir=course_directory(config, root, assignment, student), config=config)
    converter.force = True
    converter.start()
