"""What a learner sees when a check fails: in a real kernel the diagnosis, not the grader's frames;
outside IPython nothing extra at all (no display, nothing on stderr, which nbgrader would punish)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest

from grader.attempts import MIME
from tests.conftest import ROOT, subprocess_env

WRONG = ("def rms_norm(x, gamma, eps=1e-6):\n"
         "    return gamma * x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps)  # eps outside the root\n")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def diagnosis_here() -> str:
    """The first line of the diagnosis, computed in this process."""
    import numpy as np  # WRONG uses np

    from grader.checks.rmsnorm import check_rms_norm
    from grader.compare import CheckFailed

    namespace = {"np": np}
    exec(WRONG, namespace)
    with pytest.raises(CheckFailed) as failure:
        check_rms_norm(namespace["rms_norm"])
    return str(failure.value).strip().splitlines()[0]


@pytest.mark.slow  # a real ipykernel
def test_a_failed_check_shows_its_diagnosis_without_grader_frames(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import numpy as np\nfrom grader.checks.rmsnorm import check_rms_norm\n"
                                  "from grader.learner import hint, progress"),
        nbformat.v4.new_code_cell(WRONG),
        nbformat.v4.new_code_cell("check_rms_norm(rms_norm)"),
    ]
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    NotebookClient(nb, timeout=300, startup_timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env, cwd=str(tmp_path))

    outputs = nb.cells[2].outputs
    (error,) = [o for o in outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed"
    shown = ANSI.sub("", "\n".join(error.traceback))
    assert "CheckFailed in check_rms_norm" in shown
    assert diagnosis_here() in shown
    assert "Likely cause" in shown or "eps" in shown
    assert "grader/" not in shown and "File " not in shown and "Traceback" not in shown, shown
    assert not [o for cell in nb.cells for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
    (attempt,) = [o for o in outputs if o.output_type == "display_data"]
    assert attempt.data["text/plain"] == "" and attempt.data[MIME]["records"][-1]["outcome"] == "failed"


@pytest.mark.slow  # a subprocess
def test_outside_ipython_a_check_displays_and_writes_nothing_extra():
    code = f'''
import numpy as np
import grader.learner
from grader import attempts
from grader.checks.rmsnorm import check_rms_norm
from grader.compare import CheckFailed
{WRONG}
try:
    check_rms_norm(rms_norm)
except CheckFailed:
    pass
grader.learner.hint("rms_norm")
print("records:", len(attempts.records()), "IPython imported:", "IPython" in __import__("sys").modules)
'''
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env=subprocess_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "lncourse" not in result.stdout and "records" in result.stdout
    assert result.stdout.strip().endswith("records: 0 IPython imported: False")
    assert "Hint 1 of 3 for rms_norm" in result.stdout  # hint() still answers, as plain text


@pytest.mark.slow  # a real ipykernel
def test_an_unwritten_exercise_shows_one_line_and_the_learners_error_only_its_frames(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import numpy as np\nfrom grader.checks.rmsnorm import check_rms_norm"),
        nbformat.v4.new_code_cell("def rms_norm(x, gamma, eps=1e-6):\n    # YOUR CODE HERE\n"
                                  "    raise NotImplementedError()"),
        nbformat.v4.new_code_cell("check_rms_norm(rms_norm)"),
        nbformat.v4.new_code_cell("def rms_norm(x, gamma, eps=1e-6):\n"
                                  "    r = np.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)\n"
                                  "    return gamma * x / r"),
        nbformat.v4.new_code_cell("check_rms_norm(rms_norm)"),
    ]
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    NotebookClient(nb, timeout=300, startup_timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env, cwd=str(tmp_path))

    (todo,) = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    shown = ANSI.sub("", "\n".join(todo.traceback))
    assert shown.count("\n") == 0, shown
    assert "rms_norm is not written yet: replace the `raise NotImplementedError`" in shown
    assert "grader/" not in shown and "File " not in shown and "Traceback" not in shown

    (raised,) = [o for o in nb.cells[4].outputs if o.output_type == "error"]
    shown = ANSI.sub("", "\n".join(raised.traceback))
    assert "in your code, line 2, in rms_norm" in shown and "common.signature" not in shown
    assert "keep its parameter names" not in shown  # the signature-changed cause
    assert "grader/" not in shown and "File " not in shown
    assert not [o for cell in nb.cells for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
