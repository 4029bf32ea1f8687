"""The grading sandbox from the inside: what a learner's notebook can see, keep and break.

Each test runs learner cells in a real ``grader.grading.sandbox.client.Sandbox`` (mode ``auto``) and
asserts from inside them. As root (the grading server) ``auto`` means ``user`` isolation with
a control group; ``test_unprivileged_instructor`` repeats the essentials as a throw-away
unprivileged user (``userns`` isolation, no control group).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from grader.grading.sandbox import client, levels, rootfs, teardown, zygote_client  # noqa: E402 - after the sys.path insert
from tests.another_user import report_as_throwaway_user  # noqa: E402 - after the sys.path insert

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox confines on Linux only")
SLOT_UID = 61990  # like grade's 61000 + slot, out of the way of other tests' sandboxes
IS_ROOT = os.geteuid() == 0


def text_of(result: dict) -> str:
    """A cell's stdout; fails the test with the learner-side traceback if the cell raised."""
    if result.get("error"):
        raise AssertionError(f"the cell raised: {result['error']}")
    if "outputs" in result:
        return "".join(o.get("text", "") for o in result["outputs"]
                       if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return result.get("stdout", "")


def run_json(box, source: str):
    return json.loads(text_of(box.run_cell(source)).strip().splitlines()[-1])


PROBE = """
import json, os
seen = {}
for path in %r:
    try:
        seen[path] = "VISIBLE: " + (repr(os.listdir(path)[:5]) if os.path.isdir(path) else repr(open(path).read(40)))
    except OSError as error:
        seen[path] = "hidden: " + type(error).__name__
print(json.dumps(seen))
"""

ABOUT = """
import getpass, json, os, pwd, sys, tempfile
import numpy, torch, grader, normlab
open("written.txt", "w").write("ok")
open("/tmp/scratch.txt", "w").write("ok")
print(json.dumps({"user": getpass.getuser(), "pw_name": pwd.getpwuid(os.getuid()).pw_name, "uid": os.getuid(),
                  "home": os.environ["HOME"], "cwd": os.getcwd(), "tmpdir": tempfile.gettempdir(),
                  "numpy_ok": float(numpy.ones(3).sum()) == 3.0, "numpy_file": open(numpy.__file__).read(1) != "",
                  "torch_ok": float(torch.ones(3).sum()) == 3.0 and open(torch.__file__).read(1) != "",
                  "grader": grader.__file__, "normlab": normlab.__file__, "written": open("written.txt").read(),
                  "root": sorted(os.listdir("/")), "tmp": sorted(os.listdir("/tmp")),
                  "accounts": sorted({line.split(":")[0] for name in ("passwd", "passwd-", "group", "group-", "subuid")
                                      if os.path.exists("/etc/" + name) for line in open("/etc/" + name) if line.strip()}),
                  "caps": [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0],
                  "ptys": sorted(os.listdir("/dev/pts")), "pty": os.ttyname(os.openpty()[1])}))
"""  # noqa: E501 - code a sandbox runs, kept as one statement

DETACH = """
import os, subprocess
subprocess.Popen(["sleep", "%d"], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
child = os.fork()
if child == 0:  # a double-forked daemon in a session of its own
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "%d"])
    os._exit(0)
os.waitpid(child, 0)
try:
    os.setsid()  # the notebook's own process leaves the sandbox's process group too
except OSError:
    pass
import ctypes
ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # and clears its parent-death signal
print("[]")
"""


def sleepers(marker: int) -> list[int]:
    """Host pids of `sleep marker` and `sleep marker+1` processes."""
    wanted = {f"sleep\0{marker}\0".encode(), f"sleep\0{marker + 1}\0".encode()}
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read() in wanted:
                        found.append(int(pid))
            except OSError:
                pass
    return found


def processes_of(uid: int) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    found.append(int(pid))
            except OSError:
                pass
    return found


def wait_until(condition, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def forbidden_paths(other_workdir: str, exchange: str, host_tmp_file: str) -> list[str]:
    return [str(ROOT), str(ROOT / "build"), str(ROOT / "source"), str(ROOT / "solutions"), str(ROOT / "submitted"),
            str(ROOT / "nbgrader_config.py"), str(ROOT / "tests"), str(ROOT / ".git"), other_workdir,
            os.path.dirname(other_workdir), exchange, "/root", "/root/.bashrc", "/work", "/home", "/srv",
            "/srv/nbgrader/exchange", "/var", "/opt", "/mnt", host_tmp_file, "/sys/fs/cgroup"]


def visibility_report(box_scratch: str) -> dict:
    """Run the probes in a sandbox next to a second sandbox (as under `grader grade`)."""
    exchange = tempfile.mkdtemp(prefix="lncourse-test-exchange-")
    Path(exchange, "secret.txt").write_text("hidden tests")
    host_tmp_file = tempfile.mktemp(prefix="lncourse-test-host-")
    Path(host_tmp_file).write_text("host /tmp")
    os.chmod(host_tmp_file, 0o644)
    try:
        with client.Sandbox(mode="auto", uid=SLOT_UID + 1, scratch=Path(box_scratch)) as other, \
                client.Sandbox(mode="auto", uid=SLOT_UID, scratch=Path(box_scratch)) as box:
            other.run_cell("open('mine.txt', 'w').write('classmate')")
            probes = forbidden_paths(str(other.workdir), exchange, host_tmp_file)
            seen = run_json(box, PROBE % (probes,))
            about = run_json(box, ABOUT)
            return {"mode": box.isolation["mode"], "cgroup": box.isolation.get("cgroup"), "seen": seen,
                    "about": about, "workdir_after_write": sorted(os.listdir(box.workdir))}
    finally:
        shutil.rmtree(exchange, ignore_errors=True)
        os.unlink(host_tmp_file)


def teardown_report(scratch: str) -> dict:
    """Detached processes after close(), and after the notebook's process exits on its own."""
    report = {}
    for how in ("close", "exit"):
        marker = 3000 + secrets.randbelow(10**6) * 2
        box = client.Sandbox(mode="auto", uid=SLOT_UID, scratch=Path(scratch))
        try:
            text_of(box.run_cell(DETACH % (marker, marker + 1)))
            report[f"{how}: running before"] = wait_until(lambda marker=marker: len(sleepers(marker)) == 2)
            if how == "exit":
                try:
                    box.run_cell("import os; os._exit(0)")
                except client.SandboxError:
                    pass
                report[f"{how}: gone before close"] = wait_until(lambda marker=marker: not sleepers(marker))
        finally:
            box.close()
        report[f"{how}: gone after close"] = wait_until(lambda marker=marker: not sleepers(marker))
        report[f"{how}: workdir removed"] = not box.workdir.exists()
    return report


def check_visibility(report: dict) -> None:
    visible = {path: outcome for path, outcome in report["seen"].items() if not outcome.startswith("hidden")}
    assert not visible, f"the sandbox ({report['mode']}) sees what it must not: {visible}"
    about = report["about"]
    assert about["user"] == about["pw_name"] == rootfs.USER
    assert about["home"] == about["cwd"] == rootfs.HOME
    # a /tmp of its own: the learner's file, plus the way to the installation when it lives under /tmp (a CI clone)
    ways_in = {Path(p).resolve().relative_to("/tmp").parts[0] for p in (ROOT, sys.prefix, sys.base_prefix)
               if Path(p).resolve().is_relative_to("/tmp")}
    assert about["tmpdir"] == "/tmp" and set(about["tmp"]) == {"scratch.txt", *ways_in}, about["tmp"]
    assert about["numpy_ok"] and about["numpy_file"] and about["torch_ok"] and about["written"] == "ok"
    assert about["grader"].startswith(str(ROOT / "grader")) and about["normlab"].startswith(str(ROOT / "normlab"))
    assert int(about["caps"], 16) == 0, "learner code runs without capabilities"
    # pseudo-terminals of its own, as a kernel has (``!cmd`` runs in one); none of the machine's
    assert about["ptys"] == ["ptmx"] and about["pty"] == "/dev/pts/0", (about["ptys"], about["pty"])
    assert set(about["accounts"]) <= {"root", "learner", "nobody", "nogroup"}, "no names of the machine's users"
    # the system's top-level folders, plus the first folder on the way to the checkout and the Pythons (/work, /check…)
    installation = {Path(p).resolve().parts[1] for p in (ROOT, sys.prefix, sys.base_prefix)}
    assert set(about["root"]) <= {"bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc", "root",
                                  "sbin", "tmp", "usr", *installation}, about["root"]
    assert "written.txt" not in report["workdir_after_write"], "the notebook's writes stay in its own tmpfs"


def check_teardown(report: dict) -> None:
    failed = [name for name, ok in report.items() if not ok]
    assert not failed, f"teardown failed: {failed} ({report})"


# -- as root (the grading server) ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scratch():
    folder = tempfile.mkdtemp(prefix="lncourse-test-sandboxes-")
    os.chmod(folder, 0o711)
    yield folder
    leftovers = os.listdir(folder)
    shutil.rmtree(folder, ignore_errors=True)
    assert not leftovers, f"sandboxes left their folders behind: {leftovers}"


def test_learner_sees_only_the_allow_list(scratch):
    before = set(os.listdir(tempfile.gettempdir()))
    report = visibility_report(scratch)
    assert report["mode"] == ("user" if IS_ROOT else "userns")
    check_visibility(report)
    if IS_ROOT:
        assert report["about"]["uid"] == SLOT_UID
    new_in_tmp = set(os.listdir(tempfile.gettempdir())) - before
    if IS_ROOT:  # the sandbox's own (another test worker may make a matplotlib-* folder of its own meanwhile)
        new_in_tmp = {n for n in new_in_tmp if _owner(Path(tempfile.gettempdir(), n)) == SLOT_UID}
    assert not [n for n in new_in_tmp if "profile_default" in n or n.startswith("matplotlib")], new_in_tmp


def _owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except FileNotFoundError:  # someone else's, already gone
        return None


def test_notebook_folder_is_copied_in_and_writes_stay_inside(scratch, monkeypatch):
    prepared = tempfile.mkdtemp(prefix="lncourse-sandbox-", dir=scratch)
    Path(prepared, "data").mkdir()
    Path(prepared, "data", "x.csv").write_text("1,2\n")
    os.symlink("data/x.csv", Path(prepared, "link.csv"))
    monkeypatch.setattr(client.tempfile, "mkdtemp", lambda **_: prepared)  # as the grader fills it before spawn
    monkeypatch.setattr(client, "copy_learner_files", lambda *_: None, raising=False)
    with client.Sandbox(mode="auto", uid=SLOT_UID) as box:
        assert str(box.workdir) == prepared
        seen = run_json(box, "import json, os\nopen('data/out.txt', 'w').write('x')\n"
                             "names = sorted(n for n in os.listdir() if n[0] != '.')  # .ipython: its profile\n"
                             "print(json.dumps([open('data/x.csv').read(), open('link.csv').read(), names]))")
        assert seen == ["1,2\n", "1,2\n", ["data", "link.csv"]]
        assert not Path(prepared, "data", "out.txt").exists()
    assert not Path(prepared).exists()


@pytest.mark.slow  # a sandbox, seconds
def test_detached_processes_do_not_outlive_the_notebook(scratch):
    report = teardown_report(scratch)
    check_teardown(report)
    if IS_ROOT:
        assert wait_until(lambda: not processes_of(SLOT_UID)), processes_of(SLOT_UID)


def group_limits(pid: int) -> dict:
    """The memory and pids limits of the control group(s) holding host process ``pid``."""
    from grader.grading.sandbox import cgroup

    mounts, found = cgroup._mounts(), {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller, name in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max"), ("", "memory.max")):
            if controller in (controllers.split(",") if controllers else [""]) and controller in mounts:
                limit = Path(mounts[controller] + path, name)
                if limit.exists() and "lncourse-" in path:
                    found[name] = limit.read_text().strip()
    return found


@pytest.mark.slow  # a sandbox filling its memory limit
def test_memory_hog_is_killed_alone(scratch):
    from grader.grading.sandbox import cgroup

    with client.Sandbox(mode="auto", uid=SLOT_UID, scratch=Path(scratch)) as box:
        if not box.isolation.get("cgroup"):
            pytest.skip("no control group here (not root, or no writable memory cgroup)")
        limits = group_limits(box.pid)
        assert int(limits.get("memory.limit_in_bytes", limits.get("memory.max", 0))) == cgroup.default_memory_bytes()
        assert limits.get("pids.max") == str(client.Limits().processes)
        assert run_json(box, "print(open('/proc/self/cgroup').read().count('lncourse'))") == 0  # its own view
    small = client.Limits()
    small.memory_bytes = 2**30  # the default (up to 2 GiB) behaves the same, only slower to fill
    box = client.Sandbox(mode="auto", uid=SLOT_UID, scratch=Path(scratch), limits=small)
    try:
        with pytest.raises(client.SandboxError, match="SIGKILL"):
            box.run_cell("import numpy as np\nhog = []\nfor _ in range(12):\n"
                         "    hog.append(np.ones(256 * 2**20 // 8))\nprint(len(hog))")
    finally:
        box.close()
    assert zygote_client.default_zygote().process.poll() is None, "the zygote survived"
    with client.Sandbox(mode="auto", uid=SLOT_UID, scratch=Path(scratch)) as again:
        assert run_json(again, "print(6 * 7)") == 42


def test_close_survives_deep_unremovable_trees(scratch):
    make_mess = """
import os
fd = os.open(".", os.O_RDONLY)
for _ in range(2000):
    os.mkdir("d", dir_fd=fd)
    inner = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
os.close(os.open("deep.txt", os.O_CREAT | os.O_WRONLY, 0o000, dir_fd=fd))
os.chmod(fd, 0o000)
os.close(fd)
os.makedirs("locked/inner")
open("locked/inner/f", "w").write("x")
os.chmod("locked/inner", 0o000)
os.chmod("locked", 0o000)
print(42)
"""
    # in its tmpfs (auto); straight in the grader's folder (basic: on disk, where 2000 rmdirs can take seconds)
    for mode, depth in (("auto", 2000), ("basic", 200)):
        box = client.Sandbox(mode=mode, uid=SLOT_UID, scratch=Path(scratch))
        try:
            assert run_json(box, make_mess.replace("2000", str(depth))) == 42
        finally:
            box.close()
            box.close()  # twice is harmless
        assert not box.workdir.exists(), f"{mode}: {box.workdir} left behind"


def test_remove_tree_handles_any_depth_and_permissions():
    where = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)  # the algorithm, not the disk
    top = Path(where, "tree")
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3000):  # deeper than PATH_MAX and than Python's recursion limit
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.fchmod(fd, 0o000)
        os.close(fd)
        fd = inner
    os.close(fd)
    assert teardown.remove_tree(str(top)) and not top.exists()
    assert teardown.remove_tree(str(top))  # already gone: fine
    os.rmdir(where)


def test_impossible_isolation_refuses_to_start():
    with pytest.raises(client.SandboxError, match="unknown isolation mode"):
        client.Sandbox(mode="sealed-box")
    assert levels.choose_level("auto", is_root=True) == "user"
    assert levels.choose_level("userns", is_root=True) == "user"  # stronger, never the grader's uid
    assert levels.choose_level("auto", is_root=False) == "userns"
    assert levels.choose_level("basic", is_root=True) == "basic"
    with pytest.raises(levels.IsolationError, match="needs the grader to run as root"):
        levels.choose_level("user", is_root=False)


# -- as an unprivileged instructor ----------------------------------------------------------------------
def unprivileged_main() -> None:
    """Run by test_unprivileged_instructor as a throw-away user; prints one JSON report."""
    scratch = tempfile.mkdtemp(prefix="lncourse-test-sandboxes-")
    report = {"uid": os.getuid(), "visibility": visibility_report(scratch), "teardown": teardown_report(scratch)}
    try:
        client.Sandbox(mode="user", scratch=Path(scratch))
        report["user_mode"] = "started"
    except client.SandboxError as error:
        report["user_mode"] = str(error)
    report["leftovers"] = os.listdir(scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    zygote_client.default_zygote().close()  # and wait for it: the user is deleted next
    print("REPORT " + json.dumps(report))


@pytest.mark.slow  # a throw-away user and a sandbox in a subprocess
def test_unprivileged_instructor():
    """Grading as an instructor who is not root, from wherever the checkout sits (tests/another_user.py)."""
    report = report_as_throwaway_user(Path(__file__), "--unprivileged", "lnciso", timeout=120)
    assert report["uid"] != 0
    assert report["visibility"]["mode"] == "userns"
    check_visibility(report["visibility"])
    check_teardown(report["teardown"])
    assert "needs the grader to run as root" in report["user_mode"], report["user_mode"]
    assert not report["leftovers"], report["leftovers"]


if __name__ == "__main__" and "--unprivileged" in sys.argv:
    unprivileged_main()


@pytest.mark.slow  # a sandbox of its own
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces")
def test_packages_that_live_under_tmp_stay_visible(scratch, tmp_path, monkeypatch):
    """A checkout (and its venv) under /tmp, as CI's may be: the private /tmp must not cover them."""
    assert str(tmp_path).startswith("/tmp/") or str(tmp_path).startswith(tempfile.gettempdir())
    os.chmod(tmp_path, 0o755)
    for parent in tmp_path.parents:
        if str(parent).startswith(tempfile.gettempdir() + "/"):
            os.chmod(parent, os.stat(parent).st_mode | 0o011)
    shutil.copytree(ROOT / "grader", tmp_path / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    Path(tmp_path, "grader", "MARKER_UNDER_TMP").write_text("here")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    zygote = zygote_client.Zygote()
    try:
        with client.Sandbox(mode="auto", uid=SLOT_UID, scratch=scratch, zygote=zygote) as box:
            seen = run_json(box, "import json, grader, os\n"
                                 "print(json.dumps([grader.__file__, os.path.exists(os.path.join("
                                 "os.path.dirname(grader.__file__), 'MARKER_UNDER_TMP'))]))")
    finally:
        zygote.close()
    assert seen == [str(tmp_path / "grader" / "__init__.py"), True]


@pytest.mark.slow  # a sandbox of its own
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces")
def test_secret_folders_inside_an_allowed_path_stay_hidden(scratch, tmp_path, monkeypatch):
    """An exchange (or course) inside a folder the sandbox must show, e.g. /usr/local/share or a
    sys.path entry: the folder stays usable, the secret one is covered."""
    os.chmod(tmp_path, 0o755)
    for parent in tmp_path.parents:
        if str(parent).startswith(tempfile.gettempdir() + "/"):
            os.chmod(parent, os.stat(parent).st_mode | 0o011)
    Path(tmp_path, "public.txt").write_text("PUBLIC")
    inbound = tmp_path / "exchange" / "course" / "inbound" / "classmate+03_backward+2026"
    inbound.mkdir(parents=True)
    (inbound / "03_backward.ipynb").write_text("EXCHANGE-SECRET")
    for folder in [tmp_path / "exchange", *inbound.relative_to(tmp_path / "exchange").parents]:
        os.chmod(tmp_path / "exchange" / folder, 0o755)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # a sys.path entry: bound into every sandbox
    zygote = zygote_client.Zygote()
    try:
        with client.Sandbox(mode="auto", uid=SLOT_UID, scratch=scratch, zygote=zygote,
                            hidden=[str(tmp_path / "exchange")]) as box:
            seen = run_json(box, PROBE % [str(tmp_path / "public.txt"), str(tmp_path / "exchange"), str(inbound),
                                          str(inbound / "03_backward.ipynb")])
            # the cover cannot be lifted or written from inside
            lifted = text_of(box.run_cell(
                f"import subprocess\nr = subprocess.run(['umount', {str(tmp_path / 'exchange')!r}], "
                f"capture_output=True)\n"
                f"print(r.returncode != 0 and not __import__('os').access({str(inbound)!r}, __import__('os').F_OK))"))
    finally:
        zygote.close()
    assert seen[str(tmp_path / "public.txt")] == "VISIBLE: 'PUBLIC'", seen
    hidden = {path: outcome for path, outcome in seen.items() if "public" not in path}
    assert all(outcome.startswith("hidden") for outcome in hidden.values()), seen
    assert lifted.strip() == "True"


def test_every_exchange_any_nbgrader_config_names_is_hidden(tmp_path, monkeypatch):
    from grader.grading.run.course_setup import DEFAULT_EXCHANGE, secret_folders

    (tmp_path / "global").mkdir()
    (tmp_path / "global" / "nbgrader_config.py").write_text("c = get_config()\nc.Exchange.root = '/opt/hub/exchange'\n")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "nbgrader_config.py").write_text("this is not python\n")
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text("c = get_config()\nc.Exchange.root = 'exchange-here'\n")
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", os.pathsep.join([str(tmp_path / "broken"), str(tmp_path / "global")]))
    monkeypatch.chdir(course)
    found = secret_folders(course)
    assert {str(course), DEFAULT_EXCHANGE, "/opt/hub/exchange", str(course / "exchange-here")} <= set(found), found
