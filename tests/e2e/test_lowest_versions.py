"""The lowest versions pyproject.toml allows grade exactly as the tested ones (constraints.txt) do.

A venv of Python 3.11 gets every direct dependency of ".[dev]" at its floor (constraints-lowest.txt, written by
tools/lowest_constraints.py; pip picks the packages they bring in) and the course, editable. The same small
class of 04_rmsnorm (right, blank, and answers whose verdict hangs on numpy's type promotion or on torch's
bfloat16) is built and graded once with it and once with this suite's environment: every cell's score and
automatic comment must be the same, and no speed patch may switch itself off (each seam's self-check passes at
the floors).

The venv is cached in build/lowest-versions/KEY/, KEY a digest of constraints-lowest.txt and the Python version:
a fresh clone (CI) installs it once (measured on a busy 2-core machine: 140 s, 80 s of it CPU, the rest waiting
on the index; pip resolving, then unpacking torch), later runs reuse it: the test then takes about 90 s (50 s CPU).
Another key's venv (1.4 GB) is removed when a new one is made.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT, subprocess_env
from tests.course_helpers import copy_course, gradebook_rows, solution_sources, submit

# The install (two to five minutes on a busy 2-core machine) and two gradings of a class of five.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

LOWEST = ROOT / "constraints-lowest.txt"
CACHE = ROOT / "build" / "lowest-versions"
INSTALL_TIMEOUT_S = 900
ASSIGNMENT = "04_rmsnorm"
EXERCISES = ["rms_norm", "rms_norm_backward", "rms_norm_bf16"]

# Wrong answers whose verdict differs between library versions that pyproject.toml once allowed. A float64 numpy
# scalar keeps a float32 array float32 on numpy 1 (value-based casting) and makes it float64 on numpy 2 (NEP 50):
# the float32 checks fail these on numpy 2 only.
FLOAT64_EPS = '''def rms_norm(x, gamma, eps=1e-6):
    r = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + np.float64(eps))
    return gamma * (x / r)
'''
FLOAT64_BACKWARD = '''def rms_norm_backward(dy, x, gamma, eps=1e-6):
    r = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + np.float64(eps))
    x_hat = x / r
    g = gamma * dy
    dx = (g - np.mean(g * x_hat, axis=-1, keepdims=True) * x_hat) / r
    return dx, np.sum(dy * x_hat, axis=tuple(range(x.ndim - 1)))
'''
# bfloat16 statistics (no float32 upcast): torch's rounding, through numpy arrays, decides the verdict.
BF16_NO_UPCAST = '''def rms_norm_bf16(x, gamma, eps=1e-6):
    x, gamma = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(gamma).to(torch.bfloat16)
    r = (x * x).mean(-1).add(eps).sqrt()[..., None]
    y = (x / r) * gamma
    return y.float().numpy()
'''


def cache_key() -> str:
    digest = hashlib.sha256(LOWEST.read_bytes() + sys.version.encode())
    return digest.hexdigest()[:16]


def pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "-c", str(LOWEST), *args], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    errors = done.stderr[done.stderr.find("ERROR"):] if "ERROR" in done.stderr else done.stderr[-4000:]
    assert done.returncode == 0, f"pip install {' '.join(args)} with constraints-lowest.txt failed:\n{errors}"


def lowest_venv() -> Path:
    """The python of a venv holding constraints-lowest.txt and the course (editable), made once per key."""
    CACHE.mkdir(parents=True, exist_ok=True)
    folder = CACHE / cache_key()
    python = folder / "bin" / "python"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run making the same venv: wait for it, then reuse it
        if (folder / ".complete").exists():
            return python
        for old in CACHE.iterdir():  # a half-made venv of this key, or another key's (stale constraints)
            if old.is_dir():
                shutil.rmtree(old)
        venv.EnvBuilder(with_pip=True, symlinks=True).create(folder)
        pip(python, "pip")  # constraints.txt's pip (a venv's own can be years old)
        # --no-compile: no bytecode for every module of every package (half the install's CPU); what runs is
        # compiled when imported
        pip(python, "--no-compile", "-e", f"{ROOT}[dev]")
        (folder / ".complete").write_text(subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True,
                                                         text=True, check=True).stdout)
    return python


def installed_floors(python: Path) -> dict[str, tuple[str, str]]:
    """name -> (version installed in ``python``'s environment, version constraints-lowest.txt pins)."""
    pins = [Requirement(line) for line in LOWEST.read_text().splitlines() if line and not line.startswith("#")]
    floors = {pin.name: str(pin.specifier).removeprefix("==") for pin in pins if pin.name != "pip"}
    found = subprocess.run([str(python), "-c", "import json, sys; from importlib.metadata import version; "
                            "print(json.dumps([version(name) for name in sys.argv[1:]]))", *floors],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    return {name: (version, floors[name]) for name, version in zip(floors, json.loads(found.stdout), strict=True)}


def submission(answers: dict[str, str]) -> nbformat.NotebookNode:
    """The release notebook, demo cells removed, with ``answers`` (cell id -> source) typed in."""
    nb = nbformat.read(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    # demo cells cost time and a learner may delete them; the imports cell stays
    nb.cells = [c for c in nb.cells if c is first_code or c.cell_type != "code" or c.metadata.get("nbgrader")]
    for cell in nb.cells:
        if cell.id in answers:
            cell.source = answers[cell.id]
    return nb


def the_class() -> dict[str, nbformat.NotebookNode]:
    right = solution_sources(ASSIGNMENT, EXERCISES)
    return {"right": submission(right), "blank": submission({}),
            "f64eps": submission({**right, "rms_norm": FLOAT64_EPS}),
            "f64back": submission({**right, "rms_norm_backward": FLOAT64_BACKWARD}),
            "bf16": submission({**right, "rms_norm_bf16": BF16_NO_UPCAST})}


def build_and_grade(python: Path, course: Path) -> tuple[dict, str]:
    """Build ``course`` (a copy of source/ASSIGNMENT) and grade the class with ``python``'s environment."""
    env = subprocess_env()
    env["PATH"] = os.pathsep.join([str(python.parent), env["PATH"]])  # its own jupyter, alembic, nbgrader
    env.pop("VIRTUAL_ENV", None)
    common = dict(capture_output=True, text=True, env=env, cwd=course, timeout=600)
    built = subprocess.run([str(python), "-m", "grader", "build", ASSIGNMENT, "--root", str(course)], **common)
    assert built.returncode == 0, built.stdout + built.stderr
    for student, nb in the_class().items():
        submit(course, student, nb, ASSIGNMENT)
    done = subprocess.run([str(python), "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout", "60",
                           "--jobs", "1", "--no-cache", "--GradeConfig.grader_version=test-lowest-versions"], **common)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = gradebook_rows(course)
    return {"grades": rows["grades"], "comments": rows["comments"]}, done.stderr


def differences(tested: dict, lowest: dict) -> list[str]:
    """'student cell: what the tested versions gave -> what the floors gave', for each row that differs."""
    changed = []
    for table in ("grades", "comments"):
        before = {row[:2]: row[2:] for row in tested[table]}
        after = {row[:2]: row[2:] for row in lowest[table]}
        changed += [f"{student} {cell} {table}: {before.get((student, cell))} -> {after.get((student, cell))}"
                    for student, cell in sorted(before.keys() | after.keys())
                    if before.get((student, cell)) != after.get((student, cell))]
    return changed


def test_the_lowest_versions_grade_a_class_as_the_tested_ones_do(tmp_path):
    lowest = lowest_venv()
    floors = installed_floors(lowest)
    assert all(Version(Version(found).public) == Version(floor) for found, floor in floors.values()), floors

    courses = {name: copy_course(tmp_path / name, [ASSIGNMENT]) for name in ("tested", "lowest")}
    with ThreadPoolExecutor(2) as both:  # one notebook at a time each: the two runs share the two cores
        tested = both.submit(build_and_grade, Path(sys.executable), courses["tested"])
        at_floors = both.submit(build_and_grade, lowest, courses["lowest"])
        (tested, _), (graded, stderr) = tested.result(), at_floors.result()

    assert "speed patch" not in stderr, f"a seam's self-check failed at the floors:\n{stderr}"
    changed = differences(tested, graded)
    assert not changed, f"a floor of pyproject.toml changes grades or automatic comments (raise it): {changed}"
    # the class is one the promotion rules tell apart: numpy 2's verdicts (numpy 1 passed both float64 answers)
    points = {(student, cell): score for student, cell, score, *_ in tested["grades"]}
    assert points[("right", "test_rms_norm_float32")] == "1.0" and points[("blank", "test_rms_norm")] == "0.0"
    assert points[("f64eps", "test_rms_norm")] == "2.0" and points[("f64eps", "test_rms_norm_float32")] == "0.0"
    assert points[("f64back", "test_rms_norm_backward")] == "0.0"
