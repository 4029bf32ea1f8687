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

WARM_MODULES = ["numpy", "matplotlib", "matplotlib.pyplot", "IPython.core.interactiveshell", "torch",
                "grader.compare", "grader.numerics", "grader.oracles", "grader.sandbox.protocol", "grader.sandbox.stream",
                "grader.sandbox.isolation"]


def warm_up() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module; the learner's import will say
            pass


def wait_for(pid: int, seconds: float):
    """The child's exit code (negative: killed by that signal), or None if still running."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def serve(control: socket.socket) -> None:
    from grader.sandbox import worker

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
                worker.run(request["config"])
            finally:
                os._exit(70)
        for fd in fds:
            os.close(fd)
        control.sendall((json.dumps({"pid": child}) + "\n").encode())


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    warm_up()
    control.sendall(b'{"ready": true}\n')
    serve(control)


if __name__ == "__main__":
    main()
