"""The generated notebooks are up to date, deterministic, and leak nothing.

The self-study edition (notebooks/) also carries, after each test cell, an "extra checks" cell
with that cell's hidden cases: they pass on the solutions, fail on the stubs, and diagnose
what only the hidden cases catch, exactly as the graded version would.
"""
import contextlib
import io
import json
import os
import re
import shutil
import subprocess

import nbformat
import pytest

from grader.compare import CheckFailed
from grader.course.build import (
    EXTRA_CHECKS_HEADER,
    EXTRA_CHECKS_PREFIX,
    HIDDEN_TESTS,
    SOLUTION_MARKER,
    build,
    hidden_tests,
    is_extra_checks,
    script_to_notebook,
)
from tests.conftest import ASSIGNMENTS, ROOT
from tests.diagnosis_harness import compiled

GENERATED = ["release", "notebooks", "solutions"]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """A copy of the committed tree, rebuilt from source/ in a temporary folder."""
    copy = tmp_path_factory.mktemp("course")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        if (ROOT / name).exists():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    for folder in GENERATED:
        shutil.rmtree(copy / folder, ignore_errors=True)
    build(copy)
    return copy


def generated_files(root):
    return sorted(str(p.relative_to(root)) for folder in GENERATED for p in (root / folder).rglob("*") if p.is_file())


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
def test_rebuild_reproduces_every_generated_file(rebuilt):
    assert generated_files(rebuilt) == generated_files(ROOT), "generated files differ: run `make build` and commit"
    for name in generated_files(ROOT):
        assert (rebuilt / name).read_text() == (ROOT / name).read_text(), f"{name} is stale: run `make build`"


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
def test_release_contains_only_notebooks(rebuilt):
    for assignment in ASSIGNMENTS:
        files = sorted(p.name for p in (rebuilt / "release" / assignment).iterdir())
        assert files == [f"{assignment}.ipynb"], f"nbgrader copied extra files into release/{assignment}: {files}"


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
def test_the_new_gradebook_is_stamped_with_the_head_alembic_reports(rebuilt):
    """The build reads nbgrader's migration head in process (grader.course.release_batch); the stamp
    is what nbgrader's own `alembic heads` child process reports, so nbgrader's upgrades still apply."""
    import sqlite3

    from nbgrader.api import get_alembic_version

    from grader.course.build import tool_environment

    with sqlite3.connect(rebuilt / "build" / "gradebook.db") as db:
        stamped = db.execute("SELECT version_num FROM alembic_version").fetchall()
    path = os.environ["PATH"]
    os.environ["PATH"] = tool_environment()["PATH"]  # `alembic` is the venv's script
    try:
        reported = get_alembic_version()
    finally:
        os.environ["PATH"] = path
    assert stamped == [(reported,)]


def solution_and_hidden_lines(assignment, root=ROOT):
    """Lines of code learners must not see: solution bodies and hidden tests."""
    source = (root / "source" / assignment / f"{assignment}.py").read_text()
    solutions = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, re.S)
    hidden = [m.group(0) for m in HIDDEN_TESTS.finditer(source)]
    keep = lambda line: len(line.strip()) > 12 and not line.strip().startswith("#")  # noqa: E731 - a one-line filter
    return ([line.strip() for block in solutions for line in block.splitlines() if keep(line)],
            [line.strip() for block in hidden for line in block.splitlines() if keep(line)
             and "HIDDEN TESTS" not in line])


def code(cells) -> str:
    return "\n".join(c.source for c in cells if c.cell_type == "code")


def assert_editions_leak_nothing(root, assignment):
    """release/: no solution, no hidden test. notebooks/: hidden tests only in its extra-checks cells (all of
    them there), solutions never. solutions/: no hidden test, no marker."""
    solution_lines, hidden_lines = solution_and_hidden_lines(assignment, root)
    assert hidden_lines, "every assignment should have hidden tests"
    release = nbformat.read(root / "release" / assignment / f"{assignment}.ipynb", as_version=4).cells
    self_study = nbformat.read(root / "notebooks" / f"{assignment}.ipynb", as_version=4).cells
    extra = [c for c in self_study if is_extra_checks(c)]
    assert extra, f"notebooks/{assignment}.ipynb has no extra-checks cell: run `make build`"
    assert not [c for c in release if is_extra_checks(c) or c.id.startswith(EXTRA_CHECKS_PREFIX)]
    for name, text, forbidden in [
        (f"release/{assignment}", code(release), solution_lines + hidden_lines),
        (f"notebooks/{assignment} outside its extra checks", code(c for c in self_study if not is_extra_checks(c)),
         solution_lines + hidden_lines),
        (f"notebooks/{assignment}'s extra checks", code(extra), solution_lines),
    ]:
        for line in forbidden:
            assert line not in text, f"{name} leaks: {line}"
        assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text, f"{name} keeps a marker"
    for line in hidden_lines:
        assert line in code(extra), f"notebooks/{assignment}'s extra checks miss a hidden test: {line}"
    solved_cells = nbformat.read(root / "solutions" / f"{assignment}.ipynb", as_version=4).cells
    solved = "\n".join(c.source for c in solved_cells)
    for line in hidden_lines:
        assert line not in solved, f"solutions/{assignment}.ipynb keeps a hidden test: {line}"
    assert not SOLUTION_MARKER.search(solved)
    assert not [c for c in solved_cells if c.id.startswith(EXTRA_CHECKS_PREFIX)]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_solutions_or_hidden_tests_leak(assignment):
    """The committed editions."""
    assert_editions_leak_nothing(ROOT, assignment)


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_rebuilt_editions_leak_nothing(rebuilt, assignment):
    """What build() makes of today's source/."""
    assert_editions_leak_nothing(rebuilt, assignment)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_cell_ids_are_stable_and_outputs_empty(assignment):
    for path in [ROOT / "release" / assignment / f"{assignment}.ipynb", ROOT / "notebooks" / f"{assignment}.ipynb",
                 ROOT / "solutions" / f"{assignment}.ipynb"]:
        nb = json.loads(path.read_text())
        ids = [c["id"] for c in nb["cells"]]
        assert len(ids) == len(set(ids))
        for cell in nb["cells"]:
            grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
            assert grade_id is None or cell["id"] == grade_id
            assert not cell.get("outputs"), f"{path} stores outputs"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_self_study_edition_starts_with_colab_badge_and_setup(assignment):
    cells = nbformat.read(ROOT / "notebooks" / f"{assignment}.ipynb", as_version=4).cells
    assert "colab.research.google.com/github/" in cells[0].source and f"notebooks/{assignment}.ipynb" in cells[0].source
    assert '"google.colab" in sys.modules' in cells[1].source


# ------------------------------------------------------------------ the self-study edition's extra checks
FRONT = ("colab-badge", "colab-setup", "solution-sketches")
def editions(root, assignment):
    source = script_to_notebook(root / "source" / assignment / f"{assignment}.py")
    release = nbformat.read(root / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    self_study = nbformat.read(root / "notebooks" / f"{assignment}.ipynb", as_version=4)
    return source, release, self_study


def nbgrader_meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_self_study_edition_is_the_release_plus_front_cells_and_extra_checks(rebuilt, assignment):
    """Every release cell, unchanged and in order (but its links: release/ puts each assignment in a folder of its
    own, so it rewrites them, ``release_links``); after each test cell with hidden tests, its extra checks."""
    import copy

    from grader.course.build import release_links

    source, release, self_study = editions(rebuilt, assignment)
    cells = self_study.cells
    assert [c.id for c in cells[:len(FRONT)]] == list(FRONT)
    body = cells[len(FRONT):]
    kept = copy.deepcopy(self_study)
    kept.cells = [c for c in body if not is_extra_checks(c)]
    assert release_links(kept).cells == release.cells
    hidden = hidden_tests(source)
    assert hidden, f"{assignment} has no hidden tests"
    extra_ids = [c.id for c in body if is_extra_checks(c)]
    assert extra_ids == [EXTRA_CHECKS_PREFIX + grade_id for grade_id in hidden], "one extra-checks cell per test cell"
    for index, cell in enumerate(body):
        if not is_extra_checks(cell):
            continue
        before = body[index - 1]
        grade_id = cell.id[len(EXTRA_CHECKS_PREFIX):]
        assert before.id == grade_id and nbgrader_meta(before).get("grade"), f"{cell.id} does not follow {grade_id}"
        assert cell.source == EXTRA_CHECKS_HEADER + hidden[grade_id]
        assert "nbgrader" not in cell.metadata and not cell.outputs, f"{cell.id}: not a plain, empty code cell"
        assert cell.metadata["editable"] is False and cell.metadata["deletable"] is False, f"{cell.id} is not locked"
        compile(cell.source, cell.id, "exec")


def test_hidden_tests_are_read_whole_and_must_sit_at_the_top_level():
    cell = nbformat.v4.new_code_cell(
        'check(f)\n### BEGIN HIDDEN TESTS\ncheck(f, n=1)\n### END HIDDEN TESTS\nprint("visible again")\n'
        "### BEGIN HIDDEN TESTS\nfor n in (2, 3):\n    check(f, n=n)\n### END HIDDEN TESTS\n",
        metadata={"nbgrader": {"grade": True, "grade_id": "test_f", "points": 1}})
    plain = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nx = 1\n### END HIDDEN TESTS\n")  # not a test cell
    nb = nbformat.v4.new_notebook(cells=[cell, plain])
    assert hidden_tests(nb) == {"test_f": "check(f, n=1)\nfor n in (2, 3):\n    check(f, n=n)"}
    cell.source = ("for n in (1, 2):\n    check(f)\n"
                   "    ### BEGIN HIDDEN TESTS\n    check(f, n=n)\n    ### END HIDDEN TESTS\n")
    with pytest.raises(ValueError, match="top level"):
        hidden_tests(nb)
    cell.source = "### BEGIN HIDDEN TESTS\ncheck(f,\n### END HIDDEN TESTS\n"
    with pytest.raises(SyntaxError):
        hidden_tests(nb)


def learner_namespace(self_study, replace: dict | None = None) -> dict:
    """What a learner's kernel holds before the checks: the imports cell, the definition-only cells and the
    exercise cells (their stubs, or ``replace[cell id]``), run like tests/diagnosis_harness.py does."""
    from tests.diagnosis_harness import _definitions_only

    os.environ.setdefault("NBGRADER_EXECUTION", "autograde")
    code_cells = [c for c in self_study.cells if c.cell_type == "code" and c.id not in FRONT]
    namespace: dict = {"__name__": "__self_study__"}
    for index, cell in enumerate(code_cells):
        meta = nbgrader_meta(cell)
        if index == 0 or meta.get("solution") or (not meta.get("grade") and not is_extra_checks(cell)
                                                  and _definitions_only(cell.source)):
            text = (replace or {}).get(cell.id, cell.source)
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(text, f"<{cell.id}>", "exec"), namespace)
    return namespace


def solved_exercises(root, assignment) -> dict:
    """exercise cell id -> its solved source (solutions/)."""
    cells = nbformat.read(root / "solutions" / f"{assignment}.ipynb", as_version=4).cells
    return {c.id: c.source for c in cells if nbgrader_meta(c).get("solution")}


def checks_in_order(self_study) -> list[tuple[str, str, str]]:
    """(exercise, cell id, source) of every visible test cell and extra-checks cell, in notebook order."""
    found, exercise = [], None
    for cell in self_study.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            exercise = meta["grade_id"]
        elif meta.get("grade") or is_extra_checks(cell):
            found.append((exercise, cell.id, cell.source))
    return found


def run_cell(text: str, name: str, namespace: dict):
    """(printed text, exception or None)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compiled(text, f"<{name}>"), namespace)
    except Exception as error:  # noqa: BLE001 - the verdict is what we read
        return out.getvalue(), error
    return out.getvalue(), None


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_extra_checks_pass_on_the_solutions(rebuilt, assignment):
    """The solved self-study notebook: every visible check and every extra check passes, and says so."""
    _, _, self_study = editions(rebuilt, assignment)
    namespace = learner_namespace(self_study, solved_exercises(rebuilt, assignment))
    for _, cell_id, text in checks_in_order(self_study):
        printed, error = run_cell(text, cell_id, namespace)
        assert error is None, f"{assignment}: {cell_id} fails on the solution: {type(error).__name__}: {error}"
        if cell_id.startswith(EXTRA_CHECKS_PREFIX):
            assert "✔" in printed, f"{assignment}: {cell_id} passed without saying so:\n{printed}"


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_extra_checks_fail_on_the_stubs(rebuilt, assignment):
    """The unsolved self-study notebook: no extra check passes an exercise nobody has written."""
    _, _, self_study = editions(rebuilt, assignment)
    namespace = learner_namespace(self_study)
    for _, cell_id, text in checks_in_order(self_study):
        if cell_id.startswith(EXTRA_CHECKS_PREFIX):
            _, error = run_cell(text, cell_id, namespace)
            assert isinstance(error, (NotImplementedError, CheckFailed)), (
                f"{assignment}: {cell_id} on the stub gave {error!r}, not the unwritten exercise or a diagnosis")


@pytest.mark.slow  # builds the whole course in a copy (`make build`), about 10 s once
def test_extra_checks_catch_the_shortcut_variance_the_visible_check_lets_through(rebuilt):
    """Issue 13's example: E[x^2] - mu^2 passes 01's visible check; the extra checks name the mistake."""
    if "01_bn_vs_ln" not in ASSIGNMENTS:
        pytest.skip("01_bn_vs_ln not selected")
    _, _, self_study = editions(rebuilt, "01_bn_vs_ln")
    shortcut = ("def layernorm(x, gamma, beta, eps=1e-5):\n"
                "    mu = x.mean(axis=-1, keepdims=True)\n"
                "    var = (x * x).mean(axis=-1, keepdims=True) - mu * mu\n"
                "    return gamma * (x - mu) / np.sqrt(var + eps) + beta\n")
    namespace = learner_namespace(self_study, {"layernorm": shortcut})
    cells = {cell_id: text for _, cell_id, text in checks_in_order(self_study)}
    _, error = run_cell(cells["test_layernorm"], "test_layernorm", namespace)
    assert error is None, f"the visible check already fails: {error}"
    _, error = run_cell(cells["extra-test_layernorm"], "extra-test_layernorm", namespace)
    assert isinstance(error, CheckFailed) and "ln.naive_variance" in error.misconceptions, repr(error)
    assert "Likely cause" in str(error)
