"""One control group per sandbox: a memory and a process limit for its whole tree, and a clean kill.

Resource limits (``setrlimit``) are per process: a notebook that forks ten children of
1 GiB each, or one that detaches with ``setsid()``, escapes them. A control group holds
every process the notebook starts, however it starts them, so

- ``memory``: the group's total memory (tmpfs files included) has a ceiling, and when the
  notebook passes it the kernel's OOM killer picks a victim *inside the group*; the grader,
  its pool workers and the zygote stay outside and are never chosen;
- ``pids``: the group's number of tasks has a ceiling (a fork bomb stops there);
- ``freezer``: teardown freezes the group, kills everything in it, thaws and removes it,
  so nothing the notebook started outlives it;
- ``cpu`` (v1, where mounted): the group's CPU time is capped at one core, so a notebook
  that spins up hundreds of busy processes slows only itself, not a classmate's notebook
  running beside it.

The zygote (root, outside every sandbox's group) creates the group before it forks the
sandbox; the sandbox joins it as its first act, before it can run any learner code.

cgroup v1 (separate ``memory``, ``pids``, ``freezer`` hierarchies, as on this machine and
the CI machines) and a delegated cgroup v2 subtree are supported. Where neither is
writable (a non-root instructor, usually), ``create`` returns None and the sandbox relies
on its PID namespace and resource limits alone: no error.
"""
from __future__ import annotations

import os
import secrets
import signal
import time

PREFIX = "lncourse-"
V1_CONTROLLERS = ("memory", "pids", "freezer", "cpu")
CPU_PERIOD_US = 100_000
SANDBOX_CPUS = 1  # a sandbox's whole tree gets at most one core: a spinning fork bomb cannot starve its neighbours
_counter = 0


def default_memory_bytes() -> int:
    """2 GiB, or less on a small machine: about a quarter of the memory per CPU core, at least 512 MiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 2 * 2**30
    return max(512 * 2**20, min(2 * 2**30, total // (2 * (os.cpu_count() or 1))))


def _mounts() -> dict[str, str]:
    """Mount point of each cgroup v1 controller we use, and of the v2 hierarchy ('' key)."""
    found = {}
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        mount_point, fstype, options = fields[4].replace("\\040", " "), tail[0], tail[2].split(",")
        if fstype == "cgroup":
            for controller in V1_CONTROLLERS:
                if controller in options:
                    found.setdefault(controller, mount_point)
        elif fstype == "cgroup2":
            found.setdefault("", mount_point)
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and its v2 path under key ''."""
    paths = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
    except (OSError, ValueError):
        pass
    return paths


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep(parent: str) -> None:
    """Remove groups left by a zygote that died (named after its pid) and that are now empty."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        try:
            creator = int(name[len(PREFIX):].split("-")[0])
        except ValueError:
            continue
        if creator != os.getpid() and not _pid_alive(creator):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


def _create_v1(mounts: dict, own: dict, name: str, memory_bytes: int, processes: int) -> list[str] | None:
    if "memory" not in mounts or "pids" not in mounts:
        return None
    created = []
    try:
        for controller in V1_CONTROLLERS:
            if controller not in mounts:
                continue
            parent = os.path.normpath(mounts[controller] + "/" + own.get(controller, "/"))
            _sweep(parent)
            path = os.path.join(parent, name)
            os.mkdir(path, 0o755)
            created.append(path)
            if controller == "memory":
                _write(os.path.join(path, "memory.limit_in_bytes"), str(memory_bytes))
                if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                    _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(memory_bytes))  # no swap either
            elif controller == "pids":
                _write(os.path.join(path, "pids.max"), str(processes))
            elif controller == "cpu" and os.path.exists(os.path.join(path, "cpu.cfs_quota_us")):
                _write(os.path.join(path, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
                _write(os.path.join(path, "cpu.cfs_quota_us"), str(CPU_PERIOD_US * SANDBOX_CPUS))
        return created
    except OSError:
        for path in reversed(created):
            try:
                os.rmdir(path)
            except OSError:
                pass
        return None


def _create_v2(mounts: dict, own: dict, name: str, memory_bytes: int, processes: int) -> list[str] | None:
    if "" not in mounts or "memory" in mounts:
        return None  # hybrid: the controllers live on v1
    parent = os.path.normpath(mounts[""] + "/" + own.get("", "/"))
    path = os.path.join(parent, name)
    try:
        _sweep(parent)
        os.mkdir(path, 0o755)
    except OSError:
        return None
    try:
        if not os.path.exists(os.path.join(path, "memory.max")):
            try:
                _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
            except OSError:
                pass
        _write(os.path.join(path, "memory.max"), str(memory_bytes))
        if os.path.exists(os.path.join(path, "memory.swap.max")):
            _write(os.path.join(path, "memory.swap.max"), "0")
        _write(os.path.join(path, "pids.max"), str(processes))
        if os.path.exists(os.path.join(path, "memory.oom.group")):
            _write(os.path.join(path, "memory.oom.group"), "1")
        return [path]
    except OSError:
        try:
            os.rmdir(path)
        except OSError:
            pass
        return None


def create(memory_bytes: int | None, processes: int | None) -> list[str] | None:
    """New group(s) for one sandbox under this process's own; their folders, or None if unavailable."""
    global _counter
    _counter += 1
    name = f"{PREFIX}{os.getpid()}-{_counter}-{secrets.token_hex(3)}"
    memory_bytes = int(memory_bytes or default_memory_bytes())
    processes = int(processes or 256)
    mounts, own = _mounts(), _own_paths()
    return _create_v1(mounts, own, name, memory_bytes, processes) or _create_v2(mounts, own, name, memory_bytes,
                                                                                processes)


def join(paths: list[str]) -> None:
    """Move this process into the group(s). Raises OSError: a sandbox that cannot join must not start."""
    for path in paths:
        _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))


def _pids(paths: list[str]) -> set[int]:
    found = set()
    for path in paths:
        try:
            found.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split())
        except (OSError, ValueError):
            pass
    return found


def _freeze(paths: list[str], frozen: bool) -> None:
    for path in paths:
        for name, value in (("freezer.state", "FROZEN" if frozen else "THAWED"),
                            ("cgroup.freeze", "1" if frozen else "0")):
            if os.path.exists(os.path.join(path, name)):
                try:
                    _write(os.path.join(path, name), value)
                except OSError:
                    pass
    if frozen:  # wait (briefly) until the freeze has taken: no fork can race the kill below
        deadline = time.monotonic() + 1.0
        for path in paths:
            state = os.path.join(path, "freezer.state")
            while os.path.exists(state) and time.monotonic() < deadline:
                try:
                    if _read(state).strip() == "FROZEN":
                        break
                except OSError:
                    break
                time.sleep(0.002)


def kill(paths: list[str] | None, timeout: float = 5.0) -> bool:
    """Kill every process in the group(s); True once they are empty. Never raises."""
    if not paths:
        return True
    try:
        kill_file = [os.path.join(p, "cgroup.kill") for p in paths if os.path.exists(os.path.join(p, "cgroup.kill"))]
        if kill_file:
            _write(kill_file[0], "1")
        deadline = time.monotonic() + timeout
        while True:
            pids = _pids(paths)
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            _freeze(paths, True)
            for pid in _pids(paths):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            _freeze(paths, False)
            time.sleep(0.005)
    except Exception:  # noqa: BLE001 - teardown must not fail the grader
        return False


def remove(paths: list[str] | None, timeout: float = 5.0) -> bool:
    """Kill what is left and remove the group(s); True if all are gone. Never raises."""
    if not paths:
        return True
    kill(paths, timeout)
    deadline = time.monotonic() + timeout
    left = list(paths)
    while left:
        for path in list(left):
            try:
                os.rmdir(path)
                left.remove(path)
            except FileNotFoundError:
                left.remove(path)
            except OSError:
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return not left
