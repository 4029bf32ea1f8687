"""The three layers import in one direction only: learner side <- course tooling <- grading server.

- Learner side (what Colab installs and the notebooks import): grader's checks, catalogue,
  comparisons, oracles, hints and the types that cross the sandbox (``grader.boundary``);
  ``normlab``'s demos. numpy and a lazy torch; nothing of nbgrader, the sandbox or the course tree.
- Course tooling: building the editions and driving nbgrader's generators.
- Grading server: everything else (intake, execution, sandbox, records, feedback, report).

Every import statement counts, including those inside functions: a lazy import of the
sandbox from a check is still a dependency of the check.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GRADER = ROOT / "grader"

# The layer of a module is its folder: grader/course/ and grader/grading/ hold the course tooling and
# the grading server; everything else in grader/ (and normlab/) is the learner side.
COURSE_PACKAGE, SERVER_PACKAGE = "grader.course", "grader.grading"
LEARNER_PACKAGES = ("grader.checks", "grader.catalogue")
# Third-party packages only instructors and the grading server install.
SERVER_ONLY_PACKAGES = {"nbgrader", "nbformat", "nbconvert", "nbclient", "jupytext", "traitlets", "jupyter_client",
                        "jupyter_core", "distributed", "dask", "tqdm", "sqlalchemy"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(name: str) -> str:
    if name == COURSE_PACKAGE or name.startswith(COURSE_PACKAGE + "."):
        return "course"
    if name == SERVER_PACKAGE or name.startswith(SERVER_PACKAGE + ".") or name == "grader.__main__":
        return "server"
    return "learner"


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level?) for every import in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno, id(node) in top))
            # "from grader import oracles" imports grader.oracles
            found += [(f"{node.module}.{alias.name}", node.lineno, id(node) in top) for alias in node.names
                      if node.module in ("grader", "grader.checks", "grader.catalogue", "grader.grading.sandbox")]
    return found


FILES = sorted([*GRADER.rglob("*.py"), *(ROOT / "normlab").rglob("*.py")])
ORDER = {"learner": 0, "course": 1, "server": 2}


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_layers(path):
    own = layer(module_name(path))
    wrong = []
    for imported, line, at_top in imports(path):
        root = imported.split(".")[0]
        if root in ("grader", "normlab"):
            if imported in ("grader", "normlab"):
                continue
            target = layer(imported)
            if ORDER[target] > ORDER[own]:
                wrong.append(f"line {line}: {imported} ({target} layer)")
            if own == "learner" and root == "normlab" and module_name(path).startswith("grader"):
                wrong.append(f"line {line}: the grader package imports the demos ({imported})")
            if module_name(path).startswith("normlab") and imported.startswith(LEARNER_PACKAGES[0]):
                wrong.append(f"line {line}: a demo imports a check module ({imported}): use grader.oracles")
        elif own == "learner" and root in SERVER_ONLY_PACKAGES:
            wrong.append(f"line {line}: {imported} (installed for grading, not for learners)")
        elif own == "learner" and root == "torch" and at_top and module_name(path).startswith("grader"):
            wrong.append(f"line {line}: torch at import time (import it lazily: Colab users wait for it)")
    assert not wrong, f"{module_name(path)} ({own} layer) imports against the layering:\n" + "\n".join(wrong)


def test_every_layer_is_populated():
    layers = {layer(module_name(path)) for path in FILES}
    assert layers == {"learner", "course", "server"}
    assert (GRADER / "boundary.py").exists()


def test_every_source_folder_is_a_package_setuptools_finds():
    """A folder of modules without __init__.py still imports from a checkout (a namespace package) but is left out of
    a wheel by ``packages.find``; a .gitignore pattern once hid one (grader/grading/feedback/) from git."""
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["grader*", "normlab*"]))
    sources = [*GRADER.rglob("*.py"), *(ROOT / "normlab").rglob("*.py")]
    folders = {module_name(path.parent / "__init__.py") for path in sources}
    assert folders <= found, f"not packages: {sorted(folders - found)}"
