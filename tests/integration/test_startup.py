"""The grader's processes skip rfc3987_syntax's grammars without weakening nbformat's validation."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.slow  # fresh interpreters: the point is what happens at their first import

PROBE = """
import sys, time, glob
from grader.grading.startup import skip_iri_grammars
if sys.argv[1] == "skip":
    skip_iri_grammars()
started = time.process_time()
import nbformat
imported = time.process_time() - started
for path in sorted(glob.glob("release/*/*.ipynb")):
    nbformat.validate(nbformat.read(path, as_version=4))
broken = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
broken.cells[0]["outputs"] = [{"output_type": "nonsense"}]
try:
    nbformat.validate(broken)
    print("invalid notebook accepted")
except nbformat.ValidationError:
    pass
print(sys.modules.get("rfc3987_syntax", "absent") is None, f"{imported:.3f}")
"""


def probe(mode: str) -> tuple[bool, float]:
    result = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.split()
    assert "accepted" not in result.stdout, result.stdout
    return lines[0] == "True", float(lines[1])


def test_skipping_the_grammars_keeps_validation_and_saves_the_import():
    skipped, skipped_seconds = probe("skip")
    kept, kept_seconds = probe("keep")
    assert skipped and not kept
    # the saving is printed, not asserted: timings on a shared machine are noise
    print(f"nbformat import: {skipped_seconds:.2f} s of CPU without the grammars, {kept_seconds:.2f} s with them")


def test_the_command_line_skips_them_before_anything_imports_nbformat():
    code = ("import sys; from grader.grading import cli\n"
            "try:\n    cli.main(['report', '--help'])\nexcept SystemExit:\n    pass\n"
            "import nbformat; print(sys.modules.get('rfc3987_syntax', 'absent') is None)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.strip().endswith("True"), result.stdout[-500:] + result.stderr[-2000:]
