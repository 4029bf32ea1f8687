"""GradeConfig (grader.grading.config): one place for the grading settings, the nbgrader way.

Precedence default < nbgrader_config.py < command line; every trait has help and is listed by
``python -m grader grade --help-all``; the cell timeout has one definition; the record phase's
preprocessors follow nbgrader's (or the instructor's) ``Autograde.autograde_preprocessors``.
"""
import subprocess
import sys
from pathlib import Path

import pytest
from nbconvert.preprocessors import Preprocessor
from nbgrader.preprocessors import Execute, SaveAutoGrades
from traitlets.config import Config

from grader.grading import cli
from grader.grading.config import GradeConfig, grade_config
from tests.conftest import ROOT, subprocess_env


class MarkCells(Preprocessor):
    """An instructor's own preprocessor, configured in nbgrader_config.py."""

    def preprocess(self, nb, resources):
        nb.metadata["marked"] = True
        return nb, resources


class CustomExecute(Execute):
    """An instructor's subclass of nbgrader's Execute: replaced by the replay like Execute."""


def _course(tmp_path: Path, text: str) -> Path:
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n" + text)
    return tmp_path


def test_default_then_config_file_then_command_line(tmp_path, monkeypatch):
    monkeypatch.delenv("LNCOURSE_ISOLATION", raising=False)
    empty = grade_config(tmp_path)
    assert (empty.cell_timeout, empty.notebook_timeout, empty.jobs, empty.isolation, empty.use_cache) == \
        (120.0, 600.0, 0, "auto", True)
    assert empty.cache_folder(tmp_path) == tmp_path / "build" / "grading-cache"
    course = _course(tmp_path, "c.GradeConfig.cell_timeout = 33\nc.GradeConfig.jobs = 3\n"
                               "c.GradeConfig.cache_dir = '/srv/cache'\n")
    from_file = grade_config(course)
    assert (from_file.cell_timeout, from_file.jobs, from_file.notebook_timeout) == (33.0, 3, 600.0)
    assert from_file.cache_folder(course) == Path("/srv/cache")
    given = grade_config(course, {"cell_timeout": 7.0, "jobs": None})  # None: the option was not given
    assert (given.cell_timeout, given.jobs) == (7.0, 3)
    traitlets_style = grade_config(course, {}, ["--GradeConfig.cell_timeout=9", "--GradeConfig.use_cache=False"])
    assert (traitlets_style.cell_timeout, traitlets_style.use_cache) == (9.0, False)
    both = grade_config(course, {"cell_timeout": 5.0}, ["--GradeConfig.cell_timeout=9"])
    assert both.cell_timeout == 5.0  # the named option is the most specific
    with pytest.raises(ValueError):
        grade_config(course, {"no_such_setting": 1})
    with pytest.raises(ValueError, match="cell_timeout must be a positive number"):
        grade_config(course, {"cell_timeout": -1.0})


def test_the_environment_variable_is_only_the_isolation_default(tmp_path, monkeypatch):
    monkeypatch.setenv("LNCOURSE_ISOLATION", "basic")
    assert grade_config(tmp_path).isolation == "basic"
    course = _course(tmp_path, "c.GradeConfig.isolation = 'userns'\n")
    assert grade_config(course).isolation == "userns"
    assert grade_config(course, {"isolation": "user"}).isolation == "user"


def test_the_command_line_reaches_grade(monkeypatch, tmp_path):
    seen = {}
    # --no-cache would start the warm processes (two imports of torch) beside a grade() that never runs
    monkeypatch.setattr("grader.grading.slots.slot_pool.prestart", lambda: None)
    monkeypatch.setattr("grader.grading.run.pipeline.grade",
                        lambda assignment, **kwargs: seen.update(kwargs, assignment=assignment) or 0)
    assert cli.main(["grade", "03_backward", "--root", str(tmp_path), "--timeout", "11", "--jobs", "2", "--no-cache",
                     "--cache-dir", "/tmp/c", "--GradeConfig.notebook_timeout=99"]) == 0
    settings = grade_config(tmp_path, {"jobs": seen["jobs"], "cell_timeout": seen["cell_seconds"],
                                       "notebook_timeout": seen["notebook_seconds"], "isolation": seen["isolation"],
                                       "cache_dir": seen["cache_dir"], "use_cache": seen["use_cache"]}, seen["argv"])
    assert (settings.cell_timeout, settings.jobs, settings.use_cache, settings.cache_dir, settings.notebook_timeout) \
        == (11.0, 2, False, "/tmp/c", 99.0)
    seen.clear()
    cli.main(["grade", "03_backward"])
    assert seen["cell_seconds"] is None and seen["use_cache"] is None and seen["argv"] == []  # the file decides
    with pytest.raises(SystemExit):
        cli.main(["grade", "03_backward", "--Execute.timeout=3"])  # only GradeConfig settings here


def test_sandboxes_are_warmed_up_front_only_when_a_notebook_may_execute(monkeypatch, tmp_path):
    """A class graded before is mostly cached: starting the warm processes (torch imported twice)
    would cost seconds of CPU beside nbgrader's import, for nothing."""
    started = []
    monkeypatch.setattr("grader.grading.slots.slot_pool.prestart", lambda: started.append(True))
    monkeypatch.setattr("grader.grading.run.pipeline.grade", lambda assignment, **kwargs: 0)

    def warmed(*options):
        started.clear()
        cli.main(["grade", "03_backward", "04_rmsnorm", "--root", str(tmp_path), *options])
        return bool(started)

    for student in ["ada", "bob"]:
        (tmp_path / "submitted" / student / "03_backward").mkdir(parents=True)
        (tmp_path / "autograded" / student / "03_backward").mkdir(parents=True)
    assert not warmed() and warmed("--no-cache")
    assert not warmed("--scheduler", "tcp://127.0.0.1:1")  # Dask workers have sandboxes of their own
    (tmp_path / "submitted" / "cy" / "04_rmsnorm").mkdir(parents=True)  # never graded
    assert warmed() and not warmed("--scheduler", "tcp://127.0.0.1:1")
    # a scheduler named on the command line, or set in the course's nbgrader_config.py (read as text)
    assert not warmed("--GradeConfig.scheduler=tcp://127.0.0.1:1") and warmed("--GradeConfig.scheduler=")
    config = tmp_path / "nbgrader_config.py"
    config.write_text("c = get_config()\n# c.GradeConfig.scheduler = 'tcp://127.0.0.1:1'\n"
                      "c.GradeConfig.scheduler_timeout = 5\n")
    assert warmed()
    config.write_text("c = get_config()\nc.GradeConfig.scheduler = 'tcp://127.0.0.1:1'  # the department's cluster\n")
    assert not warmed() and warmed("--scheduler", "")  # '' on the command line: the local pool after all
    config.write_text("c = get_config()\nc.GradeConfig.scheduler = ''\n")
    assert warmed()


@pytest.mark.slow  # subprocesses of the command line
def test_every_setting_has_help_and_help_all_lists_it():
    traits = GradeConfig.class_traits(config=True)
    assert {"jobs", "cell_timeout", "notebook_timeout", "isolation", "cache_dir", "use_cache",
            "scheduler"} <= set(traits)
    assert all(len(trait.help) > 20 for trait in traits.values()), [n for n, t in traits.items() if len(t.help) <= 20]
    shown = subprocess.run([sys.executable, "-m", "grader", "grade", "--help-all"], capture_output=True, text=True,
                           env=subprocess_env(), timeout=120)
    assert shown.returncode == 0, shown.stderr
    for name in traits:
        assert f"--GradeConfig.{name}=" in shown.stdout


def test_the_cell_timeout_has_one_definition(tmp_path, monkeypatch):
    from traitlets.config.loader import PyFileConfigLoader

    from grader.grading.run.course_setup import sandbox_options

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert config.Execute.timeout == config.GradeConfig.cell_timeout  # plain nbgrader gets the same limit
    settings = GradeConfig(config=Config({"GradeConfig": {"cell_timeout": 33.0, "notebook_timeout": 44.0,
                                                          "isolation": "basic"}}))
    options = sandbox_options(tmp_path, settings)
    assert options["limits"] == {"cell_seconds": 33.0, "notebook_seconds": 44.0} and options["mode"] == "basic"
    # the command line sets nothing of its own: with no --timeout, the course's setting (else the trait's) wins
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text("c = get_config()\nc.GradeConfig.cell_timeout = 77.0\n")
    seen = {}

    def command(args, extra):  # what main hands on, instead of grading
        seen.update(vars(args))
        return 0

    monkeypatch.setattr(cli, "_command", command)
    assert cli.main(["grade", "03_backward", "--root", str(course)]) == 0
    timeout = seen["timeout"]
    assert timeout is None
    assert grade_config(course, {"cell_timeout": timeout}).cell_timeout == 77.0
    assert grade_config(tmp_path, {"cell_timeout": timeout}).cell_timeout == GradeConfig.cell_timeout.default_value


def test_the_record_phase_follows_the_configured_autograde_preprocessors(tmp_path):
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.preprocessors import AssignLatePenalties, LimitOutput

    from grader.grading.autograde.nbgrader_steps import (
        AddGradingNotes,
        IsolatedAutograde,
        ReplayResults,
        ResetAbsentGrades,
        SaveDiagnoses,
        record_preprocessors,
    )

    config = Config()
    config.Autograde.autograde_preprocessors = [CustomExecute, MarkCells, LimitOutput, SaveAutoGrades,
                                                "nbgrader.preprocessors.AssignLatePenalties"]
    converter = IsolatedAutograde(coursedir=CourseDirectory(config=config, root=str(tmp_path)), config=config)
    assert record_preprocessors(converter.autograde_preprocessors) == [
        ReplayResults, AddGradingNotes, MarkCells, LimitOutput, ResetAbsentGrades, SaveAutoGrades, SaveDiagnoses,
        AssignLatePenalties]
    converter.phase, converter._source_notebook = "record", ""
    converter.exporter = converter.exporter_class(parent=converter, config=converter.config)
    converter.register_phase_preprocessors()
    assert [type(p) for p in converter.exporter._preprocessors] == [
        ReplayResults, AddGradingNotes, MarkCells, LimitOutput, ResetAbsentGrades, SaveAutoGrades, SaveDiagnoses,
        AssignLatePenalties]
    default = IsolatedAutograde(coursedir=CourseDirectory(root=str(tmp_path)))
    names = [p.__name__ for p in record_preprocessors(default.autograde_preprocessors)]
    assert names[:2] == ["ReplayResults", "AddGradingNotes"] and "Execute" not in names
    assert names.index("SaveDiagnoses") == names.index("SaveAutoGrades") + 1
    config.Autograde.autograde_preprocessors = [MarkCells, SaveAutoGrades]
    with pytest.raises(ValueError, match="no Execute step"):
        record_preprocessors(IsolatedAutograde(coursedir=CourseDirectory(root=str(tmp_path)), config=config)
                             .autograde_preprocessors)


class BreakNotebook(Preprocessor):
    """A preprocessor that leaves an invalid notebook (a cell without its source)."""

    def preprocess(self, nb, resources):
        del nb.cells[0]["source"]
        return nb, resources


def test_notebooks_are_validated_once_per_step_and_still_refused_when_invalid(tmp_path):
    import nbformat
    from nbconvert.exporters import NotebookExporter

    from grader.grading.run.course_setup import load_config

    config = load_config(_course(tmp_path, ""))
    assert config.Exporter.optimistic_validation is True  # after the last preprocessor, not after each
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    exporter = NotebookExporter(config=config)
    exporter.register_preprocessor(BreakNotebook(), enabled=True)
    with pytest.raises(nbformat.ValidationError):
        exporter.from_notebook_node(nb)
    kept = load_config(_course(tmp_path, "c.NotebookExporter.optimistic_validation = False\n"))
    assert "optimistic_validation" not in kept.Exporter  # the instructor's choice stands


def test_an_unknown_isolation_mode_stops_the_run_before_any_sandbox(tmp_path, monkeypatch, capsys):
    from grader.grading.run import pipeline
    course = _course(tmp_path, "")
    for folder in ["submitted/ada/03_backward", "release/03_backward", "source/03_backward"]:
        (course / folder).mkdir(parents=True)
    (course / "source" / "03_backward" / "03_backward.ipynb").write_text("{}")

    def no_run(*args, **kwargs):
        raise AssertionError("a grading run (pools, sandboxes) was started")

    monkeypatch.setattr(pipeline, "GradingRun", no_run)
    assert pipeline.grade("03_backward", root=course, isolation="usr") == 2
    err = capsys.readouterr().err
    assert "unknown isolation mode 'usr': use one of auto, user, userns, basic" in err and "Nothing was scored" in err
    assert not (course / "build" / "grades.csv").exists()


def test_the_course_markdown_is_rendered_once_per_process_and_unchanged():
    """The feedback's markdown2html, as the course's config names it, memoises each (source, attachments): the same
    HTML, rendered once."""
    from traitlets.config.loader import PyFileConfigLoader
    from traitlets.utils.importstring import import_item

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    markdown2html = import_item(config.HTMLExporter.filters["markdown2html"])  # as nbconvert resolves it
    memo = markdown2html.__globals__["_rendered_markdown"]
    memo.clear()
    cell = {"cell": {"attachments": {}}}
    source = "# Title\n\nMaths $a<0$ and <script>alert(1)</script> [x](javascript:alert(1))"
    first = markdown2html(cell, source)
    assert "<script>" not in first and "javascript:" not in first and "$a&lt;0$" in first
    (key,) = memo
    memo[key] = "from the memo"
    assert markdown2html(cell, source) == "from the memo"
    attached = {"cell": {"attachments": {"a.png": {"image/png": "iVBORw0KGgo="}}}}
    assert markdown2html(attached, source) == first  # another key: rendered, not the memo's
    assert len(memo) == 2
    markdown2html(cell, "word " * 30_000)  # a page too big to keep
    assert len(memo) == 2


def test_the_course_config_holds_settings_only_and_every_class_it_names_imports():
    """nbgrader_config.py is the course's settings: no class or function is defined there (the preprocessors and
    filters live in grader/grading/feedback/), and every dotted name it configures resolves."""
    import ast

    from traitlets.config.loader import PyFileConfigLoader
    from traitlets.utils.importstring import import_item

    tree = ast.parse((ROOT / "nbgrader_config.py").read_text())
    defined = [node.name for node in ast.walk(tree) if isinstance(node, (ast.ClassDef, ast.FunctionDef))]
    assert not defined, f"nbgrader_config.py defines {defined}: move them into the grader package"
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    named = [*config.GenerateFeedback.preprocessors, *config.HTMLExporter.preprocessors,
             *config.HTMLExporter.filters.values()]
    assert len(named) == 5
    for name in named:
        assert callable(import_item(name)), name
