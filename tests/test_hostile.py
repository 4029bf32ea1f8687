"""`grader grade` against hostile and malformed submissions of 03_backward.

Each hostile learner combines a wrong answer with a trick that fooled plain nbgrader
(patching numpy, rebinding names, AST transformers, lying objects, frame inspection,
re-seeding, reading or writing the course's files, killing processes, hanging, flooding).
Every one must get no unearned credit, the honest bystander full marks, nothing under
submitted/ or source/ may change, and re-grading must give the same scores.
"""
import csv
import hashlib
import json
import re
import shutil
import subprocess
import sys
from html import unescape

import nbformat
import pytest

from grader.build import SOLUTION_MARKER, build, script_to_notebook
from tests.conftest import ROOT, subprocess_env

# One malformed case pastes a test cell twice on purpose: nbformat warns about its duplicate id.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::nbformat.warnings.DuplicateCellId")]
ASSIGNMENT = "03_backward"
EXERCISES = ["layer_norm_jacobian", "layer_norm_vjp", "layer_norm_backward"]

WRONG = {
    "layer_norm_jacobian": "def layer_norm_jacobian(x, eps=1e-5):\n    return np.zeros((x.size, x.size))\n",
    "layer_norm_vjp": "def layer_norm_vjp(x, g, eps=1e-5):\n    return np.zeros_like(g)\n",
    "layer_norm_backward": ("def layer_norm_backward(dy, x, gamma, eps=1e-5):\n"
                            "    return np.zeros_like(x), np.zeros_like(gamma), np.zeros_like(gamma)\n"),
}

# Code placed before the wrong answers: each tries to make the checks pass anyway.
TRICKS = {
    "patch_numpy": "import numpy\nnumpy.allclose = lambda *a, **k: True\nnumpy.max = lambda *a, **k: 0.0\n"
                   "numpy.abs = lambda a, *r, **k: a * 0\n",
    "rebind_np": "class _Fake:\n    def __getattr__(self, name):\n        return lambda *a, **k: 0\nnp = _Fake()\n",
    "patch_grader": "import grader.compare, grader.checks.backward as b\n"
                    "grader.compare.assert_close = lambda *a, **k: None\nb.assert_close = lambda *a, **k: None\n"
                    "b.strict_array = lambda v, *a, **k: v\nb.check_layer_norm_jacobian = lambda *a, **k: None\n",
    "ast_transformer": "import ast\nclass _Empty(ast.NodeTransformer):\n"
                       "    def visit_Module(self, node):\n        node.body = []\n        return node\n"
                       "get_ipython().ast_transformers.append(_Empty())\n",
    "input_transformer": "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n",
    "traceback_hook": "import sys\nsys.excepthook = lambda *a: None\n"
                      "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n",
    "lying_objects": "class Liar(np.ndarray):\n    def __eq__(self, other):\n        return True\n"
                     "    def __array_ufunc__(self, *a, **k):\n        return np.zeros(())\n",
    "frames": "import sys\ndef _steal():\n    f = sys._getframe(2)\n    return f.f_locals.get('expected')\n",
    "reseed": "np.random.seed(0)\nimport random\nrandom.seed(0)\nnp.random.default_rng = lambda *a, **k: None\n",
    "environment": "import os\nGRADING = bool(os.environ.get('NBGRADER_EXECUTION'))\n",
    "read_tests": "import os\nhere = os.getcwd()\nfor _ in range(8):\n    here = os.path.dirname(here)\n"
                  "    for name in ('source/03_backward/03_backward.ipynb', 'source/03_backward/03_backward.py'):\n"
                  "        try:\n            print('LEAKED', open(os.path.join(here, name)).read()[:100])\n"
                  "        except OSError:\n            pass\n",
    "write_gradebook": "import os\nhere = os.getcwd()\nfor _ in range(8):\n    here = os.path.dirname(here)\n"
                       "    try:\n        open(os.path.join(here, 'build', 'gradebook.db'), 'w').write('x')\n"
                       "    except OSError:\n        pass\n",
    "delete_course": "import os, shutil\nhere = os.getcwd()\nfor _ in range(8):\n    here = os.path.dirname(here)\n"
                     "    for name in ('source', 'submitted', 'release', 'build', 'nbgrader_config.py'):\n"
                     "        p = os.path.join(here, name)\n"
                     "        shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else None\n",
    "kill_parent": "import os, signal\nfor pid in (os.getppid(), -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
                   "    except OSError:\n        pass\n",
    "exit_early": "import os\nos._exit(0)\n",
    "hang": "while True:\n    pass\n",
    "flood": "import sys\nfor _ in range(200000):\n    print('x' * 1000)\n",
    "memory_hog": "hog = np.ones(10**11)\n",
}


# Tricks whose wrong answers use the trick itself.
TRICK_ANSWERS = {
    "lying_objects": {"layer_norm_jacobian": "def layer_norm_jacobian(x, eps=1e-5):\n"
                                             "    return np.zeros((x.size, x.size)).view(Liar)\n"},
    "frames": {"layer_norm_jacobian": "def layer_norm_jacobian(x, eps=1e-5):\n    return _steal()\n"},
    "environment": {"layer_norm_vjp": "def layer_norm_vjp(x, g, eps=1e-5):\n"
                                      "    return np.zeros_like(g) if GRADING else g\n"},
}


def solution_sources():
    source = script_to_notebook(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py")  # the .ipynb is git-ignored
    return {c.id: SOLUTION_MARKER.sub("", c.source) for c in source.cells if c.id in EXERCISES}


def submission(answers: dict, trick: str = "") -> nbformat.NotebookNode:
    """The release notebook with demo cells removed, the trick in the imports cell, and answers."""
    nb = nbformat.read(ROOT / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    kept = []
    for cell in nb.cells:
        nbgrader = cell.metadata.get("nbgrader", {})
        if cell is first_code:
            cell.source += "\n" + trick
        elif cell.cell_type == "code" and not nbgrader:
            continue  # demo cells: a learner may delete them, and they cost time
        if cell.id in answers:
            cell.source = answers[cell.id]
        kept.append(cell)
    nb.cells = kept
    return nb


def tree_digest(path):
    digest = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            digest.update(str(p.relative_to(path)).encode() + p.read_bytes())
    return digest.hexdigest()


def make_course(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    for name in ["nbgrader_config.py", "pyproject.toml"]:
        shutil.copy2(ROOT / name, course / name)
    (course / "source").mkdir()
    shutil.copytree(ROOT / "source" / ASSIGNMENT, course / "source" / ASSIGNMENT, ignore=shutil.ignore_patterns("*.ipynb"))
    build(course, [ASSIGNMENT])
    return course


def submit(course, student, content):
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    if isinstance(content, bytes):
        (folder / f"{ASSIGNMENT}.ipynb").write_bytes(content)
    elif isinstance(content, tuple):  # (file name, notebook)
        nbformat.write(content[1], folder / content[0])
    else:
        nbformat.write(content, folder / f"{ASSIGNMENT}.ipynb")


def grade(course, timeout=20):
    result = subprocess.run([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout",
                             str(timeout)], capture_output=True, text=True, env=subprocess_env(), timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    with open(course / "build" / "grades.csv", newline="") as f:
        scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}
    messages = json.loads((course / "build" / "grading" / ASSIGNMENT / "messages.json").read_text())
    return scores, messages, result.stdout


def malformed_submissions(right):
    text = nbformat.writes(right)
    duplicated = nbformat.reads(text, as_version=4)
    test_cell = next(c for c in duplicated.cells if c.id == "test_layer_norm_jacobian")
    duplicated.cells.append(nbformat.from_dict(json.loads(json.dumps(test_cell))))
    bad_schema = nbformat.reads(text, as_version=4)
    for cell in bad_schema.cells:
        if "nbgrader" in cell.metadata:
            cell.metadata["nbgrader"]["schema_version"] = 99
    deleted = nbformat.reads(text, as_version=4)
    deleted.cells = [c for c in deleted.cells if not c.id.startswith("test_")]
    return {
        "truncated_json": text[: len(text) // 2].encode(),
        "latin1_encoding": text.replace("derivative", "dérivée").encode("latin-1", errors="replace") + "é".encode("latin-1"),
        "not_a_notebook": b"\x89PNG\r\n\x1a\n not a notebook",
        "json_not_notebook": b'{"cells": 3}',
        "bad_schema_version": bad_schema,
        "test_cell_pasted_twice": duplicated,
        "deleted_test_cells": deleted,
        "renamed_file": ("my_work.ipynb", right),
    }


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("hostile"))
    right = solution_sources()
    submit(course, "honest", submission(right))
    for name, trick in TRICKS.items():
        submit(course, f"hostile_{name}", submission({**WRONG, **TRICK_ANSWERS.get(name, {})}, trick))
    for name, content in malformed_submissions(submission(right)).items():
        submit(course, f"malformed_{name}", content)
    before = {folder: tree_digest(course / folder) for folder in ("submitted", "source")}
    scores, messages, stdout = grade(course)
    return course, scores, messages, stdout, before


def test_honest_bystander_gets_full_marks(hostile_class):
    _, scores, _, _, _ = hostile_class
    assert scores["honest"] == 7.0


@pytest.mark.parametrize("trick", list(TRICKS))
def test_trick_earns_nothing(hostile_class, trick):
    _, scores, _, _, _ = hostile_class
    assert scores[f"hostile_{trick}"] == 0.0


@pytest.mark.parametrize("case", ["truncated_json", "latin1_encoding", "not_a_notebook", "json_not_notebook",
                                  "bad_schema_version", "test_cell_pasted_twice", "deleted_test_cells", "renamed_file"])
def test_malformed_submission_gets_no_unearned_credit_and_a_message(hostile_class, case):
    _, scores, messages, _, _ = hostile_class
    repairable = {"bad_schema_version", "test_cell_pasted_twice"}  # the learner's (correct) work is still graded
    assert scores[f"malformed_{case}"] == (7.0 if case in repairable else 0.0)
    assert messages[f"malformed_{case}"], f"no message explains {case}"


def test_dead_hung_and_flooding_submissions_are_explained(hostile_class):
    _, _, messages, _, _ = hostile_class
    assert any("exited" in m for m in messages["hostile_exit_early"])
    assert any("time limit" in m for m in messages["hostile_hang"])


def test_nothing_under_submitted_or_source_changes(hostile_class):
    course, _, _, _, before = hostile_class
    assert {folder: tree_digest(course / folder) for folder in ("submitted", "source")} == before
    assert (course / "nbgrader_config.py").exists() and (course / "build" / "gradebook.db").stat().st_size > 1000


def test_feedback_never_shows_the_hidden_tests(hostile_class):
    course, _, _, _, _ = hostile_class
    hidden = "check_layer_norm_jacobian(layer_norm_jacobian, d=9, eps=1e-5, seed=5"
    html = (course / "feedback" / "honest" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    text = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html)))
    assert "check_layer_norm_jacobian(layer_norm_jacobian)" in text and hidden not in text


def test_regrading_is_idempotent(hostile_class):
    """Grading the whole class again (gradebook, autograded/ and feedback/ already there) changes no score."""
    course, first, messages, _, before = hostile_class
    second, again, _ = grade(course)
    assert second == first and again == messages
    assert {folder: tree_digest(course / folder) for folder in ("submitted", "source")} == before
