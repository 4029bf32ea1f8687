"""The generated notebooks are up to date, deterministic, and leak nothing."""
import json
import re
import shutil
import subprocess

import nbformat
import pytest

from grader.build import build, HIDDEN_TESTS, SOLUTION_MARKER
from tests.conftest import ASSIGNMENTS, ROOT

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


def test_rebuild_reproduces_every_generated_file(rebuilt):
    assert generated_files(rebuilt) == generated_files(ROOT), "generated files differ: run `make build` and commit"
    for name in generated_files(ROOT):
        assert (rebuilt / name).read_text() == (ROOT / name).read_text(), f"{name} is stale: run `make build`"


def test_release_contains_only_notebooks(rebuilt):
    for assignment in ASSIGNMENTS:
        files = sorted(p.name for p in (rebuilt / "release" / assignment).iterdir())
        assert files == [f"{assignment}.ipynb"], f"nbgrader copied extra files into release/{assignment}: {files}"


def solution_and_hidden_lines(assignment):
    """Lines of code learners must not see: solution bodies and hidden tests."""
    source = (ROOT / "source" / assignment / f"{assignment}.py").read_text()
    solutions = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, re.S)
    hidden = [m.group(0) for m in HIDDEN_TESTS.finditer(source)]
    keep = lambda line: len(line.strip()) > 12 and not line.strip().startswith("#")  # noqa: E731
    return ([l.strip() for block in solutions for l in block.splitlines() if keep(l)],
            [l.strip() for block in hidden for l in block.splitlines() if keep(l) and "HIDDEN TESTS" not in l])


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_solutions_or_hidden_tests_leak(assignment):
    solution_lines, hidden_lines = solution_and_hidden_lines(assignment)
    assert hidden_lines, "every assignment should have hidden tests"
    learner_files = [ROOT / "release" / assignment / f"{assignment}.ipynb", ROOT / "notebooks" / f"{assignment}.ipynb"]
    for path in learner_files:
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        for line in solution_lines + hidden_lines:
            assert line not in code, f"{path.name} leaks: {line}"
        assert "BEGIN SOLUTION" not in code and "HIDDEN TESTS" not in code
    solved = "\n".join(c.source for c in nbformat.read(ROOT / "solutions" / f"{assignment}.ipynb", as_version=4).cells)
    for line in hidden_lines:
        assert line not in solved, f"solutions/{assignment}.ipynb keeps a hidden test: {line}"
    assert not SOLUTION_MARKER.search(solved)


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
