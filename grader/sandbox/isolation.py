"""Confine the current process before it runs a learner's code (Linux).

Three levels, strongest first; ``apply`` uses the strongest the platform allows:

- ``user``: we are root. New mount, network, PID and IPC namespaces; the course's private
  files are covered by empty mounts; then the process becomes an unprivileged uid of its own.
- ``userns``: not root, but unprivileged user namespaces are allowed (most Linux
  JupyterHubs). The same namespaces and covered files, under the instructor's own uid
  mapped into a private namespace.
- ``basic``: neither is possible. A private working copy and resource limits only.

In every level: resource limits on CPU time, address space, processes, file size and
open files, and a scrubbed environment (set by the parent).
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _hide(paths: list[str]) -> list[str]:
    """Cover each path with an empty read-only mount; returns the paths covered."""
    covered = []
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=000")
        elif os.path.exists(path):
            _mount("/dev/null", path, None, MS_BIND)
        else:
            continue
        covered.append(path)
    return covered


def count_tasks() -> int:
    """Processes and threads on the machine now (RLIMIT_NPROC counts tasks per real uid)."""
    total = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                total += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    return total


def _blocking_ancestor(path: str) -> str | None:
    """The highest ancestor of ``path`` that other users cannot traverse (e.g. /root), if any."""
    current, blocking = os.path.abspath(path), None
    while current != "/":
        current = os.path.dirname(current)
        if current != "/" and not os.stat(current).st_mode & 0o001:
            blocking = current
    return blocking


def _expose(paths: list[str]) -> None:
    """Make ``paths`` reachable by an unprivileged uid when they sit under a private folder.

    The private folder (typically /root, holding the Python installation) is covered by an
    empty tmpfs, and only ``paths`` are bind-mounted back, read-only. Everything else in it
    stays invisible.
    """
    for path in paths:
        blocking = _blocking_ancestor(path)
        if blocking is None:
            continue
        handle = os.open(path, os.O_PATH)
        if not os.path.ismount(blocking):
            _mount("tmpfs", blocking, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC)
        _mount(None, path, None, MS_BIND | MS_REC | MS_RDONLY | 0x20, None)  # 0x20 = MS_REMOUNT
        os.close(handle)


def set_limits(limits: dict, tasks_already_running: int = 0) -> None:
    """Resource limits for the learner's process tree (soft = hard: cannot be raised).

    ``tasks_already_running``: under a uid shared with other processes (userns, basic),
    the process limit must leave room for them.
    """
    table = {
        "cpu_seconds": resource.RLIMIT_CPU,
        "address_space_bytes": resource.RLIMIT_AS,
        "processes": resource.RLIMIT_NPROC,
        "file_bytes": resource.RLIMIT_FSIZE,
        "open_files": resource.RLIMIT_NOFILE,
    }
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, which in table.items():
        if limits.get(name):
            value = int(limits[name])
            if which == resource.RLIMIT_NPROC:
                value += tasks_already_running
            resource.setrlimit(which, (value, value))


def _enter_namespaces(mode: str, hide: list[str], expose: list[str]) -> list[str]:
    """Unshare and cover private files. Must run single-threaded, before any heavy import."""
    if mode == "user":
        _unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
    else:
        outer_uid, outer_gid = os.getuid(), os.getgid()
        _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {outer_uid} 1")
        _write("/proc/self/gid_map", f"0 {outer_gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    covered = _hide(hide)
    if mode == "user":
        _expose(expose)
    return covered


def _become_pid_one() -> None:
    """Fork into the new PID namespace; the parent only relays the child's exit status."""
    child = os.fork()
    if child:
        # Stay out of the way: ignore signals a terminal might send, wait, pass on the status.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        _, status = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    # If the relay is killed (grader timeout), the whole namespace goes with us.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)
    except OSError:
        pass  # a stale /proc only shows host processes we can no longer signal anyway


def apply(mode: str, hide: list[str], uid: int, gid: int, limits: dict, expose: list[str] = ()) -> dict:
    """Confine this process at level ``mode`` ("auto" picks the strongest). Returns what was done."""
    candidates = {"auto": ["user", "userns", "basic"], "user": ["user"], "userns": ["userns"], "basic": ["basic"]}[mode]
    if os.getuid() != 0 and "user" in candidates and mode == "auto":
        candidates.remove("user")
    shared_uid_tasks = count_tasks()
    report = {"mode": "basic", "covered": [], "errors": []}
    for level in candidates:
        if level == "basic":
            break
        try:
            report["covered"] = _enter_namespaces(level, hide, list(expose))
            report["mode"] = level
            break
        except OSError as error:
            report["errors"].append(f"{level}: {error}")
            if report["covered"] or level == "user" and mode != "auto":
                raise
    if report["mode"] != "basic":
        _become_pid_one()
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary can give privileges back
    if report["mode"] == "user":
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    set_limits(limits, 0 if report["mode"] == "user" else shared_uid_tasks)
    return report
