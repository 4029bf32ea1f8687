"""Build every generated notebook from the percent scripts in ``source/``.

source/NN_x/NN_x.py  --jupytext-->  source/NN_x/NN_x.ipynb   (git-ignored, nbgrader's input)
                     --nbgrader-->  release/NN_x/NN_x.ipynb  (student version)
release + Colab cell           -->  notebooks/NN_x.ipynb     (self-study edition; a hidden cell
                                                             holds the solution sketches of hint())
source - hidden tests - markers --> solutions/NN_x.ipynb     (solved, for instructors)

Everything is deterministic: cell ids come from ``grade_id`` or the cell's position, and
nothing records a time, so rebuilding an unchanged tree changes no file.
"""
from __future__ import annotations

import copy
import os
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

ASSIGNMENTS = ("01_bn_vs_ln", "02_geometry", "03_backward", "04_rmsnorm", "05_placement", "06_welford")

HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)
SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.M)
SOLUTION_REGION = re.compile(r"^[ \t]*### BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*### END SOLUTION", re.S | re.M)
# Environment variable the Colab-like tests use to install from a local checkout.
PACKAGE_SPEC_VARIABLE = "LNCOURSE_PACKAGE_SPEC"


def course_root() -> Path:
    """The repository root: the folder holding nbgrader_config.py."""
    return Path(__file__).resolve().parent.parent


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
    setup = f'''# Set-up: in Google Colab this installs the course package (checks and widgets);
# anywhere else it does nothing, because `make lab` has already installed it.
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

    entries = "".join(f'    "{name}": "{encode_solution(text)}",\n' for name, text in solution_regions(source_nb).items())
    source = (
        "# @title Solution sketches for hint() (hidden: opening this cell spoils the exercises)\n"
        "# Self-study edition only. hint(\"name\") shows one as its last step, after you have tried.\n"
        "from grader.learner import register_solutions\n\n"
        f"register_solutions({{\n{entries}}})"
    )
    return nbformat.v4.new_code_cell(source, id="solution-sketches",
                                     metadata={"cellView": "form", "jupyter": {"source_hidden": True}})


def self_study_edition(release_nb: nbformat.NotebookNode, root: Path, assignment: str,
                       source_nb: nbformat.NotebookNode | None = None):
    """The release notebook with the Colab badge, the set-up cell and (from the source) the sketches in front."""
    nb = copy.deepcopy(release_nb)
    nb.cells = colab_cells(root, assignment) + ([sketch_cell(source_nb)] if source_nb is not None else []) + nb.cells
    return nb


def solution_edition(source_nb: nbformat.NotebookNode):
    """The solved notebook: hidden tests removed, solution markers removed."""
    nb = copy.deepcopy(source_nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            text = HIDDEN_TESTS.sub("", cell.source)
            cell.source = SOLUTION_MARKER.sub("", text).rstrip("\n")
    return nb


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.validate(nb)
    text = nbformat.writes(nb) + "\n"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def tool_environment() -> dict:
    """This process's environment with the interpreter's folder first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def generate_releases(root: Path, assignments: list[str]) -> None:
    """``nbgrader generate_assignment`` for each assignment, in one process (nbgrader's import is slow).

    It also records each assignment and its grade cells in the gradebook (build/gradebook.db).
    """
    command = [sys.executable, "-m", "grader.release_batch", *assignments]
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
        write_notebook(release_nb, release_path)  # normalise nbgrader's formatting
        write_notebook(self_study_edition(release_nb, root, assignment, source_nb),
                       root / "notebooks" / f"{assignment}.ipynb")
        write_notebook(solution_edition(source_nb), root / "solutions" / f"{assignment}.ipynb")
    return built
