"""The sandbox's root file system: an empty tmpfs that holds only what ``allowlist.plan`` allows, read-only,

plus a minimal ``/dev`` (null, zero, full, random, urandom, tty, and pseudo-terminals of its own:
a new devpts instance), a fresh ``/proc`` of its own PID namespace, private size-limited ``/tmp``
and ``/dev/shm``, private ``/etc`` account files naming the learner, and the notebook's folder at
``/home/learner`` (a size-limited tmpfs holding a copy of it). ``build_root`` makes it and pivots
into it (``isolation.apply``, in the sandbox's new mount namespace). ``reach_installation``: the
one mount job of ``basic`` as root (no new root: Python made reachable to the learner's uid).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import stat

from grader.grading.sandbox.allowlist import inside, plan
from grader.grading.sandbox.levels import IsolationError
from grader.grading.sandbox.linux import (
    CLONE_NEWNS,
    MNT_DETACH,
    MS_BIND,
    MS_MOVE,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    SYS_PIVOT_ROOT,
    check,
    libc,
    mount,
    open_path,
    restrict,
    unshare,
    write_file,
)

HOME = "/home/learner"
USER = "learner"
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
MAX_PTYS = 16  # pseudo-terminals one sandbox may hold at once (``!cmd`` uses one at a time)
DEFAULT_HOME_BYTES = 512 * 2**20
DEFAULT_TMP_BYTES = 256 * 2**20
DEFAULT_SHM_BYTES = 64 * 2**20


class _Root:
    """Builds the sandbox's root in a fresh tmpfs at ``base`` (in a private mount namespace)."""

    def __init__(self, base: str, uid: int, gid: int):
        self.base, self.uid, self.gid, self.mounted = base, uid, gid, []

    def path(self, target: str) -> str:
        return self.base + target

    def folders(self, target: str, last_mode: int = 0o755) -> str:
        """Create ``target``'s folders; those on the way can be crossed but not listed (mode 111)."""
        current = self.base
        parts = [p for p in target.split("/") if p]
        for i, part in enumerate(parts):
            current = f"{current}/{part}"
            if not os.path.lexists(current):
                os.mkdir(current)
                os.chmod(current, last_mode if i == len(parts) - 1 else 0o111)
        return current

    def file(self, target: str) -> str:
        self.folders(os.path.dirname(target))
        where = self.path(target)
        if not os.path.lexists(where):
            os.close(os.open(where, os.O_CREAT | os.O_WRONLY, 0o444))
        return where

    def bind(self, fd: int, target: str, is_dir: bool, readonly: bool = True, device: bool = False) -> None:
        where = self.folders(target) if is_dir else self.file(target)
        mount(f"/proc/self/fd/{fd}", where, None, MS_BIND | MS_REC)
        if not device:
            restrict(where, recursive=True, readonly=readonly)
        self.mounted.append(target)

    def tmpfs(self, target: str, options: str, mode: int = 0o755) -> str:
        where = self.folders(target, mode)
        mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, options)
        return where


def _base_folder() -> str:
    for candidate in ("/tmp", "/mnt", "/var/tmp", "/run", "/dev"):
        if os.path.isdir(candidate) and not os.path.islink(candidate):
            return candidate
    raise IsolationError("no folder to build the sandbox's root in (/tmp, /mnt, /var/tmp)")


def _copy_folder(source: str, target: str, uid: int | None, gid: int | None) -> None:
    """Copy a folder's regular files, folders and symbolic links (nothing else), iteratively."""
    stack = [(source, target)]
    while stack:
        src, dst = stack.pop()
        for entry in os.scandir(src):
            s, d = os.path.join(src, entry.name), os.path.join(dst, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(s), d)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(d, 0o700)
                os.chmod(d, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) | 0o700)
                stack.append((s, d))
            elif entry.is_file(follow_symlinks=False):
                shutil.copyfile(s, d, follow_symlinks=False)
                os.chmod(d, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) & 0o777 | 0o600)
            else:
                continue  # fifos, sockets, devices: never copied
            if uid is not None:
                os.lchown(d, uid, gid)


def _private_accounts(uid: int, gid: int) -> dict[str, str]:
    """/etc files naming accounts: the sandbox's own (getpass, pwd work), none of the machine's users."""
    passwd = ["root:x:0:0:root:/root:/usr/sbin/nologin", f"{USER}:x:{uid}:{gid}:{USER}:{HOME}:/bin/sh"]
    group = ["root:x:0:", f"{USER}:x:{gid}:"]
    if uid != 65534:
        passwd.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
    if gid != 65534:
        group.append("nogroup:x:65534:")
    passwd, group = "\n".join(passwd) + "\n", "\n".join(group) + "\n"
    return {"passwd": passwd, "passwd-": passwd, "group": group, "group-": group, "subuid": "", "subuid-": "",
            "subgid": "", "subgid-": ""}


def build_root(config: dict, uid: int, gid: int, owner: tuple[int, int] | None) -> list[str]:
    """Build the allow-listed root and pivot into it. Runs as PID 1 of the new PID namespace,
    still privileged in the new mount namespace. ``owner``: (uid, gid) to give the learner's
    files (as root), None when they already are (user namespace). Returns the paths mounted."""
    limits = config.get("limits", {})
    workdir = config.get("workdir") or os.getcwd()
    # Open every source first: the tmpfs below may cover some of them (a workdir under /tmp).
    sources = _open_sources(config)
    devices = [(name, open_path(f"/dev/{name}")) for name in DEVICES
               if os.path.exists(f"/dev/{name}") and stat.S_ISCHR(os.stat(f"/dev/{name}").st_mode)]
    work_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    secrets = [real for real in map(os.path.realpath, config.get("hidden", [])) if os.path.isdir(real)]

    base = _base_folder()
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=755")
    root = _Root(base, uid, gid)
    # The private /tmp first: an allowed path may live under /tmp (a checkout and its venv there),
    # and its bind must land inside this tmpfs, not under it.
    tmp_bytes = int(limits.get("tmp_bytes") or DEFAULT_TMP_BYTES)
    root.tmpfs("/tmp", f"size={tmp_bytes},nr_inodes=65536,mode=1777", 0o1777)
    _bind_sources(root, sources)
    _hide_secrets(root, secrets)
    _own_accounts(root, uid, gid)
    _make_dev(root, devices, limits)
    proc = root.folders("/proc", 0o555)
    try:
        mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as error:
        raise IsolationError(f"cannot mount the sandbox's /proc ({error})") from None
    _make_home(root, work_fd, limits, uid, gid, owner)
    os.close(work_fd)
    _pivot_into(base)
    restrict("/", recursive=False)
    os.chdir(HOME)
    libc.sethostname(b"sandbox", 7)
    return ["/proc", "/dev", "/dev/shm", "/tmp", HOME] + [t for _, _, t in plan()]


def _open_sources(config: dict) -> list[tuple]:
    """(kind, O_PATH fd or link text, target, is_dir) for every allowed path: ``plan()`` and the
    extra read-only paths ``config`` names."""
    sources = []
    for kind, source, target in plan() + [("bind", os.path.realpath(p), os.path.realpath(p))
                                         for p in config.get("readonly", []) if os.path.exists(p)]:
        if kind == "bind":
            sources.append((kind, open_path(source), target, os.path.isdir(source)))
        else:
            sources.append((kind, source, target, False))
    return sources


def _bind_sources(root: _Root, sources: list[tuple]) -> None:
    """Bind (read-only) or link each allowed path, unless an earlier bind already holds it; close their fds."""
    for kind, source, target, is_dir in sources:
        if kind == "symlink":
            os.symlink(source, root.path(target))
        elif not any(inside(target, m) for m in root.mounted):
            root.bind(source, target, is_dir)
        if kind == "bind":
            os.close(source)


def _hide_secrets(root: _Root, secrets: list[str]) -> None:
    """Folders the grader names secret (nbgrader's exchange, the course) stay hidden even where
    they lie inside an allowed folder (an exchange under /usr/local/share, a course inside a
    sys.path entry): an empty, read-only tmpfs that no one may list covers each. A secret that
    holds an allowed folder (a course around its .venv) is not covered: the allow-list hides it."""
    for real in secrets:
        if any(inside(real, m) for m in root.mounted):
            mount("tmpfs", root.path(real), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                  "size=4k,nr_inodes=2,mode=000")


def _own_accounts(root: _Root, uid: int, gid: int) -> None:
    """Cover the machine's /etc account files with the sandbox's own (``_private_accounts``), read-only."""
    for name, text in _private_accounts(uid, gid).items():
        if os.path.isfile(root.path(f"/etc/{name}")) and not os.path.islink(root.path(f"/etc/{name}")):
            staging = root.path(f"/.{name}")
            write_file(staging, text)
            os.chmod(staging, 0o444)
            fd = open_path(staging)
            mount(f"/proc/self/fd/{fd}", root.path(f"/etc/{name}"), None, MS_BIND)
            restrict(root.path(f"/etc/{name}"), recursive=False)
            os.close(fd)
            os.unlink(staging)


def _make_dev(root: _Root, devices: list[tuple[str, int]], limits: dict) -> None:
    """/dev: the harmless devices only (``devices``: their open fds, closed here), and a private /dev/shm."""
    dev = root.tmpfs("/dev", "size=64k,nr_inodes=64,mode=755")
    for name, fd in devices:
        root.bind(fd, f"/dev/{name}", is_dir=False, device=True)
        os.close(fd)
    for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                       ("stderr", "/proc/self/fd/2")):
        os.symlink(link, f"{dev}/{name}")
    _private_ptys(root, dev)
    shm_bytes = int(limits.get("shm_bytes") or DEFAULT_SHM_BYTES)
    root.tmpfs("/dev/shm", f"size={shm_bytes},nr_inodes=4096,mode=1777", 0o1777)
    restrict(dev, recursive=False)


def _make_home(root: _Root, work_fd: int, limits: dict, uid: int, gid: int, owner: tuple[int, int] | None) -> None:
    """HOME: a size-limited tmpfs holding a copy of the notebook's folder (open at ``work_fd``), or with
    ``home_bytes`` 0 the grader's folder itself, read-write."""
    home_bytes = int(limits.get("home_bytes", DEFAULT_HOME_BYTES) or 0)
    if home_bytes:
        home = root.tmpfs(HOME, f"size={home_bytes},nr_inodes=65536,mode=700,uid={uid},gid={gid}", 0o700)
        try:
            _copy_folder(f"/proc/self/fd/{work_fd}", home, *(owner or (None, None)))
        except OSError as error:
            raise IsolationError(f"cannot copy the notebook's folder into the sandbox ({error})") from None
    else:  # the grader's folder itself, read-write
        root.bind(work_fd, HOME, is_dir=True, readonly=False)


def _pivot_into(base: str) -> None:
    """Swap roots; the old one is detached, so no path leads back to the machine's files."""
    os.chdir(base)
    pivoted = False
    if SYS_PIVOT_ROOT is not None:
        os.mkdir(".oldroot", 0o000)
        if libc.syscall(ctypes.c_long(SYS_PIVOT_ROOT), b".", b".oldroot") == 0:
            pivoted = True
            os.chdir("/")
            check(libc.umount2(b"/.oldroot", MNT_DETACH), "umount the old root")
            os.rmdir("/.oldroot")
        else:
            os.rmdir(".oldroot")
    if not pivoted:
        mount(base, "/", None, MS_MOVE)
        check(libc.chroot(b"."), "chroot")
        os.chdir("/")


def _private_ptys(root: _Root, dev: str) -> None:
    """Pseudo-terminals of the sandbox's own (a devpts instance no other process sees), as a Jupyter kernel
    has: ``!cmd`` then runs in one, as in Jupyter (its stderr joins stdout, lines end in CRLF). Best effort:
    without them ``!cmd`` runs through pipes (``kernel._without_pty``)."""
    pts = root.folders("/dev/pts", 0o755)
    try:
        mount("devpts", pts, "devpts", MS_NOSUID | MS_NOEXEC, f"newinstance,ptmxmode=0666,mode=0600,max={MAX_PTYS}")
    except OSError:
        return
    os.symlink("pts/ptmx", f"{dev}/ptmx")


def blocking_ancestor(path: str) -> str | None:
    """The highest folder above ``path`` that other users cannot cross (e.g. /root), if any."""
    current, blocking = path, None
    while current != "/":
        current = os.path.dirname(current)
        if current != "/" and not os.stat(current).st_mode & 0o001:
            blocking = current
    return blocking


def reach_installation() -> None:
    """basic as root: the learner's uid must still reach Python (often under /root, mode 700).

    Not confinement: a private mount namespace covers each such folder with an empty tmpfs
    and binds back, read-only, only the installation's folders under it.
    """
    blocked = [(b, target) for kind, _, target in plan() if kind == "bind" for b in [blocking_ancestor(target)] if b]
    if not blocked:
        return
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    handles = [(target, open_path(target)) for _, target in blocked]  # in this namespace, before covering
    for folder in sorted({b for b, _ in blocked}):
        mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
    for target, fd in handles:
        os.makedirs(target, 0o755, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        restrict(target, recursive=True)
        os.close(fd)
