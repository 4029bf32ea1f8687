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
