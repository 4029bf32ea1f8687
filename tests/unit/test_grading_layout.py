"""Every module of the grading server stays within the size limits (issue 40: a module about 500 lines at
most, a function 60, a class 300). The sandbox's worker and isolation, split into parts with one job each, are
loaded where the learner's code cannot reach them first: in the zygote, before any learner cell."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, subprocess_env

SANDBOX = ROOT / "grader" / "grading" / "sandbox"
# The worker and the isolation, and the modules they were split into.
WORKER_PARTS = ["worker", "kernel", "outputs", "tripwires"]
ISOLATION_PARTS = ["isolation", "levels", "linux", "allowlist", "rootfs", "privileges", "keyrings"]
SPLIT = WORKER_PARTS + ISOLATION_PARTS + ["teardown"]


def oversized(path: Path) -> list[str]:
    """What in ``path`` is over the limits, as 'name: N lines'."""
    text = path.read_text()
    found = [f"{path.name}: {len(text.splitlines())} lines"] if len(text.splitlines()) > 500 else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            size = node.end_lineno - node.lineno + 1
            if size > (300 if isinstance(node, ast.ClassDef) else 60):
                found.append(f"{path.name}:{node.lineno} {node.name}: {size} lines")
    return found


GRADING = ROOT / "grader" / "grading"


@pytest.mark.parametrize("path", sorted(GRADING.rglob("*.py")), ids=lambda p: str(p.relative_to(GRADING)))
def test_every_grading_module_is_within_the_size_limits(path):
    """Every module of the grading server, not only the sandbox's (a new module starts within them)."""
    assert oversized(path) == []


def test_the_split_parts_are_still_there():
    assert all((SANDBOX / f"{name}.py").is_file() for name in SPLIT)


def test_the_size_check_sees_an_oversized_function(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * 60 + "\n\nclass C:\n" + "    y = 2\n" * 300)
    assert oversized(long) == ["long.py:1 f: 61 lines", "long.py:64 C: 301 lines"]


@pytest.mark.slow  # a subprocess importing the worker (numpy, ipykernel's seam)
def test_every_part_loads_with_the_worker_and_the_zygote_warm_up():
    """Importing the worker (the zygote does, before it forks a sandbox) loads its parts, and the zygote's
    warm modules load every part of the isolation and the teardown: none is imported after the learner's
    code could have replaced a module it relies on, or put its own folder first on sys.path."""
    probe = ("import sys, importlib\nfrom grader.grading.sandbox import zygote\n"
             "import grader.grading.sandbox.worker\n"
             "for name in zygote.WARM_MODULES:\n"
             "    if name.startswith('grader.grading.sandbox'):\n"
             "        importlib.import_module(name)\n"
             "print(' '.join(sorted(m.rpartition('.')[2] for m in sys.modules\n"
             "                      if m.startswith('grader.grading.sandbox.'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert set(SPLIT) <= loaded, sorted(set(SPLIT) - loaded)
