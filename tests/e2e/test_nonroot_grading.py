"""A whole class graded by an instructor who is not root, with a course in a private home.

Root hides permission bugs: nbgrader leaves autograded notebooks read-only (0444), root writes
them anyway. Here a throw-away unprivileged user owns the course (home mode 700) and runs
``python -m grader grade``; the sandbox must be ``userns``, every learner must get a score and
feedback, nothing may be left in /tmp, and a hostile learner must see neither the exchange
(wherever nbgrader's configuration puts it), nor another user's home, nor the course.
"""
import csv
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.classroom_helpers import kill_processes, namespace_setup, remove_user, user_command
from tests.conftest import ROOT
from tests.course_helpers import make_course, submit
from tests.integration.test_hostile import ASSIGNMENT, WRONG, solution_sources, submission

pytestmark = pytest.mark.slow

IS_ROOT = os.geteuid() == 0
TOOLS = ("useradd", "userdel", "runuser", "unshare")

# The hostile learner reports what it could reach as one line of JSON in its imports cell's output.
PROBE = r'''
import json as _json, os as _os, socket as _socket
_seen = {}
for _p in _os.environ.get("LNC_PROBE_PATHS", "").split(":") + __PROBES__:
    try:
        _seen[_p] = sorted(_os.listdir(_p))[:5] if _os.path.isdir(_p) else open(_p).read(40)
    except Exception as _e:
        _seen[_p] = "hidden: " + type(_e).__name__
try:
    _socket.create_connection(("127.0.0.1", __PORT__), timeout=2).close()
    _seen["network"] = "connected"
except Exception as _e:
    _seen["network"] = "hidden: " + type(_e).__name__
print("PROBE " + _json.dumps(_seen))
'''


def needs_privilege():
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    reason = "needs root to create throw-away users" if not IS_ROOT else f"missing {missing}" if missing else ""
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI must run the non-root instructor's grading")
        pytest.skip(reason)


def add_user(name: str, home: Path) -> pwd.struct_passwd:
    subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", name], check=True)
    home.chmod(0o700)
    return pwd.getpwnam(name)


def remove_users(users: list[pwd.struct_passwd]) -> None:
    kill_processes([user.pw_uid for user in users])
    for user in users:
        remove_user(user.pw_name)


def tmp_entries_of(uid: int) -> set[str]:
    found = set()
    for entry in os.scandir("/tmp"):
        try:
            if entry.stat(follow_symlinks=False).st_uid == uid:
                found.add(entry.name)
        except FileNotFoundError:
            pass
    return found


def test_unprivileged_instructor_grades_a_class_in_a_private_home(tmp_path):
    needs_privilege()
    tag = secrets.token_hex(3)
    instructor, classmate = f"lncins{tag}", f"lnccls{tag}"
    base = Path(tempfile.mkdtemp(prefix="lncourse-test-homes-"))
    base.chmod(0o755)
    listener = socket.create_server(("127.0.0.1", 0))
    users = []
    try:
        users.append(add_user(instructor, base / instructor))
        users.append(add_user(classmate, base / classmate))
        # A Debian-style home (0755) with something in it: the sandbox must not show it either.
        (base / classmate).chmod(0o755)
        (base / classmate / "notes.txt").write_text("CLASSMATE-SECRET")
        # nbgrader's exchange configured globally (as /etc/jupyter does on hubs), outside the course,
        # holding a classmate's inbound submission.
        exchange = base / "exchange"
        inbound = exchange / "layernorm-rmsnorm" / "inbound" / f"{classmate}+{ASSIGNMENT}+2026"
        inbound.mkdir(parents=True)
        (inbound / f"{ASSIGNMENT}.ipynb").write_text("EXCHANGE-SECRET")
        for folder in [exchange, *inbound.parents][:4]:
            folder.chmod(0o1777 if folder == exchange else 0o755)
        config_dir = base / "jupyter-config"
        config_dir.mkdir()
        (config_dir / "nbgrader_config.py").write_text(f"c.Exchange.root = {str(exchange)!r}\n")
        config_dir.chmod(0o755)

        home = base / instructor
        course = make_course(tmp_path)
        shutil.copytree(course, home / "course")
        course = home / "course"
        right = solution_sources()
        probes = [str(exchange), str(inbound), str(base / classmate), str(base / classmate / "notes.txt"),
                  str(course), str(course / "source"), str(ROOT / "source"), str(home)]
        probe = PROBE.replace("__PROBES__", json.dumps(probes)).replace("__PORT__", str(listener.getsockname()[1]))
        submit(course, "alice", submission(right))
        submit(course, "bob", submission({**right, **{name: WRONG[name] for name in list(WRONG)[:1]}}))
        submit(course, "eve", submission(right, trick=probe))
        # nbgrader collect leaves what the instructor owns; autograded/ gets nbgrader's 0444 notebooks
        subprocess.run(["chown", "-R", f"{instructor}:{instructor}", str(home)], check=True)

        uid = users[0].pw_uid
        before = tmp_entries_of(uid)
        # the interpreter reached through a private mount namespace where it lives out of other
        # users' reach (pyenv under /root); nothing on disk changes
        setup = namespace_setup(base / "staging")
        env = {"JUPYTER_CONFIG_PATH": str(config_dir), "MPLBACKEND": "Agg"}
        argv = [sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--timeout", "60"]

        def run_as_instructor():
            return subprocess.run(user_command(setup, users[0], argv, str(course), env), capture_output=True,
                                  text=True, timeout=900)

        first = run_as_instructor()
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        assert "userns" in first.stdout + first.stderr, "the non-root instructor's sandbox is user namespaces"
        assert "other users of this machine can enter" not in first.stderr, "a private home raises no warning"
        # Grading twice: the second run rewrites the 0444 notebooks nbgrader left the first time.
        second = run_as_instructor()
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        leftovers = tmp_entries_of(uid) - before

        with open(course / "build" / "grades.csv", newline="") as f:
            scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f)}
        full = max(scores.values())
        assert scores["alice"] == full > scores["bob"], scores
        assert scores["eve"] == full, "the hostile learner's answers are right: only what it saw is under test"
        for student in scores:
            feedback = course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html"
            assert feedback.is_file(), f"no feedback for {student}: {sorted((course / 'feedback').rglob('*'))}"
        autograded = nbformat_read(course / "autograded" / "eve" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
        seen = probe_report(autograded)
        visible = {path: outcome for path, outcome in seen.items() if path and not str(outcome).startswith("hidden")}
        assert not visible, f"the sandbox of a non-root instructor shows {visible}"
        assert not leftovers, f"grading left {sorted(leftovers)} in /tmp"
    finally:
        listener.close()
        remove_users(users)
        shutil.rmtree(base, ignore_errors=True)


def nbformat_read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def probe_report(nb) -> dict:
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for line in output.get("text", "").splitlines():
                if line.startswith("PROBE "):
                    return json.loads(line[len("PROBE "):])
    raise AssertionError("the probe printed nothing: its cell did not run")
