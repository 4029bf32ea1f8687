"""The Linux calls that confine a sandbox, through libc: their numbers and flags, and thin wrappers
that raise OSError (with the call and the errno's text) when the kernel refuses.

Used by ``isolation`` (namespaces), ``rootfs`` (mounts, the root swap) and ``privileges``
(capabilities, parent-death signals); the keyring and seccomp calls live in ``keyrings``.
"""
from __future__ import annotations

import ctypes
import os
import platform

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_NEWCGROUP = 0x02000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added after the syscall tables were unified)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203, "s390x": 217}.get(
    platform.machine())

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    check(libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731 - a one-line helper
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def restrict(path: str, recursive: bool, readonly: bool = True) -> None:
    """Make the mount at ``path`` read-only (optionally), nosuid and nodev; its submounts too if ``recursive``."""
    attr = _MountAttr((MOUNT_ATTR_RDONLY if readonly else 0) | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
    result = libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(),
                          ctypes.c_uint(AT_RECURSIVE if recursive else 0), ctypes.byref(attr),
                          ctypes.c_size_t(ctypes.sizeof(attr)))
    if result == 0:
        return
    if ctypes.get_errno() not in (38, 22):  # ENOSYS (kernel < 5.12), EINVAL: fall back to a remount
        check(-1, f"mount_setattr {path}")
    # A remount must repeat the flags a user namespace locked (noexec, atime) or it is refused.
    flags = os.statvfs(path).f_flag
    keep = (MS_NOEXEC if flags & os.ST_NOEXEC else 0) | (MS_NOATIME if flags & os.ST_NOATIME else 0) | (
        MS_NODIRATIME if flags & os.ST_NODIRATIME else 0) | (MS_RELATIME if flags & 4096 else 0)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (MS_RDONLY if readonly else 0) | keep)


def open_path(path: str) -> int:
    """A handle on ``path`` (O_PATH) to bind from later, even once a new mount covers the path itself."""
    return os.open(path, os.O_PATH | os.O_CLOEXEC)

