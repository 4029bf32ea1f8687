"""What the confined process keeps: its capabilities (none), its resource limits, and its place
first in line when memory runs out. Steps of ``isolation.apply``.
"""
from __future__ import annotations

import ctypes
import os
import resource

from grader.grading.sandbox.linux import (
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    PR_SET_DUMPABLE,
    check,
    libc,
    write_file,
)


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


def drop_capabilities() -> None:
    """Empty every capability set (bounding, ambient, effective, permitted, inheritable)."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    check(libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "capset")


def drop_capabilities_as_root(uid: int, gid: int) -> None:
    """As root: empty the bounding set, then become ``uid``/``gid`` (no supplementary groups) for good."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)  # from root to another uid: every capability goes
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc/self belongs to it again


def set_oom_score() -> None:
    """oom_score_adj 1000: the kernel's first choice when memory runs out (best effort)."""
    try:
        write_file("/proc/self/oom_score_adj", "1000")
    except OSError:
        pass
