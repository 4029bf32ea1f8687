"""Confine the current process before it runs a learner's code (Linux).

The sandbox sees an **allow-list** of the machine, never a copy of it with holes punched in:
a fresh root (an empty tmpfs) that only holds, read-only,

- the Python installation: ``sys.base_prefix``, ``sys.prefix`` and every existing
  ``sys.path`` entry (site-packages...), wherever they live, at their own paths;
- the course packages the notebook imports (``grader``, ``normlab``): those package folders
  only, never the checkout around them;
- the system: ``/usr``, ``/etc`` (with a private ``passwd``/``group`` naming the learner),
  ``/bin``, ``/sbin``, ``/lib*`` (symbolic links where the system has them);

plus a minimal ``/dev`` (null, zero, full, random, urandom, tty, and pseudo-terminals of its
own: a new devpts instance), a fresh ``/proc`` of its own PID namespace, private size-limited
``/tmp`` and ``/dev/shm``, and the notebook's folder at ``/home/learner`` (HOME and working
directory): a size-limited tmpfs holding a copy of the folder the grader prepared, so nothing
the notebook writes reaches the grader's disk and teardown is an unmount. Folders on the way
to an allowed path exist but cannot be listed. Nothing else: no course root, no build/, no
other sandbox, no exchange, no /root, no /home of anyone, no /srv or /work.

Levels (``apply`` never degrades silently: the level asked for, or stronger, or an error):

- ``user``: the grader is root. New mount, PID, network, IPC and UTS namespaces and the
  root above; then the process becomes the unprivileged uid of its grading slot.
  As root, ``auto``, ``user`` and ``userns`` all mean ``user``.
- ``userns``: not root; unprivileged user namespaces. The same namespaces and root, the
  learner a uid of its own inside the namespace (the instructor's outside), no capabilities.
  ``auto`` as non-root means ``userns``; ``user`` as non-root is an error.
- ``basic``: only when asked for explicitly. No namespaces: the notebook sees the machine as
  its uid does. As root it still drops to the slot's uid (learner code never runs as root).

In every level: the sandbox's control group when the zygote could make one (``cgroup``),
``oom_score_adj`` 1000 (the kernel's first choice when memory runs out), resource limits on
CPU time, address space, processes, file size and open files, no new privileges, and a
scrubbed environment (set by the parent).

State that outlives a sandbox: everything a notebook can leave behind lives in one of its
namespaces (IPC objects and message queues: IPC; abstract sockets: network; files: its own
tmpfs folders) and goes with them, except the kernel's **keyrings**, which belong to a uid,
not to a namespace: a key a notebook links into its user keyring (``@u``), its user-session
keyring (``@us``) or its persistent keyring stays there, readable by the next notebook of the
same uid, after the sandbox and the whole grading run. So (``keyrings``): every sandbox joins
a session keyring of its own (never the zygote's, which as the instructor's or root's login
session may hold their keys), the keyrings of a sandbox uid are invalidated before learner
code runs (as that uid) and again after its sandbox ends (its relay), and a seccomp filter
refuses ``add_key``, ``request_key`` and ``keyctl`` to learner code altogether: under
``userns`` the learner's uid is the instructor's, whose keyrings the kernel lets it reach by
serial number from any user namespace. Without the filter ``userns`` refuses to start.

Where each part lives: ``levels`` (which level; ``IsolationError``), ``allowlist`` (what the
sandbox may see), ``rootfs`` (its root file system), ``privileges`` (capabilities, limits),
``keyrings`` (keyrings and the seccomp filter), ``linux`` (the system calls); ``teardown`` (the
trusted side's clean-up after a sandbox). This module runs them in order (``apply``).
"""
from __future__ import annotations

import os
import resource
import select
import signal

from grader.grading.sandbox.keyrings import confine_keyrings, forget_keyrings_of
from grader.grading.sandbox.levels import IsolationError, choose_level
from grader.grading.sandbox.linux import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MS_PRIVATE,
    MS_REC,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    libc,
    mount,
    unshare,
    write_file,
)
from grader.grading.sandbox.privileges import (
    count_tasks,
    drop_capabilities,
    drop_capabilities_as_root,
    set_limits,
    set_oom_score,
)
from grader.grading.sandbox.rootfs import build_root, reach_installation


def apply(config: dict) -> dict:
    """Confine this process as ``config`` asks; returns what was done. Raises IsolationError or
    OSError when the isolation asked for cannot be had (the sandbox must then not start).

    config: mode, uid, gid, limits, workdir, cgroup (folders to join), readonly (extra paths),
    hidden (folders covered even inside an allowed path).
    """
    requested = config.get("mode", "auto")
    is_root = os.geteuid() == 0
    zygote = os.getppid()
    level = choose_level(requested, is_root)
    uid, gid, limits = int(config.get("uid", 65534)), int(config.get("gid", config.get("uid", 65534))), config["limits"]
    if is_root and uid == 0:
        raise IsolationError("the sandbox uid must not be 0")
    if config.get("cgroup"):
        from grader.grading.sandbox import cgroup

        cgroup.join(config["cgroup"])  # first: everything from here on is counted and killed with the group
    set_oom_score()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    report = {"mode": level, "requested": requested, "cgroup": bool(config.get("cgroup")), "mounts": []}
    if level == "basic":
        _apply_basic(report, uid, gid, limits, is_root, zygote)
    else:
        _apply_in_namespaces(report, config, uid, gid, is_root, zygote)
    return report


def _apply_basic(report: dict, uid: int, gid: int, limits: dict, is_root: bool, zygote: int) -> None:
    """``basic``: no namespaces; as root the slot's uid all the same (learner code never runs as root)."""
    if is_root:
        reach_installation()
        drop_capabilities_as_root(uid, gid)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after the uid change, which clears it
    if os.getppid() != zygote:
        os._exit(1)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    report["keyrings"] = confine_keyrings("basic", is_root)
    set_limits(limits, 0 if is_root else count_tasks())


def _apply_in_namespaces(report: dict, config: dict, uid: int, gid: int, is_root: bool, zygote: int) -> None:
    """``user`` and ``userns``: new namespaces, a relay outside the PID namespace, the allow-listed root,
    then no capabilities, no new privileges, keyrings of its own and the limits."""
    level = report["mode"]
    shared_uid_tasks = 0 if is_root else count_tasks()
    # In a user namespace, files of unmapped owners show as 65534: the learner must not look like their owner.
    inside_uid = uid if level == "user" or uid not in (0, 65534) else 1000
    inside_gid = gid if level == "user" or gid not in (0, 65534) else 1000
    _enter_namespaces(level, inside_uid, inside_gid)
    alive_r = _fork_relay(zygote, (uid, gid) if level == "user" else None)
    owner = (uid, gid) if level == "user" else None
    try:
        report["mounts"] = build_root(config, inside_uid, inside_gid, owner)
    except OSError as error:  # e.g. a user namespace without mount rights (AppArmor's userns restriction)
        raise IsolationError(f"isolation '{level}' could not build the sandbox's file system ({error}); refusing "
                             "to run the notebook unconfined (LNCOURSE_ISOLATION=basic runs it without confinement)"
                             ) from None
    if level == "user":
        drop_capabilities_as_root(uid, gid)
    else:
        drop_capabilities()
    _arm_parent_death(alive_r)  # a uid change cleared it
    os.close(alive_r)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    report["keyrings"] = confine_keyrings(level, is_root)
    set_limits(config["limits"], shared_uid_tasks)


def _enter_namespaces(level: str, inside_uid: int, inside_gid: int) -> None:
    """New mount, network, PID, IPC, UTS and cgroup namespaces (and a user namespace under ``userns``,
    mapping ``inside_uid``/``inside_gid`` to ours); mounts private from here on. IsolationError if refused."""
    try:
        namespaces = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
        if level == "user":
            unshare(namespaces)
        else:
            outer_uid, outer_gid = os.getuid(), os.getgid()
            unshare(CLONE_NEWUSER | namespaces)
            write_file("/proc/self/setgroups", "deny")
            write_file("/proc/self/uid_map", f"{inside_uid} {outer_uid} 1")
            write_file("/proc/self/gid_map", f"{inside_gid} {outer_gid} 1")
        mount(None, "/", None, MS_REC | MS_PRIVATE)
    except OSError as error:
        what = "namespaces" if level == "user" else "unprivileged user namespaces"
        raise IsolationError(f"isolation '{level}' is not possible here ({what}: {error}); refusing to run the "
                             "notebook unconfined (LNCOURSE_ISOLATION=basic runs it without confinement)") from None


def _fork_relay(zygote: int, forget: tuple[int, int] | None) -> int:
    """Fork: the parent stays outside the new PID namespace as the relay (``_relay``, never returns); the
    child, its PID 1, goes on, tied to the relay. Returns the child's end of the pipe that says the relay lives."""
    alive_r, alive_w = os.pipe()
    child = os.fork()
    if child:
        os.close(alive_r)
        _relay(child, alive_w, zygote, forget)
    os.close(alive_w)
    _arm_parent_death(alive_r)
    return alive_r


def _relay(child: int, alive_w: int, zygote: int, forget: tuple[int, int] | None = None) -> None:
    """Outside the PID namespace: wait for its PID 1 and pass on how it ended. SIGTERM (from the
    zygote at teardown, or the kernel when the zygote dies) kills PID 1, which takes every
    process of the namespace with it, whatever they did to their sessions or parent-death signals.
    ``forget``: the sandbox's (uid, gid), whose keyrings it then invalidates (``forget_keyrings_of``):
    once PID 1 is reaped no process of the sandbox is left to put a key back."""
    def stop(*_):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass

    try:
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, stop)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != zygote:
            stop()
        _, status = os.waitpid(child, 0)
        if forget is not None:
            forget_keyrings_of(*forget)
        if os.WIFSIGNALED(status):  # die the same way, so the grader can say why
            sig = os.WTERMSIG(status)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    finally:
        os._exit(70)  # never return into the worker's code


def _arm_parent_death(alive_r: int) -> None:
    """SIGKILL when the relay dies; exit now if it already has (the setting is lost on a uid change)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([alive_r], [], [], 0)[0]:  # EOF: the relay is gone
        os._exit(1)
