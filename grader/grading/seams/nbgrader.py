"""nbgrader's non-public parts the grader relies on, and nothing else of nbgrader's beyond its public API.

Correctness depends on these (a failed self-check refuses to grade):

- **autograde-phases**: ``IsolatedAutograde`` runs nbgrader's Autograde converter one phase at a time (sanitise
  before the sandbox, record after). nbgrader has no public way to run one phase: its converter toggles the
  private ``_sanitizing`` flag (which picks the input folder) and rebuilds the exporter's private
  ``_preprocessors`` list in ``_init_preprocessors``. ``PhasedAutograde`` below is the only code that touches
  them; the phases' preprocessor lists themselves are nbgrader's public traits
  (``Autograde.sanitize_preprocessors``, ``autograde_preprocessors``).
- **feedback-copy**: the feedback converter copies only the grader's own files into feedback/
  (``grader.grading.feedback.pages``); it finds the two folders with nbgrader's private ``_format_source`` and
  ``_format_dest`` (``feedback_folders``), the same paths nbgrader's own copy uses.

Speed only (a failed self-check switches the patch off):

- **gradebook-engine**: one SQLAlchemy engine per database per process, and ``create_all`` skipped when every
  table exists (``grader.grading.autograde.gradebook_engines``); replaces the ``create_engine`` and
  ``Base.metadata.create_all`` that ``nbgrader.api`` calls.
(A patch of nbgrader's cell-metadata validation, ``schema_cache``, was deleted: ``bench-grade --compare-patches``
measured it worth less than 5% of a class run.)
"""
from __future__ import annotations

import inspect
import os

from grader.grading.seams import CORRECTNESS, SPEED, Patch, enabled, expect, expect_signature

# --- autograde-phases ------------------------------------------------------------------------------------------


def check_autograde_phases() -> None:
    from nbconvert.exporters import Exporter
    from nbgrader.converters.autograde import Autograde
    from nbgrader.converters.base import BaseConverter
    from nbgrader.coursedir import CourseDirectory

    expect_signature(Autograde._init_preprocessors, "self")
    expect_signature(Autograde.init_assignment, "self", "assignment_id", "student_id")
    expect_signature(Autograde.init_destination, "self", "assignment_id", "student_id")
    expect_signature(BaseConverter.convert_single_notebook, "self", "notebook_filename")
    expect_signature(Exporter.register_preprocessor, "self", "preprocessor", "enabled")
    for trait in ("sanitize_preprocessors", "autograde_preprocessors", "exporter_class"):
        expect(Autograde.class_traits().get(trait) is not None, f"Autograde has no trait {trait}")
    expect("self._sanitizing" in inspect.getsource(Autograde._init_preprocessors),
           "Autograde._init_preprocessors no longer reads _sanitizing")
    # the flag picks the input folder: submitted/ while sanitising, autograded/ while recording
    coursedir = CourseDirectory(submitted_directory="in-submitted", autograded_directory="in-autograded")
    converter = Autograde(coursedir=coursedir)
    converter._sanitizing = True
    expect(converter._input_directory == "in-submitted", "Autograde._sanitizing no longer picks submitted/")
    converter._sanitizing = False
    expect(converter._input_directory == "in-autograded", "Autograde._sanitizing no longer picks autograded/")
    exporter = Exporter()
    expect(isinstance(getattr(exporter, "_preprocessors", None), list), "Exporter._preprocessors is not a list")


def phased_autograde_class():
    """nbgrader's Autograde, run one phase at a time: a subclass sets ``phase`` and gives
    ``phase_preprocessors()`` (classes or instances, in order)."""
    from nbgrader.converters.autograde import Autograde

    class PhasedAutograde(Autograde):
        def phase_preprocessors(self) -> list:
            raise NotImplementedError

        def set_sanitizing(self, sanitizing: bool) -> None:
            """Which folder nbgrader reads: submitted/ (True) or autograded/ (False)."""
            self._sanitizing = sanitizing

        def _init_preprocessors(self) -> None:
            self.exporter._preprocessors = []
            for pp in self.phase_preprocessors():
                self.exporter.register_preprocessor(pp)

        def register_phase_preprocessors(self) -> None:
            """The exporter's preprocessors: this phase's only (``phase_preprocessors``)."""
            self._init_preprocessors()

    return PhasedAutograde


# --- feedback-copy ---------------------------------------------------------------------------------------------


def check_feedback_copy() -> None:
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    for name in ("init_assignment", "set_permissions"):
        expect_signature(getattr(GenerateFeedback, name), "self", "assignment_id", "student_id")
    expect_signature(GenerateFeedback.convert_single_notebook, "self", "notebook_filename")
    for name in ("_format_source", "_format_dest"):
        expect_signature(getattr(GenerateFeedback, name), "self", "assignment_id", "student_id")
    coursedir = CourseDirectory(root="/course", autograded_directory="ag", feedback_directory="fb")
    source, dest = feedback_folders(GenerateFeedback(coursedir=coursedir), "a1", "ada")
    expect((source, dest) == (os.path.join("/course", "ag", "ada", "a1"), os.path.join("/course", "fb", "ada", "a1")),
           f"GenerateFeedback's folders are {source!r} and {dest!r}")


def feedback_folders(converter, assignment_id: str, student_id: str) -> tuple[str, str]:
    """(autograded/<student>/<assignment>, feedback/<student>/<assignment>) as nbgrader's converter formats them."""
    return converter._format_source(assignment_id, student_id), converter._format_dest(assignment_id, student_id)


# --- gradebook-engine ------------------------------------------------------------------------------------------


def check_gradebook_engine() -> None:
    from nbgrader import api

    expect(callable(getattr(api, "create_engine", None)), "nbgrader.api has no create_engine")
    expect("create_engine(" in inspect.getsource(api.Gradebook.__init__), "Gradebook() no longer calls create_engine")
    expect("Base.metadata.create_all(" in inspect.getsource(api.Gradebook.__init__),
           "Gradebook() no longer calls Base.metadata.create_all")
    expect_signature(type(api.Base.metadata).create_all, "self", "bind")


def install_gradebook_engine() -> bool:
    """Point nbgrader's ``create_engine`` and ``create_all`` at ``grader.grading.autograde.gradebook_engines``
    (idempotent); False where the patch is off."""
    from nbgrader import api

    from grader.grading.autograde import gradebook_engines
    if api.create_engine is gradebook_engines.cached_create_engine:
        return True
    if not enabled(GRADEBOOK_ENGINE):
        return False
    gradebook_engines.original["create_engine"] = api.create_engine
    gradebook_engines.original["create_all"] = api.Base.metadata.create_all
    api.create_engine = gradebook_engines.cached_create_engine
    api.Base.metadata.create_all = gradebook_engines.create_all_if_missing
    os.register_at_fork(after_in_child=gradebook_engines.forget_in_child)
    return True


AUTOGRADE_PHASES = Patch("autograde-phases", "nbgrader", CORRECTNESS,
                         "running Autograde's sanitise and record phases apart (hidden tests kept trusted, results "
                         "validated)", check_autograde_phases)
FEEDBACK_COPY = Patch("feedback-copy", "nbgrader", CORRECTNESS,
                      "keeping learner files out of feedback/", check_feedback_copy)
GRADEBOOK_ENGINE = Patch("gradebook-engine", "nbgrader", SPEED, "one gradebook engine per process",
                         check_gradebook_engine)
PATCHES = [AUTOGRADE_PHASES, FEEDBACK_COPY, GRADEBOOK_ENGINE]


def install_speed_patches() -> None:
    install_gradebook_engine()
