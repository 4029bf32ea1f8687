"""`grader grade` against hostile and malformed submissions of 03_backward.

Each hostile learner combines a wrong answer with a trick that fooled plain nbgrader
(patching numpy, rebinding names, AST transformers, lying objects, frame inspection,
re-seeding, reading or writing the course's files, killing processes, hanging, flooding).
Every one must get no unearned credit, the honest bystander full marks, nothing under
submitted/ or source/ may change, and re-grading must give the same scores.

The held-out class added to it (graded in the same run): learners who look for classmates'
work and the instructor's source from inside the sandbox, forge results (also from a daemon
that outlives its notebook), exhaust time, memory, processes and the grader's channel, raise
huge errors, inject script into their feedback, or delegate an exercise to torch or the
course's own helpers; folders with hostile names and contents; and honest learners with
unusual habits (magics, helper modules, data files, deep folders, slow functions), who must
score full marks.
"""
import contextlib
import csv
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import namedtuple
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import numpy as np
import pytest

from tests import course_helpers
from tests.conftest import ROOT, subprocess_env
from tests.course_helpers import make_course, submit

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


# --- held-out hostile class: attacks a student would try next ---------------------------------------
#
# The attack code below really works when the files it looks for are reachable: the tests
# test_steal_works_where_the_course_is_reachable and test_forged_result_would_be_accepted run it
# in this process against a course tree first. In the sandbox it must find nothing and earn nothing.

# Where a course tree could be seen from a learner cell: the working folder and its parents, the
# Python installation and the checkout its editable install points to, other processes' cwd and
# root, mount points, the usual shared folders. _ONLY_ROOTS (set by the in-process checks) limits it.
FINDER = r'''
import glob as _glob, json as _json, os as _os, re as _re, sys as _sys, time as _time
_ONLY_ROOTS = globals().get("_ONLY_ROOTS")
def _roots():
    if _ONLY_ROOTS:
        return list(_ONLY_ROOTS)
    found = []
    def add(path, parents=0):
        for _ in range(parents + 1):
            if path and path not in found:
                found.append(path)
            path = _os.path.dirname(path)
    add(_os.getcwd(), 30)
    for entry in list(_sys.path) + [_sys.prefix, _sys.base_prefix, _sys.exec_prefix]:
        entry = _os.path.abspath(entry or ".")
        add(entry, 4)
        for finder in _glob.glob(_os.path.join(entry, "__editable__*")) + _glob.glob(_os.path.join(entry, "*.pth")):
            try:
                text = open(finder).read()
            except OSError:
                continue
            for path in _re.findall(r"['\"](/[^'\"]+)['\"]", text) + [l.strip() for l in text.splitlines() if l.startswith("/")]:
                add(path, 3)
    for pid in (_os.listdir("/proc") if _os.path.isdir("/proc") else []):
        if pid.isdigit():
            for what in ("cwd", "root"):
                try:
                    target = _os.readlink("/proc/%s/%s" % (pid, what))
                except OSError:
                    add("/proc/%s/%s" % (pid, what))
                    continue
                add(target, 6)
                if what == "root" and target != "/":
                    add("/proc/%s/root" % pid)
    try:
        for line in open("/proc/self/mountinfo"):
            fields = line.split()
            add(fields[4], 2)
            add(fields[3], 2)
    except (OSError, IndexError):
        pass
    for path in ("/tmp", "/dev/shm", "/home", "/root", "/srv", "/var/tmp", "/work", "/mnt", "/opt", "/run", "/data", "/"):
        add(path)
    return found
_PATTERNS = ("source/03_backward/03_backward.py", "source/03_backward/*.ipynb", "solutions/03_backward.ipynb",
             "submitted/*/03_backward/*.ipynb", "autograded/*/03_backward/*.ipynb", "feedback/*/03_backward/*.html",
             "build/grading/03_backward/submitted/*/03_backward/*.ipynb", "build/grading/03_backward/results/*/*.json",
             "build/gradebook.db", "gradebook.db", "*/03_backward/*.ipynb")
_NEAR = ("*.ipynb", "*.py", "*/*.ipynb", "*/*.py", "*/*/*.ipynb")  # the working folder's links, as well
def _course_files(budget):
    """Files of a course: targeted look-ups from every root, then a walk of the machine within ``budget`` s."""
    start, found = _time.time(), []
    roots = _roots()
    for root in roots:
        for pattern in _PATTERNS + (_NEAR if root == _os.getcwd() else ()):
            try:
                found += [p for p in _glob.glob(_os.path.join(root, pattern)) if p not in found]
            except Exception:
                pass
    for root in roots:
        if _time.time() - start > budget:
            break
        for folder, dirs, names in _os.walk(root):
            if _time.time() - start > budget:
                break
            dirs[:] = [d for d in dirs if d not in ("proc", "sys") and not d.startswith("site-packages")]
            for name in names:
                path = _os.path.join(folder, name)
                if ("03_backward" in path and name.endswith((".ipynb", ".py", ".json", ".html"))
                        or name == "gradebook.db") and path not in found:
                    found.append(path)
    return found
'''  # noqa: E501 - a hostile submission's code, as a learner might write it

# Copy a correct function out of whatever was found: the instructor's source, solutions, a classmate.
STEAL = FINDER + r'''
import ast as _ast
_WANT = ("layer_norm_jacobian", "layer_norm_vjp", "layer_norm_backward")
_stolen, _looked_at = {}, []
def _plausible(name, fn):
    x, g = np.array([1.0, 3.0, 2.0, 7.0]), np.array([0.5, -1.0, 2.0, 0.25])
    try:
        out = fn(x) if name == "layer_norm_jacobian" else fn(x, g) if name == "layer_norm_vjp" else fn(g[None], x[None], np.ones(4))[0]
        out = np.asarray(out, dtype=float)
        return out.shape[-1] == 4 and bool(np.all(np.isfinite(out))) and float(np.abs(out).sum()) > 0
    except Exception:
        return False
def _harvest(text):
    try:
        document = _json.loads(text)
        sources = ["".join(c.get("source", "")) for c in document.get("cells", []) if c.get("cell_type") == "code"]
    except Exception:
        sources = [text]
    for source in sources:
        if "def layer_norm" not in source:
            continue
        try:
            tree = _ast.parse(source)
        except Exception:
            continue
        for node in tree.body:
            if isinstance(node, _ast.FunctionDef) and node.name in _WANT and node.name not in _stolen:
                space = {"np": np}
                try:
                    exec(_ast.get_source_segment(source, node), space)
                except Exception:
                    continue
                if _plausible(node.name, space[node.name]):
                    _stolen[node.name] = space[node.name]
# a walk of at most 3 s, well inside the 6-s cell limit however busy the machine (at 8 s it met the limit)
for _path in _course_files(globals().get("_BUDGET", 3.0)):
    if len(_stolen) == len(_WANT):
        break
    try:
        if _path.endswith((".ipynb", ".py")) and _os.path.getsize(_path) < 5_000_000:
            _harvest(open(_path, errors="replace").read())
            _looked_at.append(_path)
    except Exception:
        pass
print("LOOKED AT " + _json.dumps({"cwd": _os.getcwd(), "files": _looked_at}))
'''  # noqa: E501 - a hostile submission's code, as a learner might write it
STEAL_ANSWERS = {name: WRONG[name] + f"{name} = _stolen.get({name!r}, {name})\n" for name in EXERCISES}

# A result that says every test passed, with the digests the record phase checks, written wherever a
# course tree is found; the learner's autograded notebook overwritten by the instructor's; a failing
# result for the honest classmate. FORGED-42 (built at run time) marks every file it writes.
FORGE = FINDER + r'''
def _forge(students, budget=4.0):
    mark = "FOR" + "GED-" + str(6 * 7)
    written = []
    tests = ["test_layer_norm_jacobian", "test_jacobian_is_projection", "test_layer_norm_vjp", "test_layer_norm_backward"]
    for root in _roots():
        if not any(_os.path.isdir(_os.path.join(root, d)) for d in ("submitted", "autograded", "build", "source")):
            continue
        source = _os.path.join(root, "source", "03_backward", "03_backward.ipynb")
        for student, passed in students:
            result = {"schema": 2, "assignment": "03_backward", "student": student, "notebook": "03_backward",
                      "source_digest": "", "notebook_digest": "", "cells": {}, "digests": {}, "notes": [mark],
                      "isolation": None, "tests": {t: {"status": "passed" if passed else "failed", "message": mark} for t in tests}}
            autograded = _os.path.join(root, "autograded", student, "03_backward", "03_backward.ipynb")
            try:
                import nbformat as _nbformat
                from grader.grading.run import results as _results
                nb = _nbformat.read(autograded, as_version=4)
                result["notebook_digest"] = _results.notebook_digest(nb)
                result["source_digest"] = _results.file_digest(source)
                result["digests"] = {str(i): _results.cell_digest(c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
            except Exception:
                pass
            for folder in (_os.path.join(root, "build", "grading", "03_backward", "results", student),
                           _os.path.join(root, "results", student)):
                try:
                    _os.makedirs(folder, exist_ok=True)
                    with open(_os.path.join(folder, "03_backward.json"), "w") as f:
                        _json.dump(result, f)
                    written.append(folder)
                except Exception:
                    pass
            if passed:
                try:
                    text = open(source).read()
                    with open(autograded, "w") as f:
                        f.write(text.replace("Checks the Jacobian", "Checks the Jacobian " + mark, 1))
                    written.append(autograded)
                except Exception:
                    pass
        try:
            with open(_os.path.join(root, mark + ".txt"), "w") as f:
                f.write(mark)
            written.append(root)
        except Exception:
            pass
    for path in () if _ONLY_ROOTS else ("/tmp/../results/hostile_forge/03_backward.json",
                                        "/tmp/results/hostile_forge/03_backward.json"):
        try:
            _os.makedirs(_os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(mark)
        except Exception:
            pass
    return written
'''  # noqa: E501 - a hostile submission's code, as a learner might write it

# A daemon that outlives its cell (setsid, double fork, SIGTERM and SIGHUP ignored) and keeps forging for
# minutes, so that it overwrites the grader's own result once that is written. ESCAPED-42 in its command
# line lets the tests find it. The cell itself forges once at once, for itself and against a classmate.
DAEMON_BODY = FORGE + r'''
import signal
for _sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(_sig, signal.SIG_IGN)
_deadline = _time.time() + 240
while _time.time() < _deadline:
    _forge([("hostile_forge_daemon", True), ("honest", False)])
    _time.sleep(0.5)
'''
FORGE_DAEMON = FORGE + f"DAEMON_BODY = {DAEMON_BODY!r}\n" + r'''
_forged = _forge([("hostile_forge_daemon", True), ("honest", False)])
print("FORGED " + _json.dumps(_forged))
import subprocess
with open("daemon_body.py", "w") as _f:
    _f.write(DAEMON_BODY)
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.execv(_sys.executable, [_sys.executable, _os.path.abspath("daemon_body.py"), "ESC" + "APED-" + str(6 * 7)])
    _os._exit(0)
_os.wait()
subprocess.Popen(["setsid", "sh", "-c", "trap '' TERM HUP; sleep 240; echo " + "ESC" + "APED-" + str(6 * 7) + " > /tmp/escaped"],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
_time.sleep(1.0)
_alive = 0
for _pid in filter(str.isdigit, _os.listdir("/proc")):
    try:
        _command = open("/proc/%s/cmdline" % _pid, "rb").read()
    except OSError:
        continue
    _alive += b"APED-" in _command or b"sleep 240" in _command
print("DAEMONS %d" % _alive)
'''  # noqa: E501 - a hostile submission's code, as a learner might write it

# The cell timeout every grading of this class runs with: short, because the four learners who hang or sleep cost
# it each (and again at the re-grade: a limit hit is never cached), yet over 10x what an honest notebook takes here
# (0.5 s for all its cells).
TIMEOUT = 6

# Limits. Correct functions that sleep just under the cell timeout (TIMEOUT) on every call: the first
# test cell alone calls layer_norm_jacobian 14 times, so without one budget per test cell this notebook would
# run for minutes (calls x timeout). It is stopped at its first test cell, as nbgrader stops a notebook
# whose cell times out.
def slow_calls(right: dict) -> dict:
    return {name: source.replace('"""\n', '"""\n    import time\n    time.sleep(%d)\n' % (TIMEOUT - 1), 1)
            for name, source in right.items()}


HUGE_ERRORS = {
    "layer_norm_jacobian": "Huge = type('E' * 1_000_000, (Exception,), {})\n"
                           "def layer_norm_jacobian(x, eps=1e-5):\n    raise Huge('m' * 5_000_000)\n",
    "layer_norm_vjp": "def layer_norm_vjp(x, g, eps=1e-5):\n    def deeper(n):\n        return deeper(n + 1)\n"
                      "    return deeper(0)\n",
    "layer_norm_backward": "def layer_norm_backward(dy, x, gamma, eps=1e-5):\n"
                           "    raise ValueError('\\n'.join('line %d ' % i + 'x' * 100 for i in range(100000)))\n",
}
HUGE_ERROR_CELL = "raise type('F' * 1_000_000, (Exception,), {})('\\n'.join('y' * 200 for _ in range(50000)))\n"
# The sandbox swaps every pipe it reads for one nobody writes (keeping the grader's open), then the
# next cell is big: the grader's write must not block past its deadline.
STOP_READING = r'''
import os
_keep = []
for _name in os.listdir("/proc/self/fd"):
    _fd = int(_name)
    try:
        _target = os.readlink("/proc/self/fd/%d" % _fd)
        _flags = int(next(l for l in open("/proc/self/fdinfo/%d" % _fd) if l.startswith("flags:")).split()[1], 8)
    except (OSError, StopIteration, ValueError):
        continue
    if _fd > 2 and _target.startswith("pipe:") and _flags & 3 == 0:
        _keep.append(os.dup(_fd))
        _r, _w = os.pipe()
        _keep.append(_w)
        os.dup2(_r, _fd)
'''
# 200 detached shell loops that spin (each its own session), then a Python fork bomb whose children
# idle: processes are bounded by the pids limit, but nothing bounds the CPU the loops take from the learners
# graded at the same time unless the sandbox's CPU share is. Two answer cells sleep FORK_BOMB_SLEEP s each (well
# under the timeout) while the loops spin; the loops stop before this notebook's later test cells, so its own
# grade and messages do not depend on the machine's load. Short: the loops spin a whole core while they live,
# at the first grading and again at the re-grade.
FORK_BOMB_SLEEP = 2
FORK_BOMB = r'''
import os, time
os.system("for i in $(seq 200); do (setsid timeout -s KILL SPIN_SECONDS sh -c 'while :; do :; done' &) ; done")
_forked = 0
for _ in range(100000):
    try:
        if os.fork() == 0:
            while True:
                try:
                    os.fork()
                except OSError:
                    time.sleep(0.5)
    except OSError:
        break
    _forked += 1
print("forked %d" % _forked)
'''.replace("SPIN_SECONDS", str(2 * FORK_BOMB_SLEEP + 2))
MEMORY_CHUNKS = r'''
import os
_kids = []
for _ in range(4):  # each child has its own address-space limit: only a limit on the whole tree stops them
    _pid = os.fork()
    if _pid == 0:
        _hog = []
        try:
            while True:
                _hog.append(np.ones(2**27))  # 1 GiB, written
        finally:
            os._exit(0)
    _kids.append(_pid)
for _where in ("/dev/shm/fill", "/tmp/fill", "fill"):
    try:
        with open(_where, "wb") as _f:
            for _ in range(4096):
                _f.write(b"x" * 2**20)
    except OSError:
        pass
_hog = []
try:
    for _ in range(64):
        _hog.append(np.ones(2**27))
except MemoryError:
    pass
for _pid in _kids:
    os.waitpid(_pid, 0)
'''
CLOSE_CHANNEL = "import os\nos.closerange(0, 4096)\n"

TRICKS.update({
    "steal": STEAL,  # its folder also holds links to the honest classmate's submission and to the source
    "forge_daemon": FORGE_DAEMON,
    "slow_calls": "",
    "huge_errors": HUGE_ERROR_CELL,
    "stop_reading": STOP_READING,
    "close_channel": CLOSE_CHANNEL,
    "fork_bomb": FORK_BOMB,
    "memory_chunks": MEMORY_CHUNKS,
})
TRICK_ANSWERS.update({
    "steal": STEAL_ANSWERS,
    "slow_calls": slow_calls,  # from the correct answers (a function of them)
    "huge_errors": HUGE_ERRORS,
    "stop_reading": {"layer_norm_jacobian": WRONG["layer_norm_jacobian"] + "#" + "x" * 300_000 + "\n"},
    "fork_bomb": {name: f"import time\ntime.sleep({FORK_BOMB_SLEEP})\n" + WRONG[name]
                  for name in ("layer_norm_jacobian", "layer_norm_vjp")},
})
# An honest learner graded right after an attacker (names sort together), so both run at the same time.
NEIGHBOURS = ["fork_bomb", "memory_chunks"]
MARKS = ["FORGED-42", "ESCAPED-42"]
SANDBOX_UIDS = range(61000, 61064)


def solution_sources():
    return course_helpers.solution_sources(ASSIGNMENT, EXERCISES)


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
    """Names, file contents and link targets under ``path``; links are not followed (one points
    at /etc/shadow, which changes whenever any process on the machine adds a user)."""
    digest = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_symlink():
            digest.update(str(p.relative_to(path)).encode() + b" -> " + os.readlink(p).encode())
        elif p.is_file():
            digest.update(str(p.relative_to(path)).encode() + p.read_bytes())
    return digest.hexdigest()


def grade(course, timeout=TIMEOUT, unrecordable=0):
    """Scores, messages and stdout of ``grader grade``; ``unrecordable``: how many learners the grader
    may fail to record (exit code 3, named on stderr), e.g. folder names nbgrader cannot store."""
    result = subprocess.run([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout",
                             str(timeout)], capture_output=True, text=True, env=subprocess_env(), timeout=1200)
    if unrecordable:
        assert result.returncode == 3, result.stdout + result.stderr
        assert f"could not finish {unrecordable} learner(s)" in result.stderr, result.stderr
    else:
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
        "latin1_encoding": (text.replace("derivative", "dérivée").encode("latin-1", errors="replace")
                            + "é".encode("latin-1")),
        "not_a_notebook": b"\x89PNG\r\n\x1a\n not a notebook",
        "json_not_notebook": b'{"cells": 3}',
        "bad_schema_version": bad_schema,
        "test_cell_pasted_twice": duplicated,
        "deleted_test_cells": deleted,
        "renamed_file": ("my_work.ipynb", right),
    }


def cell_scores(course, student) -> dict[str, float]:
    """grade_id -> points of each test cell, from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'build' / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return {g.name: float(g.score) for g in notebook.grades}


TESTS_OF = {"layer_norm_jacobian": {"test_layer_norm_jacobian": 2.0, "test_jacobian_is_projection": 1.0},
            "layer_norm_vjp": {"test_layer_norm_vjp": 2.0}, "layer_norm_backward": {"test_layer_norm_backward": 2.0}}


# --- honest but unusual: every case sits in a solution cell, so a case Jupyter runs and we do not costs points
def code_cell(source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source)


def with_cells(nb: nbformat.NotebookNode, after: str, cells: list) -> nbformat.NotebookNode:
    """``nb`` with ``cells`` (demo cells, no nbgrader metadata) inserted after the cell with id ``after``."""
    index = next(i for i, c in enumerate(nb.cells) if c.id == after) + 1
    nb.cells[index:index] = cells
    return nb


UNUSUAL = {  # case -> (learner, exercise whose solution cell holds it)
    "matplotlib_inline": ("unusual_magics", "layer_norm_jacobian"),
    "shell_escape": ("unusual_magics", "layer_norm_jacobian"),
    "autosave": ("unusual_magics", "layer_norm_vjp"),
    "time_cell_magic": ("unusual_magics", "layer_norm_backward"),
    "getuser": ("unusual_environment", "layer_norm_jacobian"),
    "mkdtemp": ("unusual_environment", "layer_norm_vjp"),
    "deep_tree_300": ("unusual_environment", "layer_norm_backward"),
    "prints_a_lot": ("unusual_files", "layer_norm_jacobian"),
    "helper_module": ("unusual_files", "layer_norm_vjp"),
    "data_file_read_by_a_demo_cell": ("unusual_files", "layer_norm_backward"),
    # 8 calls in its test cell: 2.4 s of 6
    "slow_function_a_third_of_a_second_per_call": ("unusual_slow", "layer_norm_vjp"),
}


def unusual_submissions(right: dict) -> dict:
    """learner -> (notebook, {extra file name: bytes}); all correct work that Jupyter runs as written."""
    jacobian, vjp, backward = (right[e] for e in EXERCISES)
    slow_vjp = vjp.replace('"""\n', '"""\n    import time\n    time.sleep(0.3)\n', 1)
    scaled = backward.replace("return dx,", "return SCALE * dx,", 1)
    assert slow_vjp != vjp and scaled != backward
    return {
        "unusual_magics": (submission({
            "layer_norm_jacobian": ("%matplotlib inline\n!echo hi\nlisting = !ls\nassert listing is not None\n"
                                    + jacobian),
            "layer_norm_vjp": "%autosave 0\n" + vjp,
            "layer_norm_backward": "%%time\n" + backward}), {}),
        "unusual_environment": (submission({
            "layer_norm_jacobian": "import getpass, os\nUSER = getpass.getuser()\nassert USER and "
                                   "os.path.isdir(os.path.expanduser('~'))\n" + jacobian,
            "layer_norm_vjp": "import os, tempfile\nSCRATCH = tempfile.mkdtemp()\n"
                              "open(os.path.join(SCRATCH, 'note.txt'), 'w').write('x')\n" + vjp,
            "layer_norm_backward": ("import os\nos.makedirs(os.path.join(*['deep'] * 300), exist_ok=True)\n"
                                    + backward)}),
            {}),
        "unusual_files": (with_cells(submission({
            "layer_norm_jacobian": "for k in range(10000):\n    print(k, 'x' * 100)\n" + jacobian,
            "layer_norm_vjp": "from helpers import layer_norm_vjp\n",
            "layer_norm_backward": scaled}), "layer_norm_jacobian",
            [code_cell("SCALE = float(open('scale.txt').read())\nprint('scale', SCALE)")]),
            {"helpers.py": ("import numpy as np\n\n\n" + vjp).encode(), "scale.txt": b"1.0\n"}),
        "unusual_slow": (submission({**right, "layer_norm_vjp": slow_vjp}), {}),
    }


# --- delegation: a graded function that hands the whole job to a library or the course ----------------
DELEGATING = {  # learner -> {exercise: delegating answer}; its other exercises are answered correctly
    "delegate_torch": {
        "layer_norm_jacobian": "import torch\ndef layer_norm_jacobian(x, eps=1e-5):\n"
                               "    f = lambda t: torch.nn.functional.layer_norm(t, t.shape, eps=eps)\n"
                               "    return torch.autograd.functional.jacobian(f, torch.tensor(x)).numpy()\n",
        "layer_norm_vjp": "import torch\ndef layer_norm_vjp(x, g, eps=1e-5):\n"
                          "    t = torch.tensor(x, requires_grad=True)\n"
                          "    torch.nn.functional.layer_norm(t, t.shape, eps=eps).backward(torch.tensor(g))\n"
                          "    return t.grad.numpy()\n",
        "layer_norm_backward": "import torch\ndef layer_norm_backward(dy, x, gamma, eps=1e-5):\n"
                               "    norm = torch.nn.LayerNorm(x.shape[-1], eps=eps).double()\n"
                               "    with torch.no_grad():\n        norm.weight.copy_(torch.tensor(gamma))\n"
                               "    t = torch.tensor(x, requires_grad=True)\n"
                               "    norm(t).backward(torch.tensor(dy))\n"
                               "    return t.grad.numpy(), norm.weight.grad.numpy(), norm.bias.grad.numpy()\n",
    },
    "delegate_course": {
        "layer_norm_jacobian": "from grader.oracles import layer_norm_jacobian as _jacobian\n"
                               "def layer_norm_jacobian(x, eps=1e-5):\n    return _jacobian(x, eps)\n",
        "layer_norm_vjp": "import torch, normlab.placement\ndef layer_norm_vjp(x, g, eps=1e-5):\n"
                          "    t = torch.tensor(x, requires_grad=True)\n"
                          "    normlab.placement._layer_norm(t, eps).backward(torch.tensor(g))\n"
                          "    return t.grad.numpy()\n",
        "layer_norm_backward": "import grader.oracles\ndef layer_norm_backward(dy, x, gamma, eps=1e-5):\n"
                               "    return grader.oracles.layer_norm_grads(dy, x, gamma, eps)\n",
    },
    # The same library calls, reached around the wrappers: the aten operator, torch.layer_norm unwrapped.
    "delegate_evasions": {
        "layer_norm_vjp": "import torch\ndef layer_norm_vjp(x, g, eps=1e-5):\n"
                          "    t = torch.tensor(x, requires_grad=True)\n"
                          "    torch.ops.aten.native_layer_norm(t, list(t.shape), None, None, "
                          "eps)[0].backward(torch.tensor(g))\n"
                          "    return t.grad.numpy()\n",
        "layer_norm_backward": "import torch\n_ln = torch.layer_norm\nwhile hasattr(_ln, '__wrapped__'):\n"
                               "    _ln = _ln.__wrapped__\ndef layer_norm_backward(dy, x, gamma, eps=1e-5):\n"
                               "    t, w = torch.tensor(x, requires_grad=True), torch.tensor(gamma, "
                               "requires_grad=True)\n"
                               "    b = torch.zeros_like(w, requires_grad=True)\n"
                               "    _ln(t, (x.shape[-1],), w, b, eps).backward(torch.tensor(dy))\n"
                               "    return t.grad.numpy(), w.grad.numpy(), b.grad.numpy()\n",
    },
}
DELEGATED = [(learner, exercise) for learner, answers in DELEGATING.items() for exercise in EXERCISES]

# --- verdicts a learner's process could forge (tests/integration/test_forged_verdicts.py has the techniques) -----
JACOBIAN_VJP = ("def layer_norm_vjp(x, g, eps=1e-5):\n    d = x.size\n    c = x - x.mean()\n"
                "    s = 1 / np.sqrt((c * c).mean() + eps)\n    xh = c * s\n"
                "    J = s * (np.eye(d) - 1 / d - np.outer(xh, xh) / d)\n    return J.T @ g\n")
FORGING = {  # learner -> (answers replacing the right ones, code in the imports cell, the points it must get)
    "forge_memory_jacobian": ({"layer_norm_vjp": JACOBIAN_VJP}, "", 7.0),
    "forge_memory_reset_peak": ({"layer_norm_vjp": JACOBIAN_VJP.replace(
        "    return J.T @ g", "    v = J.T @ g\n    del J\n    import tracemalloc\n    tracemalloc.reset_peak()\n"
                              "    return v")},
                                "", 7.0),
    "forge_mutation_blanked": ({"layer_norm_vjp": "def layer_norm_vjp(x, g, eps=1e-5):\n    x -= x.mean()\n"
                                                  "    s = 1 / np.sqrt((x * x).mean() + eps)\n    x *= s\n"
                                                  "    return s * (g - g.mean() - x * (g * x).mean())\n"},
                               "from grader.grading.sandbox import worker as _w\n_call = _w.Worker.call\n"
                               "def _forged(self, message):\n    reply = _call(self, message)\n"
                               "    reply.update(mutated=[], delegated=[], peak=0)\n    return reply\n"
                               "_w.Worker.call = _forged\n", 5.0),
    "honest_pretty_json": ({}, "import json, functools\njson.dumps = functools.partial(json.dumps, indent=1)\n", 7.0),
}


# --- nasty bytes: names, notebooks and folders ------------------------------------------------------
NASTY_NAMES = {  # folder name -> must it score full marks (True), or may it get a message instead
    "nasty name ünïcødé 学生": True,
    "nasty_" + "l" * 240: True,
    'nasty, "quoted" name': True,  # nbgrader's own CSV export left commas and quotes bare
    "nasty_ansi_\x1b[2J\x1b[31m_new\nline": False,
    "nasty_<img src=x onerror=alert(1)>": False,
}
WILDCARD = "*"  # nbgrader globs student ids: this one matches every classmate


def nasty_notebooks(right_nb: nbformat.NotebookNode) -> dict:
    """name -> bytes of a notebook that is correct work wrapped in hostile JSON."""
    document = json.loads(nbformat.writes(right_nb))
    deep = '"metadata": {"deep": ' + "[" * 100_000 + "]" * 100_000 + ", "
    deep_text = json.dumps(document).replace('"metadata": {', deep, 1)
    listed = json.loads(json.dumps(document))
    for cell in listed["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "layer_norm_vjp":
            cell["metadata"]["nbgrader"]["grade_id"] = ["layer_norm_vjp"]
    surrogate = json.loads(json.dumps(document))
    surrogate["cells"].insert(1, {"cell_type": "markdown", "id": "lone", "metadata": {},
                                  "source": "a lone \ud800 here"})
    for cell in surrogate["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "layer_norm_jacobian":
            cell["metadata"]["nbgrader"]["schema_version"] = 1
            del cell["metadata"]["nbgrader"]["task"]
    return {"deep_json": deep_text.encode(), "list_grade_id": json.dumps(listed).encode(),
            "lone_surrogate_old_schema": json.dumps(surrogate, ensure_ascii=True).encode()}


def everything_nasty(course, folder) -> None:
    """Beside a correct notebook: a garbage timestamp, links out, a hardlink to a course file, a 30 MB file,
    10,000 tiny files and a folder tree 500 deep."""
    (folder / "timestamp.txt").write_bytes(b"\x00\xffnot a date" * 100)
    (folder / "root").symlink_to("/root")
    os.link(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py", folder / "notes.py")
    (folder / "big.bin").write_bytes(os.urandom(30 * 2**20))
    (folder / "many").mkdir()
    for k in range(10_000):
        (folder / "many" / f"{k}.txt").write_bytes(b"x")
    folder.joinpath(*["d"] * 500).mkdir(parents=True)


NASTY_FOLDERS = {  # learner -> what sits beside its correct notebook; all must score full marks
    "nasty_folder_everything": everything_nasty,
    "nasty_folder_timestamp_shadow": lambda course, f: (f / "timestamp.txt").symlink_to("/etc/shadow"),
    "nasty_folder_timestamp_fifo": lambda course, f: os.mkfifo(f / "timestamp.txt"),
}


# --- feedback injection ------------------------------------------------------------------------------
INJECTION_MARKDOWN = ("<script>alert('xss-INJ1')</script>\n\n<img src=x onerror=\"alert('xss-INJ2')\">\n\n"
                      "[click](javascript:alert('xss-INJ3'))\n\n<a href=\"javascript:alert('xss-INJ5')\">x</a>\n\n"
                      "<svg onload=\"alert('xss-INJ8')\"></svg>\n")
INJECTION_CODE = ("from IPython.display import HTML, Javascript, display\n"
                  "display(HTML(\"<script>alert('xss-INJ4')</script><img src=x onerror=\\\"alert('xss-INJ6')\\\">\"))\n"
                  "display(Javascript(\"alert('xss-INJ7')\"))\n")


def injection_submission(right: dict) -> nbformat.NotebookNode:
    nb = with_cells(submission(right), "layer_norm_jacobian", [code_cell(INJECTION_CODE)])
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(INJECTION_MARKDOWN))
    return nb


class ActiveContent(HTMLParser):
    """Collects what a browser would run: script bodies, on* attributes, javascript: links."""

    def __init__(self):
        super().__init__()
        self.active, self._script = [], False

    def handle_starttag(self, tag, attrs):
        self._script = tag == "script"
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.startswith("on") or value.startswith(("javascript:", "data:text/html")) or name == "srcdoc":
                self.active.append(f"<{tag} {name}={value[:80]}>")

    def handle_endtag(self, tag):
        self._script = False

    def handle_data(self, data):
        if self._script:
            self.active.append(data)


def active_content(html_text: str) -> list[str]:
    parser = ActiveContent()
    parser.feed(html_text)
    return parser.active


def sandbox_processes() -> list[tuple[int, int, str]]:
    """(pid, uid, command line) of live processes with a sandbox uid or a learner's mark, outside any zygote."""
    def read(pid, name, mode="r"):
        with open(f"/proc/{pid}/{name}", mode) as f:
            return f.read()

    table = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = read(pid, "status")
            command = read(pid, "cmdline", "rb").replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
        ppid = int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))
        table[int(pid)] = (uid, ppid, command)

    def under_a_zygote(pid):
        seen = set()
        while pid in table and pid not in seen:
            seen.add(pid)
            if "grader.grading.sandbox.zygote" in table[pid][2]:
                return True
            pid = table[pid][1]
        return False

    return [(pid, uid, command) for pid, (uid, _, command) in table.items()
            if (any(mark in command for mark in MARKS) or uid in SANDBOX_UIDS) and not under_a_zygote(pid)]


def add_files(course, student, files: dict) -> None:
    folder = course / "submitted" / student / ASSIGNMENT
    for name, data in files.items():
        (folder / name).write_bytes(data)


def hostile_extras(course) -> None:
    """Entries beside the hostile notebooks that their tricks use: links to a classmate and to the source."""
    folder = course / "submitted" / "hostile_steal" / ASSIGNMENT
    (folder / "friend").symlink_to(course / "submitted" / "honest" / ASSIGNMENT)
    (folder / "friend_relative").symlink_to(Path("..") / ".." / "honest" / ASSIGNMENT)
    (folder / "solution.ipynb").symlink_to(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    (folder / "solution.py").symlink_to(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py")


Class = namedtuple("Class", "course scores messages stdout before seconds")


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("hostile"))
    right = solution_sources()
    submit(course, "honest", submission(right))
    for name, trick in TRICKS.items():
        answers = TRICK_ANSWERS.get(name, {})
        answers = answers(right) if callable(answers) else answers
        submit(course, f"hostile_{name}", submission({**WRONG, **answers}, trick))
    hostile_extras(course)
    for name in NEIGHBOURS:
        submit(course, f"hostile_{name}_neighbour", submission(right))
    for name, content in malformed_submissions(submission(right)).items():
        submit(course, f"malformed_{name}", content)
    for learner, (nb, files) in unusual_submissions(right).items():
        submit(course, learner, nb)
        add_files(course, learner, files)
    for learner, answers in DELEGATING.items():
        submit(course, learner, submission({**right, **answers}))
    for learner, (answers, trick, _) in FORGING.items():
        submit(course, learner, submission({**right, **answers}, trick))
    for name in NASTY_NAMES:
        submit(course, name, submission(right))
    submit(course, WILDCARD, submission(WRONG))
    for name, content in nasty_notebooks(submission(right)).items():
        submit(course, f"nasty_notebook_{name}", content)
    for learner, make in NASTY_FOLDERS.items():
        submit(course, learner, submission(right))
        make(course, course / "submitted" / learner / ASSIGNMENT)
    submit(course, "inject_feedback", injection_submission(right))
    before = {folder: tree_digest(course / folder) for folder in ("submitted", "source")}
    started = time.monotonic()
    # nbgrader cannot store a student id with a newline, and reads "*" as a pattern: both learners are
    # reported (exit 3), not recorded
    scores, messages, stdout = grade(course, unrecordable=2)
    return Class(course, scores, messages, stdout, before, time.monotonic() - started)


def test_honest_bystander_gets_full_marks(hostile_class):
    assert hostile_class.scores["honest"] == 7.0


@pytest.mark.parametrize("attacker", NEIGHBOURS)
def test_learner_graded_beside_an_attacker_gets_full_marks(hostile_class, attacker):
    student = f"hostile_{attacker}_neighbour"
    assert hostile_class.scores[student] == 7.0, hostile_class.messages[student]


@pytest.mark.parametrize("trick", list(TRICKS))
def test_trick_earns_nothing(hostile_class, trick):
    assert hostile_class.scores[f"hostile_{trick}"] == 0.0, hostile_class.messages[f"hostile_{trick}"]


@pytest.mark.parametrize("case", ["truncated_json", "latin1_encoding", "not_a_notebook", "json_not_notebook",
                                  "bad_schema_version", "test_cell_pasted_twice", "deleted_test_cells", "renamed_file"])
def test_malformed_submission_gets_no_unearned_credit_and_a_message(hostile_class, case):
    scores, messages = hostile_class.scores, hostile_class.messages
    repairable = {"bad_schema_version", "test_cell_pasted_twice"}  # the learner's (correct) work is still graded
    assert scores[f"malformed_{case}"] == (7.0 if case in repairable else 0.0)
    assert messages[f"malformed_{case}"], f"no message explains {case}"


def test_dead_hung_and_flooding_submissions_are_explained(hostile_class):
    messages = hostile_class.messages
    assert any("exited" in m for m in messages["hostile_exit_early"])
    assert any("time limit" in m for m in messages["hostile_hang"])


def test_nothing_under_submitted_or_source_changes(hostile_class):
    course, before = hostile_class.course, hostile_class.before
    assert {folder: tree_digest(course / folder) for folder in ("submitted", "source")} == before
    assert (course / "nbgrader_config.py").exists() and (course / "build" / "gradebook.db").stat().st_size > 1000


def test_feedback_never_shows_the_hidden_tests(hostile_class):
    hidden = "check_layer_norm_jacobian(layer_norm_jacobian, d=9, eps=1e-5, seed=5"
    html = (hostile_class.course / "feedback" / "honest" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    text = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html)))
    assert "check_layer_norm_jacobian(layer_norm_jacobian)" in text and hidden not in text


# -- 1, 2 and 3: reaching classmates, forging results, escaping the sandbox --------------------------------
def test_steal_works_where_the_course_is_reachable(hostile_class, monkeypatch):
    """The stealing code, run here (outside any sandbox) from a learner's folder, copies three correct functions."""
    from grader.checks.backward import check_layer_norm_backward, check_layer_norm_jacobian, check_layer_norm_vjp

    monkeypatch.chdir(hostile_class.course / "submitted" / "hostile_steal" / ASSIGNMENT)
    namespace = {"np": np, "_BUDGET": 0.0}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(STEAL, namespace)
        assert sorted(namespace["_stolen"]) == sorted(EXERCISES), namespace["_looked_at"]
        check_layer_norm_jacobian(namespace["_stolen"]["layer_norm_jacobian"])
        check_layer_norm_vjp(namespace["_stolen"]["layer_norm_vjp"], d=1000)
        check_layer_norm_backward(namespace["_stolen"]["layer_norm_backward"])


def test_forged_result_would_be_accepted(hostile_class, tmp_path):
    """The forging code, run here against a copy of the course's layout, writes a result the record phase accepts."""
    from grader.grading.run import results
    course, fake, student = hostile_class.course, tmp_path / "course", "hostile_forge_daemon"
    autograded = fake / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    autograded.parent.mkdir(parents=True)
    shutil.copyfile(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", autograded)
    (fake / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copyfile(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
                    fake / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    expected = {"assignment": ASSIGNMENT, "student": student, "notebook": ASSIGNMENT,
                "notebook_digest": results.notebook_digest(nbformat.read(autograded, as_version=4)),
                "source_digest": results.file_digest(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")}
    namespace = {"_ONLY_ROOTS": [str(fake)]}
    exec(FORGE, namespace)
    assert namespace["_forge"]([(student, True)])
    forged, problem = results.load(fake / "build" / "grading" / ASSIGNMENT / "results" / student / f"{ASSIGNMENT}.json",
                                   expected)
    assert problem is None and all(t["status"] == "passed" for t in forged["tests"].values())


def course_files_containing(course, needles: list[bytes], skip=("submitted",)) -> list[str]:
    hits = []
    for folder, dirs, names in os.walk(course):
        if folder == str(course):
            dirs[:] = [d for d in dirs if d not in skip]
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                hits += [f"{path.relative_to(course)}: {needle!r}" for needle in needles if needle in data]
    return hits


def printed(course, student) -> str:
    """Everything the learner's cells printed, as recorded in its autograded notebook."""
    nb = nbformat.read(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_sandbox_sees_no_course_file(hostile_class):
    """From inside the sandbox, the stealing code finds no notebook or script of the course but the learner's own
    (its own folder's links to a classmate and to the source are not followed), and the forging code writes nothing."""
    looked = re.search(r"^LOOKED AT (.*)$", printed(hostile_class.course, "hostile_steal"), re.M)
    assert looked, printed(hostile_class.course, "hostile_steal")[:2000]
    seen = json.loads(looked.group(1))
    assert [f for f in seen["files"] if not f.startswith(seen["cwd"].rstrip("/") + "/")] == []
    forged = re.search(r"^FORGED (.*)$", printed(hostile_class.course, "hostile_forge_daemon"), re.M)
    assert forged and json.loads(forged.group(1)) == [], printed(hostile_class.course, "hostile_forge_daemon")[:2000]


def test_no_forged_file_reaches_the_course(hostile_class):
    """No file the learners' code wrote (FORGED-42, ESCAPED-42, built at run time) is anywhere in the course."""
    assert course_files_containing(hostile_class.course, [m.encode() for m in MARKS]) == []
    for path in ["/results/hostile_forge/03_backward.json", "/tmp/results/hostile_forge/03_backward.json",
                 "/tmp/escaped"]:
        assert not (os.path.exists(path) and any(m.encode() in Path(path).read_bytes() for m in MARKS)), path


def test_no_sandbox_process_outlives_grading(hostile_class):
    """No process of a sandbox uid (61000-61063) or with a learner's mark lives on outside a zygote after grading,
    though the daemons were running inside the sandbox."""
    daemons = re.search(r"^DAEMONS (\d+)$", printed(hostile_class.course, "hostile_forge_daemon"), re.M)
    assert daemons and int(daemons.group(1)) >= 2, printed(hostile_class.course, "hostile_forge_daemon")[:2000]
    first = sandbox_processes()
    time.sleep(2)
    left = [p for p in sandbox_processes() if p in first]
    for pid, _, _ in left:  # ours: clean up before failing
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert left == []


# -- 4: limits ------------------------------------------------------------------------------------------------
def test_time_spent_in_test_cells_is_bounded(hostile_class):
    """Correct functions that sleep TIMEOUT - 1 s per call: the first test cell (14 calls) is stopped at its
    budget of TIMEOUT s, with a message; the notebook does not run calls x timeout."""
    messages = hostile_class.messages["hostile_slow_calls"]
    assert any("time limit" in m for m in messages), messages
    work = hostile_class.course / "build" / "grading" / ASSIGNMENT
    result = work / "results" / "hostile_slow_calls" / f"{ASSIGNMENT}.json"
    mirrored = work / "submitted" / "hostile_slow_calls" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    without_budget = 14 * (TIMEOUT - 1)  # the first test cell's calls, one after another
    assert result.stat().st_mtime - mirrored.stat().st_mtime < without_budget - 15  # queued + executed
    assert hostile_class.seconds < 900, f"grading the class took {hostile_class.seconds:.0f} s"


def test_huge_errors_are_capped(hostile_class):
    course = hostile_class.course
    assert sum(map(len, hostile_class.messages["hostile_huge_errors"])) < 10_000
    assert len(json.dumps(hostile_class.messages)) < 200_000
    feedback = course / "feedback" / "hostile_huge_errors" / ASSIGNMENT / f"{ASSIGNMENT}.html"
    autograded = course / "autograded" / "hostile_huge_errors" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert feedback.stat().st_size < 2 * 2**20 and autograded.stat().st_size < 2**20
    html = feedback.read_text()
    assert "E" * 25_000 not in html and "F" * 25_000 not in html and "m" * 25_000 not in html


@pytest.mark.parametrize("trick", ["stop_reading", "close_channel", "memory_chunks", "slow_calls"])
def test_sandbox_attacks_are_explained(hostile_class, trick):
    assert hostile_class.messages[f"hostile_{trick}"], f"no message explains hostile_{trick}"


def test_fork_bomb_is_bounded(hostile_class):
    """The bomb stops at the process limit, or (held to one core with its 200 spinners) at the time limit."""
    text = printed(hostile_class.course, "hostile_fork_bomb")
    forked = re.search(r"forked (\d+)", text)
    stopped = any("time limit" in m for m in hostile_class.messages["hostile_fork_bomb"])
    assert (forked and int(forked.group(1)) <= 256) or stopped, (text[:500],
                                                                 hostile_class.messages["hostile_fork_bomb"])


# -- 5: nasty bytes -------------------------------------------------------------------------------------------
def test_every_submission_is_graded_or_explained(hostile_class):
    students = {p.name for p in (hostile_class.course / "submitted").iterdir()}
    lost = [s for s in students if s not in hostile_class.scores and not hostile_class.messages.get(s)]
    assert lost == []
    assert set(hostile_class.scores) <= students  # nobody graded who did not submit


@pytest.mark.parametrize("name", list(NASTY_NAMES), ids=["unicode_spaces", "long", "comma_quotes",
                                                         "ansi_newline", "html"])
def test_nasty_folder_names(hostile_class, name):
    score, messages = hostile_class.scores.get(name), hostile_class.messages.get(name)
    if NASTY_NAMES[name]:
        assert score == 7.0, messages
    else:
        assert score == 7.0 or messages, (score, messages)


def test_wildcard_name_touches_nobody_else(hostile_class):
    """A learner whose folder is named '*' (nbgrader globs student ids and notebook paths) is not graded but
    told why; every classmate's grade is their own (the other tests of this module)."""
    assert WILDCARD not in hostile_class.scores
    assert any("reads as a pattern" in m for m in hostile_class.messages[WILDCARD])


def test_grader_output_has_no_control_characters(hostile_class):
    assert "\x1b" not in hostile_class.stdout


@pytest.mark.parametrize("name", ["deep_json", "list_grade_id", "lone_surrogate_old_schema"])
def test_nasty_notebooks(hostile_class, name):
    student = f"nasty_notebook_{name}"
    score, messages = hostile_class.scores.get(student), hostile_class.messages.get(student)
    if name == "lone_surrogate_old_schema":  # honest work: a pasted character in a markdown cell, an old nbgrader
        assert score == 7.0, messages
    else:
        assert score in (0.0, 7.0) and (score == 7.0 or messages), (score, messages)


@pytest.mark.parametrize("learner", list(NASTY_FOLDERS))
def test_nasty_folders_keep_full_marks(hostile_class, learner):
    assert hostile_class.scores.get(learner) == 7.0, hostile_class.messages.get(learner)


def test_hardlinked_course_file_is_untouched(hostile_class):
    course_file = hostile_class.course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py"
    assert course_file.stat().st_nlink == 2
    assert course_file.read_bytes() == (ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.py").read_bytes()


def test_secrets_behind_links_are_never_copied(hostile_class):
    """/etc/shadow (a learner's timestamp.txt links to it) appears nowhere the grader wrote."""
    try:
        secret = [line for line in Path("/etc/shadow").read_bytes().splitlines() if len(line) > 20][0]
    except (OSError, IndexError):
        pytest.skip("no readable /etc/shadow here")
    assert course_files_containing(hostile_class.course, [secret]) == []


# -- 6: feedback injection --------------------------------------------------------------------------------------
def test_feedback_runs_no_learner_script(hostile_class):
    course = hostile_class.course
    html = (course / "feedback" / "inject_feedback" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "xss-INJ" in html  # the learner's cells are there, as text
    assert [a for a in active_content(html) if "xss" in a or "javascript:" in a or "srcdoc" in a] == []
    bystander = (course / "feedback" / "honest" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert html.count("<script") <= bystander.count("<script")
    assert hostile_class.scores["inject_feedback"] == 7.0, hostile_class.messages["inject_feedback"]


# -- 7: honest but unusual ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(UNUSUAL))
def test_honest_but_unusual_gets_full_marks(hostile_class, case):
    learner, exercise = UNUSUAL[case]
    scores = cell_scores(hostile_class.course, learner)
    assert {t: scores[t] for t in TESTS_OF[exercise]} == TESTS_OF[exercise], hostile_class.messages[learner]
    assert hostile_class.scores[learner] == 7.0, (scores, hostile_class.messages[learner])


# -- 8: delegation ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hostile_report(hostile_class):
    """``grader report`` of the hostile class (its JSON document)."""
    run = subprocess.run([sys.executable, "-m", "grader", "report", ASSIGNMENT, "--root", str(hostile_class.course)],
                         capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads((hostile_class.course / "build" / "reports" / f"{ASSIGNMENT}.json").read_text())


@pytest.mark.parametrize("learner, exercise", DELEGATED)
def test_delegation_is_flagged_for_the_instructor_not_graded(hostile_class, hostile_report, learner, exercise):
    """Handing an exercise to torch's LayerNorm or the course's helpers is seen only from inside the learner's own
    process, which proves nothing: the points are what the values earn, and the report flags the call."""
    scores = cell_scores(hostile_class.course, learner)
    assert {t: scores[t] for t in TESTS_OF[exercise]} == TESTS_OF[exercise], hostile_class.messages[learner]
    flagged = {f["test"] for f in hostile_report["flags"] if f["learner"] == learner and f["check"] == "delegation"}
    if exercise in DELEGATING[learner]:
        assert flagged & set(TESTS_OF[exercise]), (exercise, hostile_report["flags"])


@pytest.mark.parametrize("learner", list(FORGING))
def test_points_come_only_from_verdicts_the_learner_cannot_reach(hostile_class, hostile_report, learner):
    """Memory is evidence (a (d, d) matrix is flagged unless the learner blinds its own measurement; the points are
    the values'), an input changed in place is read by the grader whatever the reply says, and a notebook that
    makes json.dumps pretty-print is graded as Jupyter would."""
    assert hostile_class.scores[learner] == FORGING[learner][2], hostile_class.messages[learner]
    flags = {(f["test"], f["check"]) for f in hostile_report["flags"] if f["learner"] == learner}
    expected = {("test_layer_norm_vjp", "memory")} if learner == "forge_memory_jacobian" else set()
    assert flags == expected, hostile_report["flags"]


def test_regrading_is_idempotent(hostile_class):
    """Grading the whole class again (gradebook, autograded/ and feedback/ already there) changes no score."""
    course, first, messages, before = (hostile_class.course, hostile_class.scores, hostile_class.messages,
                                       hostile_class.before)
    second, again, _ = grade(course, unrecordable=2)
    assert second == first
    assert limits_as_one(again) == limits_as_one(messages)
    assert {folder: tree_digest(course / folder) for folder in ("submitted", "source")} == before


_STOPPED_BY_A_LIMIT = re.compile(r"time limit exceeded: [^(]*|the notebook's process died from SIGKILL "
                                 r"\(killed: [^)]*\) ")


def limits_as_one(messages):
    """Messages without the "stopped by a resource limit" ones: a notebook that floods or fills memory as slowly as a
    busy machine lets it may meet the time limit, the memory limit or none on one run and not the next (its test
    cells score zero either way, and the scores are compared apart); no other word of any message may differ."""
    return {name: [m for m in texts if not _STOPPED_BY_A_LIMIT.search(m)] for name, texts in messages.items()}
