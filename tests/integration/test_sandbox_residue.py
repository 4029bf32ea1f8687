"""State that outlives a sandbox: nothing one notebook leaves may reach a later one (or a classmate's).

Each channel gets one test: a learner's cells in one sandbox write, the next sandbox of the same
uid (the grading slot's, reused) tries to read, and where the kernel object is global the test
also looks from the host. The channels, and how each is closed (``isolation``'s docstring and
docs/instructors.md, "What the grading machine needs"):

- kernel keyrings (per uid, in no namespace): a seccomp filter refuses the keyring syscalls to
  learner code; each sandbox joins a session keyring of its own; a sandbox uid's user,
  user-session and persistent keyrings are invalidated before learner code runs and after it;
- SysV IPC, POSIX message queues: the sandbox's IPC namespace; abstract unix sockets: its network
  namespace; /tmp, /dev/shm, HOME: its own tmpfs; processes (and what they hold: inotify
  instances, timers, sockets): its PID namespace and control group.

As root the sandboxes run in ``user`` isolation (uid SLOT_UID); otherwise in ``userns``, and
``test_userns_residue`` repeats the essentials as a throw-away unprivileged user. One zygote serves
the whole file.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from grader.grading.sandbox import client, keyrings, levels, linux, teardown, zygote_client  # noqa: E402 - after the sys.path insert
from tests.another_user import report_as_throwaway_user  # noqa: E402 - after the sys.path insert

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox confines on Linux only")
SLOT_UID = 61970  # like grade's 61000 + slot; not test_isolation's (61990, 61991): both may run at once
IS_ROOT = os.geteuid() == 0
NEEDS_ROOT = pytest.mark.skipif(not IS_ROOT, reason="a sandbox uid of its own (isolation 'user') needs root; "
                                                    "test_userns_residue covers the unprivileged case")
SYS_ADD_KEY = {"x86_64": 248, "aarch64": 217, "riscv64": 217, "ppc64le": 269, "ppc64": 269, "s390x": 278}.get(
    platform.machine())
TAG = f"lncourse-residue-{os.getpid()}"
IPC_KEY = 0x4C4E0000 + os.getpid() % 0xFFFF


# -- helpers -------------------------------------------------------------------------------------------------
def text_of(result: dict) -> str:
    if result.get("error"):
        raise AssertionError(f"the cell raised: {result['error']}")
    return "".join(o.get("text", "") for o in result.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def run_json(box, source: str):
    return json.loads(text_of(box.run_cell(source)).strip().splitlines()[-1])


def wait_until(condition, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def add_key(description: str, payload: bytes, ring: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(SYS_ADD_KEY), b"user", description.encode(), payload,
                          ctypes.c_size_t(len(payload)), ctypes.c_long(ring))
    if result < 0:
        raise OSError(ctypes.get_errno(), "add_key")
    return result


def key_state(serial: int) -> str:
    """'alive' or why not (the kernel's answer to a description request)."""
    buffer = ctypes.create_string_buffer(256)
    try:
        keyrings._keyctl(6, serial, ctypes.addressof(buffer), 256)  # KEYCTL_DESCRIBE
        return "alive"
    except OSError as error:
        return os.strerror(error.errno)


def states_as(uid: int, serials: list[int]) -> list[str]:
    """``key_state`` of each key as ``uid`` sees it (root is no one to a key: it sees none of them)."""
    return in_child(lambda: [key_state(k) for k in serials], uid)


def in_child(function, uid: int | None = None):
    """``function()`` in a throw-away fork (as ``uid`` if given): its keyring changes die with it. Its repr back."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            out = repr(function())
        except BaseException as error:  # noqa: BLE001 - the child reports every error to the parent
            out = repr(f"ERROR {type(error).__name__}: {error}")
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    import ast

    return ast.literal_eval(b"".join(chunks).decode())


def key_users(uid: int) -> str:
    """The uid's line of /proc/key-users (keys it owns, by count and bytes), '' if it owns none."""
    return next((line.strip() for line in Path("/proc/key-users").read_text().splitlines()
                 if line.split(":")[0].strip() == str(uid)), "")


def residue_of(uid: int, scratch: str | None = None) -> dict:
    """Everything of ``uid`` on the machine that outlives a process (what ``test_*_run`` looks for)."""
    files = []
    for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run", "/dev/mqueue", *([scratch] if scratch else [])):
        if os.path.isdir(folder):
            found = subprocess.run(["find", folder, "-xdev", "-uid", str(uid)], capture_output=True, text=True)
            files += found.stdout.split()
    return {"processes": teardown.processes_of(uid), "keys": key_users(uid), "ipc": teardown.ipc_objects_of(uid),
            "files": files}


@pytest.fixture(scope="module")
def zygote():
    warm = zygote_client.Zygote()
    yield warm
    warm.close()


@pytest.fixture(scope="module")
def scratch():
    folder = tempfile.mkdtemp(prefix="lncourse-test-residue-")
    os.chmod(folder, 0o711)
    yield folder
    leftovers = os.listdir(folder)
    shutil.rmtree(folder, ignore_errors=True)
    assert not leftovers, f"sandboxes left their folders behind: {leftovers}"


def sandbox(zygote, scratch, uid: int = SLOT_UID, mode: str = "auto"):
    return client.Sandbox(mode=mode, uid=uid, scratch=Path(scratch), zygote=zygote)


# -- learner cells -------------------------------------------------------------------------------------------
KEYCTL_CELL = """
import ctypes, json, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
add_key, request_key, keyctl = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
def call(*args):
    r = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return r if r >= 0 else -ctypes.get_errno()
tries = {"add_key @u": call(add_key, b"user", b"answer", b"42", 2, -4),
         "add_key @us": call(add_key, b"user", b"answer", b"42", 2, -5),
         "add_key @s": call(add_key, b"user", b"answer", b"42", 2, -3),
         "request_key": call(request_key, b"user", b"answer", None, 0),
         "read @u": call(keyctl, 11, -4, None, 0), "persistent": call(keyctl, 22, -1, -3),
         "join named": call(keyctl, 1, b"classmates"),
         "proc_keys": [l.split()[8].rstrip(":") for l in open("/proc/keys")]}
if platform.machine() == "x86_64":
    tries["keyctl via x32"] = call(0x40000000 | keyctl, 0, -4, 0)
print(json.dumps(tries))
"""

IPC_CELL = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
except OSError:
    rt = libc
def res(r):
    return r if r >= 0 else -ctypes.get_errno()
KEY, NAME, CREATE = %d, b"/%s", %r
flags = 0o1666 if CREATE else 0  # IPC_CREAT | 0666
out = {"shm": res(libc.shmget(KEY, 4096 if CREATE else 0, flags)),
       "sem": res(libc.semget(KEY, 1 if CREATE else 0, flags)), "msg": res(libc.msgget(KEY, flags)),
       "mqueue": res(rt.mq_open(NAME, (os.O_CREAT | os.O_RDWR) if CREATE else os.O_RDONLY, 0o666, None))}
if CREATE and out["msg"] >= 0:
    out["msgsnd"] = res(libc.msgsnd(out["msg"], ctypes.create_string_buffer(b"\\x01\\0\\0\\0\\0\\0\\0\\0answer"), 6, 0))
print(json.dumps(out))
"""

SOCKET_CELL = """
import json, socket
listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listening.bind("\\0%s")
listening.listen()
print(json.dumps("listening"))
"""

CONNECT_CELL = """
import json, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\\0%s")
    print(json.dumps("CONNECTED"))
except OSError as error:
    print(json.dumps(type(error).__name__))
"""

FILES = ["/tmp/{tag}", "/dev/shm/{tag}", "{home}/{tag}", "/var/tmp/{tag}", "/run/user/{uid}/{tag}", "/run/{tag}",
         "/dev/{tag}", "/{tag}"]

FILES_CELL = """
import json, os
written = {}
for pattern in %r:
    path = pattern.format(tag=%r, home=os.path.expanduser("~"), uid=os.getuid())
    try:
        with open(path, "w") as f:
            f.write("answer")
        written[pattern] = "written"
    except OSError as error:
        written[pattern] = type(error).__name__
print(json.dumps(written))
"""

LOOK_CELL = """
import json, os
print(json.dumps({p: os.path.exists(p.format(tag=%r, home=os.path.expanduser("~"), uid=os.getuid())) for p in %r}))
"""

DAEMON_CELL = """
import ctypes, json, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
read, write = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # a daemon holding what only processes hold: inotify instances, timers, a socket
        instances = [libc.inotify_init1(0) for _ in range(%d)]
        timer = libc.timerfd_create(1, 0)
        libc.timerfd_settime(timer, 0, (ctypes.c_long * 4)(1, 0, 1, 0), None)
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.setitimer(signal.ITIMER_REAL, 1.0, 1.0)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\\0%s-daemon")
        s.listen()
        os.write(write, json.dumps([sum(i >= 0 for i in instances), timer >= 0]).encode())
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()
print(os.read(read, 100).decode())
"""

INOTIFY_CELL = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
fds = [libc.inotify_init1(0) for _ in range(%d)]
print(json.dumps(sum(f >= 0 for f in fds)))
"""


# -- keyrings ---------------------------------------------------------------------------------------------------
def test_learner_code_cannot_call_the_keyring_syscalls(zygote, scratch):
    """The primary barrier: every keyring syscall answers EPERM, in every ABI (x32 included)."""
    with sandbox(zygote, scratch) as box:
        assert box.isolation.get("keyrings") == "filtered", box.isolation
        tries = run_json(box, KEYCTL_CELL)
    proc_keys = tries.pop("proc_keys")
    assert all(result == -1 for result in tries.values()), tries  # -EPERM
    if IS_ROOT:  # its uid of its own sees no key but its own new session keyring
        assert proc_keys == ["_ses"], proc_keys


@NEEDS_ROOT
def test_keys_a_classmate_left_in_the_slot_uid_keyrings_are_gone_before_learner_code(zygote, scratch):
    """What the issue found: a notebook (under a grader without the filter) left its answer in the user
    keyring of the slot's uid, where the next notebook of that slot read it. Keys planted there now (as that
    uid, from the host) are invalidated before the next sandbox's learner code runs."""
    def plant():
        persistent = keyrings._keyctl(keyrings.KEYCTL_GET_PERSISTENT, -1, keyrings.KEY_SPEC_USER_KEYRING)
        return [add_key("answer", b"42", ring) for ring in (keyrings.KEY_SPEC_USER_KEYRING,
                                                            keyrings.KEY_SPEC_USER_SESSION_KEYRING, persistent)]
    planted = in_child(plant, SLOT_UID)
    assert isinstance(planted, list), planted
    assert states_as(SLOT_UID, planted) == ["alive"] * 3
    with sandbox(zygote, scratch) as box:
        run_json(box, "print(1)")
        states = states_as(SLOT_UID, planted)
    assert "alive" not in states, f"a planted key survived the sandbox's start: {states}"
    assert wait_until(lambda: key_users(SLOT_UID) == ""), key_users(SLOT_UID)


@NEEDS_ROOT
def test_keys_put_in_the_slot_uid_keyrings_while_a_sandbox_runs_are_gone_after_it(zygote, scratch):
    """The second barrier, for a kernel without seccomp filters: whatever a process of the sandbox uid
    linked into its keyrings while the sandbox ran is invalidated when it ends (its relay), so neither the
    next sandbox nor anyone after the run finds it."""
    with sandbox(zygote, scratch) as box:
        run_json(box, "print(1)")
        planted = in_child(lambda: [add_key("answer", b"42", ring) for ring in (-4, -5)], SLOT_UID)
        assert states_as(SLOT_UID, planted) == ["alive", "alive"]
    assert wait_until(lambda: "alive" not in states_as(SLOT_UID, planted)), states_as(SLOT_UID, planted)
    assert wait_until(lambda: key_users(SLOT_UID) == ""), key_users(SLOT_UID)


def test_fresh_session_keyring_loses_the_zygotes_session(tmp_path):
    """A fork keeps its parent's session keyring and possesses every key in it: the zygote's is root's or
    the instructor's login session. After ``fresh_session_keyring`` a sandbox (as its own uid, or as the
    instructor's under userns) neither lists nor reads it."""
    def probe():
        keyrings._keyctl(keyrings.KEYCTL_JOIN_SESSION_KEYRING, 0)  # the "login session" of the grader
        secret = add_key("instructor-secret", b"hidden tests", keyrings.KEY_SPEC_SESSION_KEYRING)
        session = keyrings._keyctl(keyrings.KEYCTL_GET_KEYRING_ID, keyrings.KEY_SPEC_SESSION_KEYRING, 0)

        def sandboxed():
            if IS_ROOT:
                os.setgroups([])
                os.setresgid(SLOT_UID, SLOT_UID, SLOT_UID)
                os.setresuid(SLOT_UID, SLOT_UID, SLOT_UID)
            before = key_state(secret)
            keyrings.fresh_session_keyring()
            mine = keyrings._keyctl(keyrings.KEYCTL_GET_KEYRING_ID, keyrings.KEY_SPEC_SESSION_KEYRING, 0)
            buffer = ctypes.create_string_buffer(64)
            try:
                keyrings._keyctl(11, secret, ctypes.addressof(buffer), 64)  # KEYCTL_READ
                read = buffer.raw
            except OSError as error:
                read = os.strerror(error.errno)
            return [before, mine != session, read]
        return in_child(sandboxed)
    before, new_session, read = in_child(probe)
    assert before == "alive" and new_session, (before, new_session)
    assert read == os.strerror(13), f"the sandbox still reads the grader's session key: {read}"


def test_userns_without_the_filter_refuses_to_start():
    """Under userns the learner's uid is the instructor's, whose keyrings the kernel lets it reach by serial
    number: without the seccomp filter the sandbox must not start (as root, ``user``, it may: its uid's own
    keyrings were emptied)."""
    def attempt(level, is_root):
        keyrings.block_keyring_syscalls = lambda: False
        keyrings.forget_user_keyrings = lambda: None  # the test's own uid: nothing to forget here
        try:
            return keyrings.confine_keyrings(level, is_root)
        except levels.IsolationError as error:
            return f"refused: {error}"
    assert in_child(lambda: attempt("userns", False)).startswith("refused: isolation 'userns' needs a seccomp")
    assert in_child(lambda: attempt("user", True)) == "scrubbed"


def test_the_filter_covers_every_abi():
    program = keyrings._filter_program()
    if program is None:
        pytest.skip(f"no keyring syscall numbers known for {platform.machine()}")
    assert len(program) % 8 == 0 and len(program) // 8 < 64

    def filtered():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        before = libc.syscall(ctypes.c_long(39 if platform.machine() == "x86_64" else 172))  # getpid
        libc.prctl(linux.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        assert keyrings.block_keyring_syscalls()
        results = {}
        for name, number in zip(("add_key", "request_key", "keyctl"), keyrings.KEYRING_SYSCALLS[
                next(iter(keyrings.KEYRING_SYSCALLS))], strict=True):
            for variant in ((number, number | keyrings.X32_SYSCALL_BIT) if platform.machine() == "x86_64"
                            else (number,)):
                r = libc.syscall(ctypes.c_long(variant), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
                results[f"{name} {variant:#x}"] = -ctypes.get_errno() if r < 0 else r
        results["getpid"] = libc.syscall(ctypes.c_long(39 if platform.machine() == "x86_64" else 172)) == before
        return results
    results = in_child(filtered)
    assert results.pop("getpid") is True, results
    assert set(results.values()) == {-1}, results


# -- namespaced channels: one sandbox writes, the next of the same uid (and one beside it) looks -----------------
def test_sysv_ipc_and_message_queues_do_not_reach_another_sandbox(zygote, scratch):
    name = TAG
    with sandbox(zygote, scratch) as first:
        made = run_json(first, IPC_CELL % (IPC_KEY, name, True))
        assert all(v >= 0 for v in made.values()), made
        with sandbox(zygote, scratch, uid=SLOT_UID + 1) as beside:  # a classmate graded at the same time
            seen_beside = run_json(beside, IPC_CELL % (IPC_KEY, name, False))
        if IS_ROOT:
            assert not teardown.ipc_objects_of(SLOT_UID), "the objects live in the sandbox's IPC namespace"
    with sandbox(zygote, scratch) as after:  # the next notebook of the same slot
        seen_after = run_json(after, IPC_CELL % (IPC_KEY, name, False))
    enoent = -2
    assert seen_beside == {"shm": enoent, "sem": enoent, "msg": enoent, "mqueue": enoent}, seen_beside
    assert seen_after == {"shm": enoent, "sem": enoent, "msg": enoent, "mqueue": enoent}, seen_after


def test_abstract_unix_sockets_do_not_reach_another_sandbox(zygote, scratch):
    with sandbox(zygote, scratch) as first:
        assert run_json(first, SOCKET_CELL % TAG) == "listening"
        assert run_json(first, CONNECT_CELL % TAG) == "CONNECTED"  # the probe works where the socket is
        with sandbox(zygote, scratch, uid=SLOT_UID + 1) as beside:
            seen_beside = run_json(beside, CONNECT_CELL % TAG)
    with sandbox(zygote, scratch) as after:
        seen_after = run_json(after, CONNECT_CELL % TAG)
    assert seen_beside == "ConnectionRefusedError" and seen_after == "ConnectionRefusedError", (seen_beside,
                                                                                                 seen_after)


def test_temporary_folders_and_home_start_empty(zygote, scratch):
    host_before = {p for p in ("/tmp", "/var/tmp", "/dev/shm") if os.path.exists(f"{p}/{TAG}")}
    with sandbox(zygote, scratch) as first:
        written = run_json(first, FILES_CELL % (FILES, TAG))
    assert {written[p] for p in ("/tmp/{tag}", "/dev/shm/{tag}", "{home}/{tag}")} == {"written"}, written
    assert all(outcome != "written" for p, outcome in written.items()
               if p not in ("/tmp/{tag}", "/dev/shm/{tag}", "{home}/{tag}")), written  # nowhere else
    with sandbox(zygote, scratch) as after:
        seen = run_json(after, LOOK_CELL % (TAG, FILES))
    assert not any(seen.values()), f"the next sandbox finds the last one's files: {seen}"
    host_after = {p for p in ("/tmp", "/var/tmp", "/dev/shm") if os.path.exists(f"{p}/{TAG}")}
    assert host_after == host_before == set(), host_after


@NEEDS_ROOT
def test_processes_and_what_they_hold_end_with_the_sandbox(zygote, scratch):
    """A detached daemon holding inotify instances (a per-uid count: 128 by default), timers and a
    socket: it ends with the sandbox, so the next one of the same uid has its whole inotify allowance."""
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    held = min(limit - 10, 200)
    with sandbox(zygote, scratch) as first:
        assert run_json(first, DAEMON_CELL % (held, TAG)) == [held, True]
        assert wait_until(lambda: len(teardown.processes_of(SLOT_UID)) >= 2)
    assert wait_until(lambda: not teardown.processes_of(SLOT_UID)), teardown.processes_of(SLOT_UID)
    with sandbox(zygote, scratch) as after:
        assert run_json(after, CONNECT_CELL % f"{TAG}-daemon") == "ConnectionRefusedError"
        assert run_json(after, INOTIFY_CELL % held) == held


@NEEDS_ROOT
def test_control_groups_are_removed_with_the_sandbox(zygote, scratch):
    with sandbox(zygote, scratch) as box:
        if not box.isolation.get("cgroup"):
            pytest.skip("no writable control group here")
        groups = [line.split(":", 2)[2] for line in Path(f"/proc/{box.pid}/cgroup").read_text().splitlines()
                  if "lncourse-" in line]
        assert groups
        assert run_json(box, "print(open('/proc/self/cgroup').read().count('lncourse'))") == 0
    from grader.grading.sandbox import cgroup

    mounts = cgroup._mounts()
    left = [mount + group for mount in set(mounts.values()) for group in set(groups) if os.path.exists(mount + group)]
    assert not left, left


# -- after a run ------------------------------------------------------------------------------------------------
HOSTILE = """
import ctypes, os, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)
for call in (lambda: libc.syscall(248, b"user", b"answer", b"42", 2, -4), lambda: libc.shmget(%d, 4096, 0o1666),
             lambda: libc.msgget(%d, 0o1666), lambda: open("/tmp/answer", "w").write("42"),
             lambda: open("/dev/shm/answer", "w").write("42"), lambda: open("/var/tmp/answer", "w").write("42")):
    try:
        call()
    except OSError:
        pass
subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
print(1)
"""


@pytest.mark.slow  # a zygote of its own, told to exit as a run's end has it
@NEEDS_ROOT
def test_nothing_of_the_sandbox_uids_is_left_after_a_grading_run(scratch):
    """A run's end as ``grader grade`` has it (its zygote told to exit): a notebook in each of two slots,
    each leaving all it can; one slot ``user`` (namespaces), one ``basic`` (none, as root: its IPC objects
    and files land in the machine's, and the zygote sweeps them). Then no process, key, IPC object or
    file of a sandbox uid is on the machine."""
    slots = {SLOT_UID + 2: "auto", SLOT_UID + 3: "basic"}
    in_child(lambda: add_key("answer", b"42", keyrings.KEY_SPEC_USER_KEYRING), SLOT_UID + 3)  # an older run's
    run = zygote_client.Zygote()
    try:
        for uid, mode in slots.items():
            with client.Sandbox(mode=mode, uid=uid, scratch=Path(scratch), zygote=run) as box:
                assert run_json(box, HOSTILE % (IPC_KEY + uid, IPC_KEY + uid)) == 1
    finally:
        run.close()
    for uid in slots:
        assert wait_until(lambda uid=uid: not any(residue_of(uid, scratch).values())), (uid, residue_of(uid, scratch))


# -- userns: the same, as an unprivileged instructor --------------------------------------------------------------
def userns_main() -> None:
    """Run by test_userns_residue as a throw-away user; prints one JSON report."""
    report = {"uid": os.getuid()}
    mine = add_key("instructor-own", b"kept", keyrings.KEY_SPEC_USER_KEYRING)  # the instructor's own key
    report["keys_before"] = [line.split()[0] + " " + line.split()[8] for line in open("/proc/keys")]
    scratch = tempfile.mkdtemp(prefix="lncourse-test-residue-")
    run = zygote_client.Zygote()
    try:
        with client.Sandbox(mode="auto", uid=SLOT_UID, scratch=Path(scratch), zygote=run) as first:
            report["mode"] = first.isolation["mode"]
            report["keyrings"] = first.isolation.get("keyrings")
            report["keyctl"] = run_json(first, KEYCTL_CELL)
            report["ipc_made"] = run_json(first, IPC_CELL % (IPC_KEY, TAG, True))
            report["files"] = run_json(first, FILES_CELL % (FILES, TAG))
            run_json(first, SOCKET_CELL % TAG)
            run_json(first, HOSTILE % (IPC_KEY + 1, IPC_KEY + 1))
        with client.Sandbox(mode="auto", uid=SLOT_UID, scratch=Path(scratch), zygote=run) as after:
            report["ipc_after"] = run_json(after, IPC_CELL % (IPC_KEY, TAG, False))
            report["files_after"] = run_json(after, LOOK_CELL % (TAG, FILES))
            report["socket_after"] = run_json(after, CONNECT_CELL % TAG)
    finally:
        run.close()
    def keys_now():
        return [line.split()[0] + " " + line.split()[8] for line in open("/proc/keys")]

    # the sandboxes' keyrings go when their last reference does, which the kernel's key GC may do a moment later
    wait_until(lambda: keys_now() == report["keys_before"], seconds=10)
    report["own_key"] = key_state(mine)
    report["keys_after"] = keys_now()
    report["own_ipc"] = teardown.ipc_objects_of(os.getuid())
    report["host_files"] = [p for p in ("/tmp", "/var/tmp", "/dev/shm") if os.path.exists(f"{p}/{TAG}")]
    report["leftovers"] = os.listdir(scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    print("REPORT " + json.dumps(report))


@pytest.mark.slow  # a throw-away user and a zygote of its own
def test_userns_residue():
    """userns: nothing reaches the next sandbox, and the instructor's own keys stay theirs, untouched."""
    report = report_as_throwaway_user(Path(__file__), "--userns-residue", "lncres", timeout=180)
    uid = report["uid"]
    assert report["mode"] == "userns" and report["keyrings"] == "filtered", report
    keyctl = dict(report["keyctl"])
    keyctl.pop("proc_keys")  # the instructor's keys are listed (the kernel shows a uid its own), never usable
    assert set(keyctl.values()) == {-1}, keyctl
    assert all(v >= 0 for v in report["ipc_made"].values()), report["ipc_made"]
    assert set(report["ipc_after"].values()) == {-2}, report["ipc_after"]
    assert not any(report["files_after"].values()), report["files_after"]
    assert report["socket_after"] == "ConnectionRefusedError"
    assert report["own_key"] == "alive", "the instructor's own key must survive grading"
    # the instructor's keys are those they had (their login session's, their user keyrings, their key); the
    # sandboxes' (a session keyring each, their user namespaces' user keyrings) went with them
    assert report["keys_after"] == report["keys_before"], (report["keys_before"], report["keys_after"])
    assert not report["own_ipc"] and not report["host_files"] and not report["leftovers"], report
    assert not teardown.processes_of(uid)


if __name__ == "__main__" and "--userns-residue" in sys.argv:
    userns_main()
