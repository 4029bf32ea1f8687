"""The grader's side of a zygote (``grader.grading.sandbox.zygote``): start one, have it fork sandboxes.

A ``Zygote`` is one warm process that forks each ``Sandbox`` (``grader.grading.sandbox.client``); a
``ZygoteFactory`` forks a warm zygote for each grading slot, so a pool pays for the imports once.
``default_zygote`` is this process's own, started on first use and kept for the process's life.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile

from grader.boundary import SandboxError
from grader.grading.seams import OFF_VARIABLE
from grader.grading.startup import FACTORY_FOLDER_PREFIX, TORCH_CACHE_VARIABLE


def _zygote_environment() -> dict:
    """A zygote's whole environment (its sandboxes start from it): nothing of the grader's but the path."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    for name in ("PYTHONPATH", OFF_VARIABLE):  # OFF_VARIABLE: speed patches switched off (grader.grading.seams)
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _start_zygote_process(control: socket.socket, *extra: str, pass_fds: tuple[int, ...] = (),
                          environment: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grader.grading.sandbox.zygote", str(control.fileno()), *extra],
                            pass_fds=[control.fileno(), *pass_fds], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**_zygote_environment(), **(environment or {})}, start_new_session=True, cwd="/")


FACTORY_READY_SECONDS = 60.0  # a factory's fork has nothing to import: silence this long means it is stuck


class Zygote:
    """A warm process (``grader.grading.sandbox.zygote``) that forks sandboxes on request.

    Its own process, or (``factory``: a ``ZygoteFactory``'s socket) a fork of that factory's warm process,
    made for this client alone: then it costs no imports, and it lives until this client closes it.
    """

    def __init__(self, wait: bool = True, factory: str | None = None):
        """Start the zygote; ``wait=False`` returns at once, while it imports (``wait_ready``).
        Raises OSError if ``factory`` cannot be reached."""
        self.process = None
        if factory:
            ours = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                ours.connect(factory)
            except OSError:
                ours.close()
                raise
        else:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.process = _start_zygote_process(theirs)
            theirs.close()
        self.control = ours
        self.replies = ours.makefile("rb")
        self.ready = False
        if wait:
            self.wait_ready()

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        try:  # a factory's zygote is not our child: its end of the socket closes when it dies
            readable = select.select([self.control], [], [], 0)[0]
            return not readable or self.control.recv(1, socket.MSG_PEEK) != b""
        except (OSError, ValueError):
            return False

    def wait_ready(self) -> None:
        """Block until the zygote has imported its warm modules (its first line says so)."""
        if not self.ready:
            if self.process is None:  # a fork of a warm factory answers at once: one that does not is broken
                self.control.settimeout(FACTORY_READY_SECONDS)
            try:
                started = self._reply().get("ready")
            except (SandboxError, OSError) as error:
                if self.process is None:
                    use_factory(None)  # the factory did not make one: this process starts its own from now on
                if isinstance(error, SandboxError):
                    raise
                raise SandboxError(f"the zygote factory did not answer ({type(error).__name__})") from error
            finally:
                self.control.settimeout(None)
            if not started:
                raise SandboxError("the sandbox zygote did not start")
            self.ready = True

    def _reply(self) -> dict:
        line = self.replies.readline()
        if not line:
            raise SandboxError("the sandbox zygote died")
        return json.loads(line)

    def spawn(self, config: dict, cwd: str, shared_fd: int) -> tuple[int, int, int]:
        """Fork a sandbox that maps ``shared_fd`` (``SharedArgs``); returns (pid, fd to write to it, fd to read
        from it)."""
        self.wait_ready()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        request = json.dumps({"op": "fork", "config": config, "cwd": cwd}).encode()
        socket.send_fds(self.control, [request], [to_child_r, from_child_w, shared_fd])
        os.close(to_child_r)
        os.close(from_child_w)
        return int(self._reply()["pid"]), to_child_w, from_child_r

    def status(self, pid: int, wait: float):
        """Exit code of a finished sandbox (reaping it), or None if it is still running after ``wait`` s."""
        self.wait_ready()
        socket.send_fds(self.control, [json.dumps({"op": "status", "pid": pid, "wait": wait}).encode()], [])
        return self._reply()["code"]

    def destroy(self, pid: int):
        """Kill a sandbox and all it started (control group, PID namespace), reap it; its exit code."""
        self.wait_ready()
        socket.send_fds(self.control, [json.dumps({"op": "destroy", "pid": pid}).encode()], [])
        return self._reply()["code"]

    def close(self) -> None:
        """Stop the zygote; it first destroys the sandboxes it still has. Returns once it has."""
        try:
            if self.ready or self.process is not None:  # a factory's fork that never answered has no sandboxes
                self.control.settimeout(30)
                socket.send_fds(self.control, [json.dumps({"op": "exit"}).encode()], [])
                self._reply()  # sent once its sandboxes are gone
        except (OSError, ValueError, SandboxError):
            pass
        try:
            self.replies.close()  # the socket's descriptor stays open while its file object does
            self.control.close()
            if self.process is not None:
                self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            if self.process is not None:  # a factory's fork is not our child: its socket closing ends it
                self.process.kill()
                self.process.wait()


class ZygoteFactory:
    """One warm zygote process that forks a zygote for each client (``Zygote(factory=factory.path)``), so a
    pool of N grading slots pays for the imports once, not N times.

    Its socket lives in a private folder (0700) and it serves only this user's processes; it exits when
    this object is closed or its owner dies (the control socket's other end closes), and removes the folder.
    """

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix=FACTORY_FOLDER_PREFIX)
        self.path = os.path.join(self.folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path)  # OSError for a path over the limit (108 bytes): no factory
            listener.listen(64)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            # torch's cache folder inside ours: close() may kill the factory mid-import, and removes both
            self.process = _start_zygote_process(theirs, "--factory", str(listener.fileno()),
                                                 pass_fds=(listener.fileno(),),
                                                 environment={TORCH_CACHE_VARIABLE: os.path.join(self.folder, "torch")})
            theirs.close()
        except OSError:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            listener.close()
        self.control = ours

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Stop the factory now, even mid-import (a run whose results were all cached never needed it); the
        zygotes it forked are not its children's keepers: each lives until its own client closes it."""
        self.control.close()
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_default_zygote: Zygote | None = None
_factory_path: str | None = None  # a ZygoteFactory's socket, for this process's zygote (``use_factory``)


def use_factory(path: str | None) -> None:
    """This process's zygote will come from the factory at ``path`` (a pool worker's initializer says so)."""
    global _factory_path
    _factory_path = path


def default_zygote(wait: bool = True) -> Zygote:
    """This process's zygote, started on first use; ``wait=False``: do not wait for its imports yet
    (the caller has its own to do meanwhile). From the factory ``use_factory`` named, if it answers;
    otherwise a process of its own."""
    global _default_zygote
    if _default_zygote is None or not _default_zygote.alive():
        _default_zygote = None
        if _factory_path:
            try:
                _default_zygote = Zygote(wait=False, factory=_factory_path)
            except OSError:
                pass  # the factory is gone: this process starts its own
        _default_zygote = _default_zygote or Zygote(wait=False)
    if wait:
        try:
            _default_zygote.wait_ready()
        except SandboxError:
            if _default_zygote.process is not None:
                raise
            _default_zygote.close()  # the factory failed this process: it starts its own (use_factory(None) done)
            _default_zygote = Zygote()
    return _default_zygote
