"""Sandbox slots: which unprivileged uid a grading worker's sandboxes run as.

A slot is held by one live process on the machine (a local pool's worker or a Dask worker),
through a lock file, so two ``grader grade`` runs at once (two courses on one hub, two test
runs) never share a sandbox uid: a uid's process limit (RLIMIT_NPROC) and files are its own.
The kernel releases the lock when the process dies, however it dies, so a killed worker's slot
is free again for the worker that replaces it.
"""
from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path

MAX_SLOTS = 512  # sandbox uids per machine: SANDBOX_UID_BASE + slot
_slot_file: int | None = None  # the lock file descriptor that holds this process's slot for its lifetime
_slot: int | None = None


def slot_folder() -> Path:
    """Where this user's slot locks live: one private folder per user, the same for every run.

    As root (the only case where slots pick uids other runs could also pick), /run, which only root
    writes; otherwise ~/.cache (an unprivileged instructor's sandboxes map to their own uid).
    /tmp only without either. Never /tmp first: a run leaves its lock files behind (removing a
    lock file another process may be opening races), and /tmp is everyone's.
    """
    if os.geteuid() == 0 and os.path.isdir("/run") and os.access("/run", os.W_OK):
        return Path("/run/lncourse-grading-slots")
    cache = Path.home() / ".cache"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if os.access(cache, os.W_OK):
            return cache / "lncourse-grading-slots"
    except (OSError, RuntimeError):  # RuntimeError: no home directory can be found
        pass
    return Path(tempfile.gettempdir()) / f"lncourse-grading-slots-{os.getuid()}"


def _private_folder(folder: Path) -> None:
    """The folder exists, is ours and nobody else can write it (in /tmp anyone could create it first)."""
    folder.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise RuntimeError(f"the grading slot folder {folder} is not a private folder of this user "
                           f"(owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}): remove it and run again")


def held() -> int | None:
    """The slot this process holds, or None before ``claim_slot``."""
    return _slot


def claim_slot(folder: Path | None = None) -> int:
    """This process's slot: the lowest number no other live process on this machine holds.

    Claimed once per process; later calls return the same slot.
    """
    global _slot_file, _slot
    if _slot is not None:
        return _slot
    folder = Path(folder or slot_folder())
    _private_folder(folder)
    for slot in range(MAX_SLOTS):
        descriptor = os.open(folder / f"slot-{slot}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            continue
        _slot_file, _slot = descriptor, slot
        return slot
    raise RuntimeError(f"all {MAX_SLOTS} grading slots on this machine are taken")
