"""One grading run per course at a time: a lock on build/grading.lock.

Two ``grader grade`` runs on one course corrupt each other: each starts by clearing build/grading/ASSIGNMENT,
which the other is using, and both write the same autograded/ folders and the gradebook. Every command of ours
that writes them (``grade``, ``build``) holds the lock exclusively for its whole run; ``report``, which only reads
them, holds it shared (reports side by side, but not during a grading run).

``fcntl.flock``: the kernel releases it when the process ends, however it ends (SIGKILL included), so a lock is
never stale; the file's text only says who holds it (pid, user, host, start, command) for the refusal message.
The processes this one forks (pools, zygotes, sandboxes) close their copy of the file at the fork, so none of
them (nor a learner's process) can keep the course locked after the run has ended.
"""
from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

EXIT_LOCKED = 4  # the exit code of a command refused because another run holds the lock

_held: set[int] = set()  # file descriptors of the locks this process holds: closed in every forked child
_owned: dict[str, tuple[int, bool]] = {}  # lock file -> (its descriptor, shared) while this process holds it


def _close_in_child() -> None:
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()
    _owned.clear()


os.register_at_fork(after_in_child=_close_in_child)


class CourseLocked(Exception):
    """Another process holds the course's lock; the message names it."""


def lock_path(root: Path) -> Path:
    return Path(root) / "build" / "grading.lock"


def holder(path: Path) -> str:
    """Who holds the lock at ``path``, as the holder wrote it (pid, user, host, start, command)."""
    unknown = "a process reading it (`python -m grader report`) or a run just starting"
    try:
        info = json.loads(path.read_text(encoding="utf-8", errors="replace")[:4000])
        pid = int(info["pid"])
        text = (f"pid {pid} (user {info['user']!s:.40}, host {info['host']!s:.80}, started {info['started']!s:.40}): "
                f"{info['command']!s:.300}")
    except (OSError, ValueError, KeyError, TypeError):
        return unknown
    if info["host"] == socket.gethostname():
        try:
            os.kill(pid, 0)  # the text is the last writer's: a reader (report) or a run just starting leaves it
        except ProcessLookupError:
            return unknown
        except OSError:
            pass  # alive, another user's
    return text


@contextlib.contextmanager
def course_lock(root: Path, what: str, wait: bool = False, shared: bool = False):
    """Hold the course's lock for the ``with`` block; ``what`` names this command in the refusal of another.

    Raises ``CourseLocked`` (naming the holder) if another process holds it, unless ``wait``: then it waits for
    it, saying once on stderr whom it waits for. ``shared``: a reader's lock (any number at once, none while a
    writer holds it). Within a process that holds it already (exclusively, or shared for a shared one), it is a
    no-op.
    """
    path = lock_path(Path(root).resolve())
    if str(path) in _owned and (shared or not _owned[str(path)][1]):  # already held here (the command line took
        yield  # it before starting the warm processes; grade() takes it again): nothing more to do
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    _held.add(fd)
    try:
        kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise CourseLocked(f"another run is using the course {root}: {holder(path)}. Wait for it to finish "
                                   f"(or stop it), or run this {what} with --wait to wait for it.") from None
            print(f"waiting for {holder(path)} to finish...", file=sys.stderr, flush=True)
            fcntl.flock(fd, kind)
        if not shared:
            info = {"pid": os.getpid(), "user": _user(), "host": socket.gethostname(),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": _command(what)}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        _owned[str(path)] = (fd, shared)
        yield
    finally:
        if _owned.get(str(path), (None,))[0] == fd:
            del _owned[str(path)]
        _held.discard(fd)
        os.close(fd)  # releases the lock


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def _command(what: str) -> str:
    if not sys.argv or not sys.argv[0]:
        return what
    program = ["python", "-m", "grader"] if sys.argv[0].endswith(os.path.join("grader", "__main__.py")) else \
        [os.path.basename(sys.argv[0])]
    return shlex.join([*program, *sys.argv[1:]])
