"""A warm process that forks sandboxes, so no notebook pays for Python's imports.

Importing numpy, matplotlib, IPython and torch takes seconds; forking a process that has
already imported them takes milliseconds. The zygote never runs learner code itself: each
request (over a private control socket, with the child's two pipe ends passed as file
descriptors) forks a child that confines itself (``worker.run``) before serving.
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys

# torch._dynamo is not the learner's: torch imports it on first use of a TorchDispatchMode (the
# memory measurement and the delegation tripwires) or of autograd's grad. Imported after the fork,
# it cost every notebook about a second (sympy, torch.distributed, torch.onnx); here, once.
WARM_MODULES = ["numpy", "matplotlib", "matplotlib.pyplot", "IPython.core.interactiveshell", "torch", "torch._dynamo",
                "ipykernel.inprocess.ipkernel", "IPython.core.magics", "IPython.core.completer",
                "IPython.core.oinspect", "IPython.core.application", "IPython.core.completerlib", "IPython.core.pylabtools",
                "tornado.platform.asyncio", "tornado.queues", "tornado.gen", "sqlite3", "bdb", "tracemalloc",
                "matplotlib.backends.backend_agg",
                "grader.compare", "grader.numerics", "grader.oracles", "grader.grading.sandbox.protocol", "grader.grading.sandbox.stream",
                "grader.grading.sandbox.isolation"]


def warm_up() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module; the learner's import will say
            pass
    from grader.grading.sandbox import isolation

    isolation.plan()  # what the sandboxes may see, computed once and inherited by every fork


_exited: dict[int, int] = {}  # children reaped (by a status request) and their exit codes
_groups: dict[int, list | None] = {}  # each live sandbox's control group folders


def wait_for(pid: int, seconds: float):
    """The child's exit code (negative: killed by that signal), or None if still running."""
    import time

    if pid in _exited:
        return _exited[pid]
    deadline = time.monotonic() + seconds
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            _exited[pid] = os.waitstatus_to_exitcode(status)
            return _exited[pid]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def destroy(pid: int):
    """End a sandbox and everything it started; returns its exit code. Never raises.

    With a control group: freeze it, kill all, remove it. Then the sandbox's first process:
    SIGTERM (a namespace's relay then kills its PID 1, which takes the whole PID namespace
    with it), SIGKILL to its process group if it is still there a moment later.
    """
    from grader.grading.sandbox import cgroup

    paths = _groups.pop(pid, None)
    try:
        cgroup.kill(paths)
        code = wait_for(pid, 0)
        if pid not in _exited:  # never reaped, so the pid (and its process group) is still ours
            for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(pid, sig) if sig == signal.SIGKILL else os.kill(pid, sig)
                except OSError:
                    pass
                code = wait_for(pid, wait)
                if code is not None:
                    break
        cgroup.remove(paths)
    except Exception:  # noqa: BLE001 - teardown must not stop the zygote
        code = _exited.get(pid)
    _exited.pop(pid, None)
    return code


def fork_sandbox(request: dict, fds: list[int], control: socket.socket) -> int:
    """Fork a sandbox in a new control group (when the machine allows); returns its pid."""
    from grader.grading.sandbox import cgroup, worker

    config = request["config"]
    limits = config.get("limits", {})
    paths = cgroup.create(limits.get("memory_bytes"), limits.get("processes")) if config.get("cgroup", True) else None
    config["cgroup"] = paths
    child = os.fork()
    if child == 0:
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            control.close()
            os.dup2(fds[0], 0)
            os.dup2(fds[1], 1)
            for fd in fds:
                os.close(fd)
            os.chdir(request["cwd"])
            worker.run(config)
        finally:
            os._exit(70)
    _groups[child] = paths
    _exited.pop(child, None)  # a recycled pid: forget its predecessor
    return child


def serve(control: socket.socket) -> None:
    try:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 2)
            except OSError:
                return
            if not message:
                return
            request = json.loads(message.decode())
            if request["op"] == "status":
                code = wait_for(int(request["pid"]), float(request.get("wait", 0)))
                control.sendall((json.dumps({"code": code}) + "\n").encode())
                continue
            if request["op"] == "destroy":
                code = destroy(int(request["pid"]))
                control.sendall((json.dumps({"code": code}) + "\n").encode())
                continue
            child = fork_sandbox(request, fds, control)
            for fd in fds:
                os.close(fd)
            control.sendall((json.dumps({"pid": child, "cgroup": bool(_groups.get(child))}) + "\n").encode())
    finally:  # the grader went away: nothing it started may outlive it
        for pid in list(_groups):
            destroy(pid)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    warm_up()
    import gc

    gc.freeze()  # the warm heap is shared by every fork: keep the collector from touching (copying) it
    control.sendall(b'{"ready": true}\n')
    serve(control)


if __name__ == "__main__":
    main()
