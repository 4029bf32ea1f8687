"""Run one of this checkout's test scripts as a throw-away unprivileged user (as an instructor on a hub is), wherever
the checkout sits, and read back the JSON report it prints.

The interpreter and the checkout (its venv, the grader) must be reachable by that user. Where one lies in a folder
others cannot cross (pyenv under /root; a checkout in a ``mktemp -d`` folder, mode 700), it is reached through a
private mount namespace: that folder becomes an empty tmpfs with only what the test needs bound back, read-only.
Nothing on disk changes.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grader.grading.sandbox.rootfs import blocking_ancestor

ROOT = Path(__file__).resolve().parent.parent


def reach_as_another_user(paths: list[str], staging: str) -> str:
    """Shell commands (for a private mount namespace) that make each of ``paths`` reachable by any user: every
    folder that blocks one (no search permission for others) is covered by a tmpfs, and the paths under it
    are bound back, read-only, from a holding place under ``staging``."""
    blocked: dict[str, list[str]] = {}
    for path in paths:
        ancestor = blocking_ancestor(path)
        if ancestor and path not in blocked.setdefault(ancestor, []):
            blocked[ancestor].append(path)
    commands = []
    for number, (ancestor, inside) in enumerate(blocked.items()):
        holds = [os.path.join(staging, f"{number}-{i}") for i in range(len(inside))]
        commands += [f"mkdir -p {hold} && mount --bind {path} {hold}" for path, hold in zip(inside, holds, strict=True)]
        commands.append(f"mount -t tmpfs -o mode=755 tmpfs {ancestor}")
        commands += [f"mkdir -p {path} && mount -o bind,ro {hold} {path}"
                     for path, hold in zip(inside, holds, strict=True)]
    return "".join(f"{command} && " for command in commands)


def _deleted(user: str, seconds: float = 15) -> bool:
    """userdel, retried while the user's last processes exit (exit 8: still logged in / running)."""
    deadline = time.monotonic() + seconds
    while True:
        if subprocess.run(["userdel", user], capture_output=True).returncode in (0, 6):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def report_as_throwaway_user(script: Path, flag: str, prefix: str, timeout: float) -> dict:
    """``python script flag`` run as a new system user (deleted afterwards); the dict its last ``REPORT {json}``
    line holds, with the user's uid under "uid" if the script did not give one. Skips where it cannot run."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a throw-away unprivileged user")
    if not (shutil.which("useradd") and shutil.which("runuser") and shutil.which("unshare")):
        pytest.skip("useradd, runuser or unshare missing")
    user = f"{prefix}{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)
    staging = tempfile.mkdtemp(prefix="lncourse-test-python-")
    try:
        setup = reach_as_another_user([os.path.realpath(sys.base_prefix), str(ROOT)], staging)
        command = (f"{setup}cd / && exec runuser -u {user} -- env -i PATH=/usr/bin:/bin HOME=/ "
                   f"{sys.executable} {script.resolve()} {flag}")
        done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", command],
                              capture_output=True, text=True, timeout=timeout)
        lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
        assert lines, f"no report (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        report = json.loads(lines[-1][len("REPORT "):])
    finally:
        gone = _deleted(user)
        shutil.rmtree(staging, ignore_errors=True)
    assert gone, f"could not delete the throw-away user {user}: its processes are still running"
    return report
