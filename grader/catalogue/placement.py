"""Misconceptions of the exercises of this notebook (see grader.catalogue)."""
from grader.catalogue import entry  # noqa: F401 - used by the entries below

MISCONCEPTIONS = []
