"""Course tooling: build the three editions from source/ and drive nbgrader's generators.

Imports the learner side (the checks the notebooks call); never the grading server.
"""
from pathlib import Path


def course_root() -> Path:
    """The repository root: the folder holding nbgrader_config.py (no import beyond pathlib, for start-up paths)."""
    return Path(__file__).resolve().parents[2]  # grader/course/__init__.py
