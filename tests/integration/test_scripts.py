"""Each percent script runs top to bottom as a plain script: solutions pass every test, hidden ones too."""
import subprocess
import sys

import pytest

from tests.conftest import ASSIGNMENTS, ROOT, subprocess_env


@pytest.mark.slow  # notebook execution tier: each script imports torch and runs every check
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_script_runs_with_solutions(assignment, tmp_path):
    script = ROOT / "source" / assignment / f"{assignment}.py"
    env = subprocess_env()
    env["NBGRADER_EXECUTION"] = "autograde"  # demo cells do the least work, as under grading
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "Traceback" not in result.stderr
