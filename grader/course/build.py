"""Build every generated notebook from the percent scripts in ``source/``.

source/NN_x/NN_x.py  --jupytext-->  source/NN_x/NN_x.ipynb   (git-ignored, nbgrader's input)
                     --nbgrader-->  release/NN_x/NN_x.ipynb  (student version)
release + Colab cell           -->  notebooks/NN_x.ipynb     (self-study edition; a hidden cell
                                                             holds the solution sketches of hint(),
                                                             and an "extra checks" cell after each
                                                             test cell runs its hidden tests)
source - hidden tests - markers --> solutions/NN_x.ipynb     (solved, for instructors)

Everything is deterministic: cell ids come from ``grade_id`` or the cell's position, and
nothing records a time, so rebuilding an unchanged tree changes no file.
"""
from __future__ import annotations

import copy
import re
import subprocess
import sys
import textwrap
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package (pyproject's dev extra)
    import tomli as tomllib

import jupytext
import nbformat

from grader.course import course_root, tool_environment  # where callers have always found them

ASSIGNMENTS = ("01_bn_vs_ln", "02_geometry", "03_backward", "04_rmsnorm", "05_placement", "06_welford")

HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)
HIDDEN_BODY = re.compile(r"^([ \t]*)### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS", re.S | re.M)
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.M)
SOLUTION_REGION = re.compile(r"^[ \t]*### BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*### END SOLUTION", re.S | re.M)
# Environment variable the Colab-like tests use to install from a local checkout.
PACKAGE_SPEC_VARIABLE = "LNCOURSE_PACKAGE_SPEC"


def repository_settings(root: Path) -> dict:
    """``[tool.grader]`` of pyproject.toml: the repository URL and branch."""
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["grader"]


def present_assignments(root: Path) -> list[str]:
    """Assignment ids, in course order, whose percent script exists."""
    return [a for a in ASSIGNMENTS if (root / "source" / a / f"{a}.py").exists()]


def script_to_notebook(script: Path) -> nbformat.NotebookNode:
    """Read a percent script into a notebook with stable ids and no outputs."""
    nb = jupytext.read(script)
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for index, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"cell-{index:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def colab_cells(root: Path, assignment: str) -> list[nbformat.NotebookNode]:
    """The badge and set-up cells that open the self-study edition."""
    settings = repository_settings(root)
    repo, branch = settings["repository"].rstrip("/"), settings["branch"]
    colab_url = repo.replace("https://github.com/", "https://colab.research.google.com/github/")
    badge = (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url}/blob/{branch}/notebooks/{assignment}.ipynb)"
    )
    setup = f'''# Set-up: in Google Colab this installs the course package (checks and widgets).
# Anywhere else it does nothing: on your own machine the package came with the course's .venv,
# which `make install` (or the first `make lab`) created from the clone.
import os, subprocess, sys

if "google.colab" in sys.modules or os.environ.get("{PACKAGE_SPEC_VARIABLE}"):
    spec = os.environ.get("{PACKAGE_SPEC_VARIABLE}", "layernorm-course @ git+{repo}@{branch}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", spec], check=True)'''
    return [
        nbformat.v4.new_markdown_cell(badge, id="colab-badge"),
        nbformat.v4.new_code_cell(setup, id="colab-setup"),
    ]


def solution_regions(source_nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> the text between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, dedented."""
    regions = {}
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            found = SOLUTION_REGION.findall(cell.source)
            if found:
                regions[meta["grade_id"]] = "\n".join(textwrap.dedent(region).rstrip("\n") for region in found) + "\n"
    return regions


def sketch_cell(source_nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The self-study edition's hidden cell: each solution, compressed, registered for hint()'s last step."""
    from grader.learner import encode_solution

    entries = "".join(f'    "{name}": "{encode_solution(text)}",\n'
                      for name, text in solution_regions(source_nb).items())
    source = (
        "# @title Solution sketches for hint() (hidden: opening this cell spoils the exercises)\n"
        "# Self-study edition only. hint(\"name\") shows one as its last step, after you have tried.\n"
        "from grader.learner import register_solutions\n\n"
        f"register_solutions({{\n{entries}}})"
    )
    return nbformat.v4.new_code_cell(source, id="solution-sketches",
                                     metadata={"cellView": "form", "jupyter": {"source_hidden": True}})


EXTRA_CHECKS_PREFIX = "extra-"  # cell id of the extra checks after test cell T: "extra-" + T
EXTRA_CHECKS_HEADER = ("# Extra checks (self-study edition only): the harder cases the graded version keeps hidden.\n"
                       "# Run it once the check above passes: the first case that fails names the likely mistake.\n")


def hidden_tests(source_nb: nbformat.NotebookNode) -> dict[str, str]:
    """test grade_id -> its hidden cases (the text between the HIDDEN TESTS markers), in cell order.

    A hidden block must sit at the top level of its test cell: the self-study edition runs it
    as a cell of its own, after the visible part has run.
    """
    found = {}
    for cell in source_nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        blocks = HIDDEN_BODY.findall(cell.source)
        if not blocks:
            continue
        indented = [indent for indent, _ in blocks if indent]
        if indented:
            raise ValueError(f"{meta.get('grade_id')}: '### BEGIN HIDDEN TESTS' is indented; hidden tests must sit at "
                             "the top level of the test cell (the self-study edition runs them on their own)")
        body = "\n".join(text.rstrip("\n") for _, text in blocks).strip("\n")
        compile(body, f"<hidden tests of {meta.get('grade_id')}>", "exec")  # a syntax error fails the build
        found[meta["grade_id"]] = body
    return found


def extra_checks_cell(grade_id: str, body: str) -> nbformat.NotebookNode:
    """The self-study edition's cell after test cell ``grade_id``: its hidden cases, under a header.

    Locked like the test cell above it (not editable, not deletable), but no nbgrader cell: it is
    never graded.
    """
    return nbformat.v4.new_code_cell(EXTRA_CHECKS_HEADER + body, id=EXTRA_CHECKS_PREFIX + grade_id,
                                     metadata={"deletable": False, "editable": False, "tags": ["extra-checks"]})


def is_extra_checks(cell) -> bool:
    return cell.cell_type == "code" and cell.get("id", "").startswith(EXTRA_CHECKS_PREFIX) \
        and "extra-checks" in cell.metadata.get("tags", [])


def self_study_edition(release_nb: nbformat.NotebookNode, root: Path, assignment: str,
                       source_nb: nbformat.NotebookNode | None = None):
    """The release notebook with the Colab badge, the set-up cell and (from the source) the sketches in front,
    and, after each test cell that has hidden tests, an extra-checks cell that runs them.

    Only this edition carries the hidden cases (they are public in source/ anyway): a self-learner
    gets the full feedback of the graded version. release/ and solutions/ never do.
    """
    nb = copy.deepcopy(release_nb)
    cells = []
    extra = hidden_tests(source_nb) if source_nb is not None else {}
    for cell in nb.cells:
        cells.append(cell)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and grade_id in extra:
            cells.append(extra_checks_cell(grade_id, extra.pop(grade_id)))
    if extra:
        raise ValueError(f"{assignment}: test cells with hidden tests missing from the release: {sorted(extra)}")
    nb.cells = colab_cells(root, assignment) + ([sketch_cell(source_nb)] if source_nb is not None else []) + cells
    return nb


def solution_edition(source_nb: nbformat.NotebookNode):
    """The solved notebook: hidden tests removed, solution markers removed."""
    nb = copy.deepcopy(source_nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            text = HIDDEN_TESTS.sub("", cell.source)
            cell.source = SOLUTION_MARKER.sub("", text).rstrip("\n")
    return nb


NOTEBOOK_LINK = re.compile(r"\]\((\d\d_[A-Za-z0-9_]+)\.ipynb((?:#[^)\s]*)?)\)")


def release_links(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Cross-notebook links for release/, where each assignment is its own folder.

    The source writes them as in notebooks/ and solutions/ (flat: ``](04_rmsnorm.ipynb#anchor)``); in
    release/NN_x/NN_x.ipynb they become ``](../04_rmsnorm/04_rmsnorm.ipynb#anchor)``, and a link to the
    repository (``](../README.md)``, one folder up from notebooks/) goes one folder further up. Markdown cells only
    (never a graded cell, whose checksum nbgrader keeps).
    """
    for cell in nb.cells:
        if cell.cell_type == "markdown" and not cell.metadata.get("nbgrader", {}).get("locked"):
            source = cell.source.replace("](../", "](../../")  # the repository, one folder further up
            cell.source = NOTEBOOK_LINK.sub(lambda m: f"](../{m.group(1)}/{m.group(1)}.ipynb{m.group(2)})", source)
    return nb


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.validate(nb)
    text = nbformat.writes(nb) + "\n"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def generate_releases(root: Path, assignments: list[str]) -> None:
    """``nbgrader generate_assignment`` for each assignment, in one process (nbgrader's import is slow).

    It also records each assignment and its grade cells in the gradebook (build/gradebook.db).
    """
    command = [sys.executable, "-m", "grader.course.release_batch", *assignments]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, env=tool_environment())
    if result.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{result.stdout}{result.stderr}")


def build(root: Path | None = None, assignments: list[str] | None = None) -> list[str]:
    """Regenerate source notebooks, release/, notebooks/ and solutions/. Returns the ids built."""
    root = Path(root or course_root())
    built = assignments or present_assignments(root)
    source_notebooks = {}
    for assignment in built:
        script = root / "source" / assignment / f"{assignment}.py"
        source_notebooks[assignment] = script_to_notebook(script)
        write_notebook(source_notebooks[assignment], script.with_suffix(".ipynb"))
    generate_releases(root, built)
    for assignment, source_nb in source_notebooks.items():
        release_path = root / "release" / assignment / f"{assignment}.ipynb"
        release_nb = nbformat.read(release_path, as_version=4)
        write_notebook(release_links(copy.deepcopy(release_nb)), release_path)  # normalise nbgrader's formatting
        write_notebook(self_study_edition(release_nb, root, assignment, source_nb),
                       root / "notebooks" / f"{assignment}.ipynb")
        write_notebook(solution_edition(source_nb), root / "solutions" / f"{assignment}.ipynb")
    return built
