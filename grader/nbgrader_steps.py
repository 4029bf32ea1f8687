"""nbgrader, used in-process for what it does well: sanitising and recording grades.

``IsolatedAutograde`` is nbgrader's own Autograde converter with its Execute step replaced:

- phase "sanitize": nbgrader's sanitising preprocessors only (clear outputs, deduplicate ids,
  restore locked and test cells from the gradebook, check metadata); writes autograded/.
- phase "record": ``ReplayResults`` puts in the outputs that ``grader.execute`` produced in
  the sandbox, then nbgrader's own grading preprocessors save the scores to the gradebook.

Both run in the trusted grading process; submissions never touch the gradebook.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.converters.autograde import Autograde
from nbgrader.converters.base import BaseConverter
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput,
                                    NbGraderPreprocessor, SaveAutoGrades)
from traitlets import Unicode

from grader.execute import cell_digest, error_output


class ReplayResults(NbGraderPreprocessor):
    """Fill each code cell's outputs from the sandboxed run (results/<student>/<notebook>.json)."""

    results_dir = Unicode("", help="Folder of the JSON results written by grader.execute").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        path = Path(self.results_dir) / info["student"] / f"{info['notebook']}.json"
        results = json.loads(path.read_text()) if path.exists() else {"cells": {}, "digests": {}, "notes": []}
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            key = str(index)
            if results["digests"].get(key) != cell_digest(cell.source):
                outputs = [error_output("NotRun", "not run: this cell was not part of the graded run")]
            else:
                outputs = results["cells"].get(key, [])
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
            cell.execution_count = None
        return nb, resources


class IsolatedAutograde(Autograde):
    phase = Unicode("sanitize", help="'sanitize' (before execution) or 'record' (after)").tag(config=True)
    results_dir = Unicode("", help="Where grader.execute wrote its results").tag(config=True)

    def _init_preprocessors(self) -> None:
        self.exporter._preprocessors = []
        if self.phase == "sanitize":
            preprocessors = self.sanitize_preprocessors
        else:
            preprocessors = [ReplayResults, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
                             AssignLatePenalties, CheckCellMetadata]
        for pp in preprocessors:
            instance = pp(parent=self)
            if isinstance(instance, ReplayResults):
                instance.results_dir = self.results_dir
            self.exporter.register_preprocessor(instance)

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
        self._sanitizing = self.phase == "sanitize"
        self._init_preprocessors()
        BaseConverter.convert_single_notebook(self, notebook_filename)


def course_directory(config, root: Path, assignment: str, student: str):
    """nbgrader's CourseDirectory for one learner's submission of one assignment."""
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    coursedir.root, coursedir.assignment_id, coursedir.student_id = str(root), assignment, student
    return coursedir


def run_phase(config, root: Path, assignment: str, student: str, phase: str, submitted_dir: str,
              results_dir: str = "") -> None:
    """Run one phase for one student's submission; raises on nbgrader errors."""
    coursedir = course_directory(config, root, assignment, student)
    coursedir.submitted_directory = submitted_dir
    converter = IsolatedAutograde(coursedir=coursedir, config=config)
    converter.phase = phase
    converter.results_dir = results_dir
    converter.force = True
    converter._sanitizing = phase == "sanitize"  # selects the input folder: submitted or autograded
    converter.start()


def generate_feedback(config, root: Path, assignment: str, student: str) -> None:
    """nbgrader's GenerateFeedback (HTML, hidden tests removed) for one learner; raises on nbgrader errors."""
    from nbgrader.converters import GenerateFeedback

    converter = GenerateFeedback(coursedir=course_directory(config, root, assignment, student), config=config)
    converter.force = True
    converter.start()
