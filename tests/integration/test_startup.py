"""The grader's processes at start: rfc3987_syntax's grammars skipped without weakening nbformat's validation;
what the warm processes import (and leave out)."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.slow  # fresh interpreters: the point is what happens at their first import

PROBE = """
import sys, time, glob
from grader.course import skip_iri_grammars
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


DISPATCH_PROBE = """
import sys
import numpy as np
import torch
from grader.compare import measuring_memory
from grader.grading.sandbox import tripwires

with measuring_memory(track_torch=True) as memory:
    torch.ones(1000) * 2.0
wires = tripwires.Tripwires(tripwires.FUNCTIONS, tripwires.MODULES, tripwires.PACKAGES, tripwires.SPARED)
wires.start()
torch.nn.functional.layer_norm(torch.ones(2, 4), (4,))
calls = wires.stop()
print(memory.peak > 0, calls, "torch._dynamo" in sys.modules)
"""


def test_the_grader_dispatch_modes_never_import_torch_dynamo(tmp_path):
    """The memory measurement and the delegation recorder (both torch dispatch modes) work without
    torch._dynamo: torch would import it (about 1 s of CPU) on a mode's first dispatch, in every
    notebook's sandbox, since neither the zygote nor the slots import it in advance."""
    env = dict(subprocess_env(), TORCHINDUCTOR_CACHE_DIR=str(tmp_path))  # if it fails, nothing is left in /tmp
    done = subprocess.run([sys.executable, "-c", DISPATCH_PROBE], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "['torch.ops.aten.native_layer_norm']", "False"], done.stdout


def test_the_warm_processes_import_what_autograd_needs_and_not_torch_dynamo():
    """The slots' forkserver and the zygote factory leave torch._dynamo out (2.4 s of CPU a run) but import
    what torch.autograd.grad imports on its first call with grad_outputs (sympy: 0.3 s a notebook otherwise)."""
    from grader.grading.sandbox import zygote
    from grader.grading.slots.slot_pool import SLOT_WARM_MODULES

    for warm in (zygote.WARM_MODULES, SLOT_WARM_MODULES):
        assert not [m for m in warm if m.startswith("torch._dynamo")]
        assert "torch.fx.experimental.symbolic_shapes" in warm


def first_cell_imports() -> set[str]:
    """The modules each source notebook's first code cell imports (the test cells' namespace)."""
    import ast

    from grader.course.build import script_to_notebook

    modules = set()
    for script in sorted((ROOT / "source").glob("*/*.py")):
        first = next(c for c in script_to_notebook(script).cells if c.cell_type == "code")
        for node in ast.walk(ast.parse(first.source)):
            if isinstance(node, ast.Import):
                modules |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                modules.add(node.module)
    return modules


def test_the_slots_forkserver_imports_what_every_test_namespace_imports():
    """A slot runs each notebook's imports before its test cells: none may be a slot's own first import
    (matplotlib alone was 0.25 s of CPU per slot)."""
    from grader.grading.slots.slot_pool import LEARNER_PACKAGES, SLOT_WARM_MODULES
    from grader.grading.startup import package_modules

    warm = set(SLOT_WARM_MODULES) | set(package_modules(LEARNER_PACKAGES))
    imported = first_cell_imports()
    assert "grader.checks.welford" in imported and "matplotlib.pyplot" in imported
    covered = {m for m in imported if any(w == m or w.startswith(m + ".") for w in warm)}
    assert imported - covered == set()


def fresh_interpreter_prints(code: str) -> list[str]:
    """What ``code`` prints, split in words, run by a fresh interpreter in the checkout."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_grading_does_not_import_the_course_builder():
    """jupytext (the builder's) costs about 0.4 s of CPU: a grade run that has nothing to build does without."""
    assert fresh_interpreter_prints("import sys, grader.grading.run.pipeline, grader.grading.cli\n"
                                    "print(sorted({'jupytext', 'grader.course.build'} & set(sys.modules)))") == ["[]"]


def test_the_course_build_skips_the_iri_grammars_too():
    """nbgrader generate_assignment (grader.course.release_batch) validates as the grader does, without them."""
    assert fresh_interpreter_prints("import sys, grader.course.release_batch, jsonschema\n"
                                    "print(sys.modules['rfc3987_syntax'] is None)") == ["True"]
