"""Gradescope: an autograder zip (``python -m grader gradescope ASSIGNMENT``) and what it runs.

The zip follows Gradescope's autograder specification: ``setup.sh`` and ``run_autograder`` at its root.
Gradescope unpacks it into /autograder/source, runs ``setup.sh`` once to build its image, then runs
``run_autograder`` once per submission with the learner's files in /autograder/submission, and reads
/autograder/results/results.json. The zip holds

    setup.sh          installs the course's Python environment (CPU torch, constraints.txt's versions)
    run_autograder    grades the one submitted notebook (``main``), fail closed
    autograder.json   which assignment, its points
    course/           nbgrader_config.py, source/ASSIGNMENT (the hidden tests), release/ASSIGNMENT and a
                      gradebook that records the assignment and no learner
    package/          this project (grader, normlab), pyproject.toml and constraints.txt, for setup.sh

``main`` grades with ``grader.grading.export.autograder`` (the intake, sandbox, hidden tests, diagnoses and
nbgrader record step of ``python -m grader grade``) and writes results.json: one test per graded cell
(its points as the gradebook recorded them, not its maximum), hidden tests' output shown only once the
instructor publishes, any failure of the grader a visible "grading failed" test and a score of 0.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import stat
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

PIP_PACKAGES = ["nbgrader", "nbconvert", "nbformat", "nbclient", "ipykernel", "beautifulsoup4", "Pygments",
                "jupytext", "tqdm"]  # the grading side of pyproject's dev extra (its versions: constraints.txt)
INSTRUCTOR_TEST = "Grading environment (instructors only)"
FAILED_TEST = "grading failed"

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, in /autograder/source, to build the autograder's image.
# It installs the course's Python environment into $ROOT/venv: this project and what grading needs,
# at the versions of constraints.txt, with PyTorch's CPU build (no CUDA: a few hundred MB, not GBs).
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
cd "$(dirname "$0")"
if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        python3 python3-venv python3-pip
fi
python3 -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install -q --disable-pip-version-check -c package/constraints.txt pip
PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu "$ROOT/venv/bin/python" -m pip install -q \
    --disable-pip-version-check -c package/constraints.txt ./package __PIP_PACKAGES__
"$ROOT/venv/bin/python" -m compileall -q "$ROOT/venv/lib" >/dev/null || true
"$ROOT/venv/bin/python" -c "import torch, nbgrader, grader.grading.export.gradescope; print('autograder ready:', torch.__version__)"
"""  # noqa: E501 - shell script text, written out as it is

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this once per submission (as /autograder/run_autograder). It always leaves a
# results.json: if the grader cannot even start, a visible "grading failed" test scoring 0.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
export AUTOGRADER_ROOT="$ROOT"
if [ -x "$ROOT/venv/bin/python" ]; then PY="$ROOT/venv/bin/python"; else PY="$(command -v python3 || command -v python)"; fi
mkdir -p "$ROOT/results"
rm -f "$ROOT/results/results.json"
"$PY" -c 'from grader.grading.export.gradescope import main; raise SystemExit(main())'
code=$?
if [ ! -s "$ROOT/results/results.json" ]; then
    printf '{"score": 0, "output": "The autograder could not start (exit %s): tell your instructor.", "stdout_visibility": "hidden", "tests": [{"name": "grading failed", "score": 0, "max_score": __MAX__, "status": "failed", "output": "The autograder could not start: this is not your mistake; tell your instructor.", "visibility": "visible"}]}\n' "$code" > "$ROOT/results/results.json"
fi
exit 0
"""  # noqa: E501 - shell script text, written out as it is


# ------------------------------------------------------------------ results.json
def results_json(graded) -> dict:
    """Gradescope's results.json for a ``grader.grading.export.autograder.Graded``."""
    tests = []
    for number, test in enumerate(graded.tests, start=1):
        tests.append({"name": test.name, "number": str(number), "score": test.score, "max_score": test.max_score,
                      "status": "passed" if test.status == "passed" and test.score >= test.max_score else "failed",
                      "output": test.output,
                      "visibility": "after_published" if test.hidden else "visible"})
    tests.append({"name": INSTRUCTOR_TEST, "score": 0.0, "max_score": 0.0, "status": "passed",
                  "output": "\n".join([f"isolation: {graded.isolation or 'unknown'}", *graded.instructor_notes]),
                  "visibility": "hidden"})
    output = "\n".join(graded.notes) if graded.notes else ""
    return {"score": graded.score, "execution_time": int(math.ceil(graded.seconds)), "output": output,
            "output_format": "text", "stdout_visibility": "hidden", "visibility": "visible", "tests": tests}


def failed_json(max_score: float, why: str, seconds: float) -> dict:
    """Fail closed: the grader's own failure is a visible zero that says so, never a pass."""
    return {"score": 0.0, "execution_time": int(math.ceil(seconds)), "stdout_visibility": "hidden",
            "output": "Grading failed. This is not a verdict on your work: tell your instructor.",
            "tests": [{"name": FAILED_TEST, "score": 0.0, "max_score": max_score, "status": "failed",
                       "output": "The autograder failed before it could grade this submission; it scores 0 until "
                                 "your instructor fixes it and regrades.", "visibility": "visible"},
                      {"name": INSTRUCTOR_TEST, "score": 0.0, "max_score": 0.0, "status": "failed",
                       "output": why[-4000:], "visibility": "hidden"}]}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    temporary.replace(path)


def grade_bundle(bundle: Path, submission: Path, work_parent: Path):
    """Grade ``submission`` with the course of an unpacked bundle (``course/``, ``autograder.json``) in a
    fresh copy under ``work_parent``; returns (Graded, bundle's autograder.json)."""
    from grader.grading.export.autograder import grade_notebook, stop_sandboxes

    info = json.loads((bundle / "autograder.json").read_text(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="lncourse-autograder-", dir=work_parent))
    os.chmod(work, 0o711)  # at isolation basic the sandbox uid reaches its own scratch folder through it
    try:
        course = work / "course"
        shutil.copytree(bundle / "course", course)
        try:
            return grade_notebook(course, submission, info["assignment"]), info
        finally:
            stop_sandboxes()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    """run_autograder's work: grade $AUTOGRADER_ROOT/submission, write $AUTOGRADER_ROOT/results/results.json.
    Returns 0 whatever happened (the results say it)."""
    started = time.monotonic()
    root = Path(os.environ.get("AUTOGRADER_ROOT") or "/autograder")
    out = root / "results" / "results.json"
    bundle = root / "source"
    try:
        max_score = float(json.loads((bundle / "autograder.json").read_text(encoding="utf-8"))["max_score"])
    except Exception:  # noqa: BLE001 - a missing or malformed autograder.json: max score 0
        max_score = 0.0
    try:
        graded, _ = grade_bundle(bundle, root / "submission", root)
        data = results_json(graded)
    except BaseException:  # noqa: BLE001 - whatever fails, the learner gets a visible zero, never a crash
        why = traceback.format_exc()
        print(why, file=sys.stderr)
        data = failed_json(max_score, why, time.monotonic() - started)
    data["execution_time"] = int(math.ceil(time.monotonic() - started))
    write_json(out, data)
    return 0


# ------------------------------------------------------------------ the zip
def _add_tree(archive: zipfile.ZipFile, folder: Path, prefix: str, skip=lambda p: False) -> None:
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if "__pycache__" in relative.parts or path.suffix == ".pyc" or path.is_dir() or skip(relative):
            continue
        _add_file(archive, f"{prefix}/{relative.as_posix()}", path.read_bytes())


def _add_file(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # the same bytes each build
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
    archive.writestr(info, data)


def build_zip(root: Path | None, assignment: str, out_dir: Path | None = None) -> Path:
    """Write OUT_DIR/ASSIGNMENT.zip (default build/gradescope/) for ``assignment`` of the course at ``root``."""
    from grader.course import course_root
    from grader.course.build import build

    root = Path(root or course_root()).resolve()
    if not (root / "source" / assignment / f"{assignment}.py").is_file():
        raise FileNotFoundError(f"no assignment {assignment} under {root / 'source'}")
    package = Path(__file__).resolve().parents[3]  # this checkout: grader/, normlab/, pyproject.toml
    out = Path(out_dir or root / "build" / "gradescope") / f"{assignment}.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lncourse-gradescope-") as scratch:
        course = Path(scratch) / "course"
        (course / "source").mkdir(parents=True)
        for name in ("nbgrader_config.py", "pyproject.toml"):
            shutil.copy2(root / name, course / name)
        shutil.copytree(root / "source" / assignment, course / "source" / assignment,
                        ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
        build(course, [assignment])  # the source notebook, release/ and a fresh gradebook: no learner in it
        (course / "source" / assignment / f"{assignment}.py").unlink()  # the .ipynb says the same
        import nbformat

        from grader.grading.run.results import autograded_tests

        source_nb = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
        max_score = sum(float(source_nb.cells[i].metadata["nbgrader"].get("points", 0) or 0)
                        for i in autograded_tests(source_nb))
        temporary = out.with_name(f".{out.name}.tmp")
        with zipfile.ZipFile(temporary, "w") as archive:
            _add_file(archive, "setup.sh", SETUP_SH.replace("__PIP_PACKAGES__", " ".join(PIP_PACKAGES)).encode(), True)
            _add_file(archive, "run_autograder", RUN_AUTOGRADER.replace("__MAX__", repr(max_score)).encode(), True)
            _add_file(archive, "autograder.json", json.dumps(
                {"assignment": assignment, "max_score": max_score}, indent=1).encode())
            _add_file(archive, "course/nbgrader_config.py", (course / "nbgrader_config.py").read_bytes())
            _add_tree(archive, course / "source" / assignment, f"course/source/{assignment}")
            _add_tree(archive, course / "release" / assignment, f"course/release/{assignment}")
            _add_file(archive, "course/build/gradebook.db", (course / "build" / "gradebook.db").read_bytes())
            for name in ("pyproject.toml", "README.md", "constraints.txt"):
                _add_file(archive, f"package/{name}", (package / name).read_bytes())
            for name in ("grader", "normlab"):
                _add_tree(archive, package / name, f"package/{name}")
        temporary.replace(out)
    return out
