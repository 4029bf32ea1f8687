"""Course tooling: build the three editions from source/ and drive nbgrader's generators.

Imports the learner side (the checks the notebooks call); never the grading server.
"""
import os
import sys
from pathlib import Path


def course_root() -> Path:
    """The repository root: the folder holding nbgrader_config.py (no import beyond pathlib, for start-up paths)."""
    return Path(__file__).resolve().parents[2]  # grader/course/__init__.py


def tool_environment() -> dict:
    """This process's environment with the interpreter's folder first on PATH (for nbgrader's tools, `alembic`;
    here rather than in build, so that grading does not import jupytext for it)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


SKIPPED_MODULE = "rfc3987_syntax"


def skip_iri_grammars() -> None:
    """Keep jsonschema from compiling rfc3987_syntax's 38 grammars in this process (1-5 s of CPU).

    jsonschema registers its "iri" and "iri-reference" format checkers at import when
    rfc3987_syntax is installed (jupyter-events needs it), and that module builds every grammar
    it has on import. nbformat validates without a format checker and its schemas use neither
    format, so the grader's processes (coordinator, record and feedback workers, the course build's
    nbgrader generate_assignment) go without. Only those: a learner's sandbox starts from a fresh
    interpreter and imports what Jupyter would.
    Too late once jsonschema is imported (the checkers are registered then), so it changes nothing.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault(SKIPPED_MODULE, None)  # None in sys.modules: `import` raises ImportError
