"""Keyrings: the state the kernel keeps per uid, outside every namespace.

Everything a notebook can leave behind lives in one of its namespaces and goes with them, except
the kernel's keyrings, which belong to a uid: a key a notebook links into its user keyring (``@u``),
its user-session keyring (``@us``) or its persistent keyring stays there, readable by the next
notebook of the same uid. So every sandbox joins a session keyring of its own
(``fresh_session_keyring``), the keyrings of a sandbox uid are invalidated before learner code runs
and after its sandbox ends (``forget_user_keyrings``, ``forget_keyrings_of``), and a seccomp
filter refuses the keyring syscalls to learner code (``block_keyring_syscalls``).
``confine_keyrings`` is the step ``isolation.apply`` runs.
"""
from __future__ import annotations

import ctypes
import os
import platform

from grader.grading.sandbox.levels import IsolationError
from grader.grading.sandbox.linux import libc

SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "ppc64": 271, "s390x": 280}.get(
    platform.machine())
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_INVALIDATE, KEYCTL_GET_PERSISTENT = 0, 1, 21, 22
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -3, -4, -5
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
X32_SYSCALL_BIT = 0x40000000
# (add_key, request_key, keyctl) for each ABI a process of this machine can call the kernel with (seccomp's arch)
KEYRING_SYSCALLS = {
    "x86_64": {0xC000003E: (248, 249, 250), 0x40000003: (286, 287, 288)},  # x86_64 and x32; i386
    "aarch64": {0xC00000B7: (217, 218, 219), 0x40000028: (309, 310, 311)},  # arm64; arm (compat)
    "riscv64": {0xC00000F3: (217, 218, 219)},
    "ppc64le": {0xC0000015: (269, 270, 271)}, "ppc64": {0x80000015: (269, 270, 271)},
    "s390x": {0x80000016: (278, 279, 280)},
}.get(platform.machine())
ENOSYS, EOPNOTSUPP = 38, 95


def _keyctl(op: int, *args: int) -> int:
    """keyctl(2); OSError on failure (ENOSYS: a kernel without keyrings, or a machine we know no number for)."""
    if SYS_KEYCTL is None:
        raise OSError(ENOSYS, "keyctl: no syscall number known for this machine")
    values = [ctypes.c_long(a) for a in args] + [ctypes.c_long(0)] * (4 - len(args))
    result = libc.syscall(ctypes.c_long(SYS_KEYCTL), ctypes.c_long(op), *values)
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"keyctl({op}): {os.strerror(errno)}")
    return result


def fresh_session_keyring() -> bool:
    """Join a new, empty, anonymous session keyring (KEYCTL_JOIN_SESSION_KEYRING with no name).

    A fork keeps its parent's session keyring, and whoever holds a session keyring possesses every
    key in it: the zygote's is the login session of root or of the instructor, with their keys
    (read-write for a possessor, whatever the uid). False when the kernel has no keyrings.
    """
    try:
        _keyctl(KEYCTL_JOIN_SESSION_KEYRING, 0)
    except OSError as error:
        if error.errno == ENOSYS:
            return False
        raise
    return True


def forget_user_keyrings() -> None:
    """Invalidate this uid's user (``@u``), user-session (``@us``) and persistent keyrings, in this
    user namespace: every key only they held goes with them (the kernel collects it within
    milliseconds) and the next lookup makes new, empty ones. Nothing of the uid's is left.

    Run as that uid, after ``fresh_session_keyring`` (the persistent keyring is reached by linking
    it into the session). By serial number: a lookup of ``@u`` makes a new ``@us`` when the old one
    is gone, and the other way round. Raises OSError if one of them cannot be invalidated (its keys
    would stay reachable).
    """
    rings = []
    try:
        rings.append(_keyctl(KEYCTL_GET_PERSISTENT, -1, KEY_SPEC_SESSION_KEYRING))
    except OSError as error:
        if error.errno not in (EOPNOTSUPP, ENOSYS):  # no persistent keyrings in this kernel: nothing to forget
            raise
    rings += [_keyctl(KEYCTL_GET_KEYRING_ID, spec, 1) for spec in (KEY_SPEC_USER_SESSION_KEYRING,
                                                                   KEY_SPEC_USER_KEYRING)]
    for ring in rings:
        _keyctl(KEYCTL_INVALIDATE, ring)


def forget_keyrings_of(uid: int, gid: int | None = None) -> bool:
    """In a process of our own that may change its uid for good (a relay, a throw-away fork): become
    ``uid`` and forget its keyrings (``forget_user_keyrings``). True if done or nothing to do."""
    try:
        if os.getuid() != uid:
            gid = uid if gid is None else gid
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        if fresh_session_keyring():
            forget_user_keyrings()
        return True
    except OSError:
        return False


def _filter_program() -> bytes | None:
    """A classic-BPF seccomp program: EPERM for add_key, request_key and keyctl in every ABI this machine's
    kernel accepts (i386 and x32 besides x86_64; arm besides arm64), EPERM for everything in an ABI it does
    not know, everything else allowed. None where we know no syscall numbers."""
    import struct

    if not KEYRING_SYSCALLS:
        return None
    deny, allow = SECCOMP_RET_ERRNO | 1, SECCOMP_RET_ALLOW  # EPERM, as Docker's default profile answers
    ld, jeq, ret, and_ = 0x20, 0x15, 0x06, 0x54  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K, BPF_ALU|AND|K
    code: list = [(ld, 0, 0, 4)]  # seccomp_data.arch
    blocks = []
    for arch, numbers in KEYRING_SYSCALLS.items():
        code.append((jeq, f"arch{arch}", 0, arch))
        block = [("label", f"arch{arch}"), (ld, 0, 0, 0)]  # seccomp_data.nr
        if arch == 0xC000003E:
            block.append((and_, 0, 0, ~X32_SYSCALL_BIT & 0xFFFFFFFF))  # x32 calls the same numbers, bit 30 set
        block += [(jeq, "deny", 0, number) for number in numbers] + [(ret, 0, 0, allow)]
        blocks += block
    code += [(ret, 0, 0, deny)] + blocks + [("label", "deny"), (ret, 0, 0, deny)]
    labels, program = {}, []
    for item in code:
        if item[0] == "label":
            labels[item[1]] = len(program)
        else:
            program.append(item)
    out = b""
    for i, (op, jt, jf, k) in enumerate(program):
        jt, jf = (labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        out += struct.pack("HBBI", op, jt, jf, k)
    return out


def block_keyring_syscalls() -> bool:
    """Install the seccomp filter of ``_filter_program`` on this process (and all it will start); needs
    no_new_privs first. False where it cannot be had (no numbers for this machine, no seccomp filters)."""
    program = _filter_program()
    if program is None:
        return False

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(Program(len(program) // 8, program)),
                      0, 0) == 0


def confine_keyrings(level: str, is_root: bool) -> str:
    """Leave learner code no keyring of anyone else's and none of an earlier notebook's; returns how.

    ``filtered``: learner code cannot call the keyring syscalls at all; ``scrubbed``: no filter, but
    a fresh session keyring and, for a sandbox uid, its own keyrings emptied; ``none``: this kernel
    has no keyrings. Raises IsolationError where keys of others would stay reachable.
    """
    try:
        has_keys = fresh_session_keyring()
        if has_keys and is_root:  # a sandbox uid (user; basic as root): what an earlier notebook of this slot left
            forget_user_keyrings()
    except OSError as error:
        raise IsolationError(f"the sandbox could not get keyrings of its own ({error}); refusing to run the notebook "
                             "where an earlier notebook's keys could be read") from None
    if block_keyring_syscalls():
        return "filtered"
    if not has_keys:
        return "none"
    if level == "userns":  # the learner's uid is the instructor's: their keyrings answer to it by serial number
        raise IsolationError("isolation 'userns' needs a seccomp filter to keep the notebook from the instructor's "
                             "kernel keyrings, and this kernel refused it; refusing to run the notebook "
                             "(grading as root, isolation 'user', needs none)")
    return "scrubbed" if is_root else "shared"
