"""nbgrader's Validate on a fresh release notebook: each unwritten exercise reads as a to-do, not a crash.

The Validate button and `nbgrader validate` print, for every failed test cell, the traceback IPython
stored in the notebook's error output. The course's checks turn a stub's NotImplementedError into
NotWrittenYet, whose traceback is one line (its _render_traceback_): this test runs the real command.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, subprocess_env

ASSIGNMENT = "04_rmsnorm"
EXERCISES = ("rms_norm", "rms_norm", "rms_norm_backward", "rms_norm_bf16")  # one per test cell, in order


@pytest.mark.slow  # runs the whole notebook in a kernel (about 15 s)
def test_validate_of_a_fresh_release_notebook_names_each_unwritten_exercise_in_one_line(tmp_path):
    notebook = ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    shutil.copy(notebook, tmp_path / notebook.name)
    env = subprocess_env()
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "validate", notebook.name],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    shown = done.stdout + done.stderr

    assert f"VALIDATION FAILED ON {len(EXERCISES)} CELL(S)" in shown, shown
    errors = re.findall(r"The error was:\n\n(.*?)\n\n", shown, re.S)
    assert len(errors) == len(EXERCISES), shown
    for name, error in zip(EXERCISES, errors, strict=True):
        lines = [line.strip() for line in error.strip().splitlines()]
        assert len(lines) == 1, error  # one line: no frames
        assert lines[0].startswith(f"{name} is not written yet: replace the `raise NotImplementedError`"), error
    assert "Traceback" not in shown and "grader/" not in shown and 'File "' not in shown, shown
    assert "NotImplementedError:" not in shown, shown
