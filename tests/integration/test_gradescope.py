"""`python -m grader gradescope`: the zip, and its run_autograder on four submissions of 03_backward.

The zip is built once from a built course copy; run_autograder runs as Gradescope runs it (its own
AUTOGRADER_ROOT with source/ and submission/), with this course's .venv first on PATH, on a solved, a
blank, a partly right and a hostile notebook, all four at once. results.json is checked field by field:
per-test scores as the gradebook recorded them (not the maxima), hidden tests' output after publishing,
the instructor-only entry, and that the hostile notebook, which patches the checks and writes a forged
results.json of its own where Gradescope reads it, gets nothing.
"""
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from tests.conftest import subprocess_env
from tests.course_helpers import make_course, type_solutions
from tests.integration.test_hostile import TRICKS, WRONG

pytestmark = pytest.mark.slow
A = "03_backward"
POINTS = {"test_layer_norm_jacobian": 2.0, "test_jacobian_is_projection": 1.0, "test_layer_norm_vjp": 2.0,
          "test_layer_norm_backward": 2.0}
FORGED = {"score": 7.0, "tests": [{"name": "forged", "score": 7.0, "max_score": 7.0}]}


def hostile(release: Path, results: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(release, as_version=4)
    forge = (f"import json, os\nfor _ in range(3):\n    try:\n        os.makedirs({str(results)!r}, exist_ok=True)\n"
             f"        open({str(results / 'results.json')!r}, 'w').write(json.dumps({FORGED!r}))\n"
             "    except OSError:\n        pass\n")
    next(c for c in nb.cells if c.cell_type == "code").source += "\n" + TRICKS["patch_grader"] + forge
    for cell in nb.cells:
        if cell.id in WRONG:
            cell.source = WRONG[cell.id]
    return nb


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (results.json, seconds) of the four runs, and the zip's path."""
    base = tmp_path_factory.mktemp("gradescope")
    course = make_course(base, A)
    env = subprocess_env()
    built = subprocess.run([sys.executable, "-m", "grader", "gradescope", A, "--root", str(course)], env=env,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    zip_path = course / "build" / "gradescope" / f"{A}.zip"
    bundle = base / "bundle"
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(bundle)
    release, solved = course / "release" / A / f"{A}.ipynb", course / "solutions" / f"{A}.ipynb"
    partial = nbformat.read(release, as_version=4)
    type_solutions(partial, solved, 1)
    roots = {name: base / name for name in ("solved", "blank", "partial", "hostile")}
    notebooks = {"solved": nbformat.read(solved, as_version=4), "blank": nbformat.read(release, as_version=4),
                 "partial": partial, "hostile": hostile(release, roots["hostile"] / "results")}
    processes = {}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the course's .venv first
    for name, root in roots.items():
        (root / "submission").mkdir(parents=True)
        (root / "source").symlink_to(bundle)
        nbformat.write(notebooks[name], root / "submission" / f"{A}.ipynb")
        processes[name] = (time.monotonic(), subprocess.Popen(
            ["bash", str(bundle / "run_autograder")], env={**env, "AUTOGRADER_ROOT": str(root)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    found = {}
    for name, (_, process) in processes.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
        found[name] = (json.loads((roots[name] / "results" / "results.json").read_text()), output)
    return found, zip_path


def test_the_zip_follows_gradescopes_layout(runs):
    _, zip_path = runs
    with zipfile.ZipFile(zip_path) as archive:
        names = set(archive.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
        setup = archive.read("setup.sh").decode()
    assert {"setup.sh", "run_autograder", "autograder.json", "course/nbgrader_config.py",
            f"course/source/{A}/{A}.ipynb", f"course/release/{A}/{A}.ipynb", "course/build/gradebook.db",
            "package/pyproject.toml", "package/constraints.txt", "package/grader/__init__.py"} <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert "download.pytorch.org/whl/cpu" in setup and "-c package/constraints.txt" in setup
    assert not [n for n in names if n.startswith(("submitted/", "course/submitted", "solutions/")) or n.endswith(".py")
                and n.startswith("course/source")]
    subprocess.run(["bash", "-n", "/dev/stdin"], input=setup, text=True, check=True)


def by_name(data: dict) -> dict:
    return {t["name"]: t for t in data["tests"]}


def check_common(data: dict) -> None:
    assert set(data) >= {"score", "execution_time", "tests", "output"}
    assert isinstance(data["execution_time"], int) and 0 < data["execution_time"] < 120
    tests = by_name(data)
    assert set(tests) == {*POINTS, "Grading environment (instructors only)"}
    for name, possible in POINTS.items():
        assert tests[name]["max_score"] == possible
        assert tests[name]["visibility"] == "after_published"  # every 03 test cell holds hidden tests
        assert tests[name]["status"] in ("passed", "failed")
    instructor = tests["Grading environment (instructors only)"]
    assert instructor["visibility"] == "hidden" and instructor["score"] == 0 and "isolation: " in instructor["output"]
    assert data["score"] == sum(t["score"] for t in data["tests"])


def test_solved(runs):
    data, _ = runs[0]["solved"]
    check_common(data)
    assert data["score"] == 7.0
    assert all(by_name(data)[n]["score"] == p and by_name(data)[n]["status"] == "passed" for n, p in POINTS.items())


def test_blank(runs):
    data, _ = runs[0]["blank"]
    check_common(data)
    assert data["score"] == 0.0
    for name in POINTS:
        test = by_name(data)[name]
        assert test["score"] == 0.0 and test["status"] == "failed" and "not written yet" in test["output"]


def test_partly_right(runs):
    data, _ = runs[0]["partial"]
    check_common(data)
    scores = {n: t["score"] for n, t in by_name(data).items() if n in POINTS}
    assert scores == {"test_layer_norm_jacobian": 2.0, "test_jacobian_is_projection": 1.0, "test_layer_norm_vjp": 0.0,
                      "test_layer_norm_backward": 0.0}
    assert data["score"] == 3.0


def test_hostile_gets_nothing_and_cannot_forge_the_results(runs):
    data, _ = runs[0]["hostile"]
    check_common(data)
    assert data != FORGED and data["score"] == 0.0
    tests = by_name(data)
    assert all(tests[n]["score"] == 0.0 and tests[n]["status"] == "failed" for n in POINTS)
    jacobian_output = tests["test_layer_norm_jacobian"]["output"]
    assert jacobian_output and "Traceback" not in jacobian_output


def test_a_broken_bundle_is_a_visible_zero(tmp_path):
    """The grader's own failure (here: the course is missing from the bundle) never crashes and never passes."""
    root = tmp_path / "ag"
    (root / "source").mkdir(parents=True)
    (root / "submission").mkdir()
    (root / "source" / "autograder.json").write_text(json.dumps({"assignment": A, "max_score": 7.0}))
    env = subprocess_env()
    env.update(AUTOGRADER_ROOT=str(root), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    from grader.grading.export.gradescope import RUN_AUTOGRADER

    script = tmp_path / "run_autograder"
    script.write_text(RUN_AUTOGRADER.replace("__MAX__", "7.0"))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == 0.0 and data["tests"][0]["name"] == "grading failed"
    assert data["tests"][0]["visibility"] == "visible" and data["tests"][0]["max_score"] == 7.0
