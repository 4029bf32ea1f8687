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
import shutil
import signal
import socket
import sys

from grader.grading.startup import FACTORY_FOLDER_PREFIX, private_torch_cache

# torch.fx.experimental.symbolic_shapes (and with it sympy): torch.autograd.grad imports it on its first
# call with grad_outputs, which the checks' autograd oracles make; after the fork that cost every notebook
# about 0.3 s. Not torch._dynamo (about 1 s more): torch would import it on the first use of a
# TorchDispatchMode, but the grader's two (the memory measurement, the delegation recorder) opt out
# (``_should_skip_dynamo``), so a notebook imports it only if it compiles something itself.
WARM_MODULES = ["numpy", "matplotlib", "matplotlib.pyplot", "IPython.core.interactiveshell", "torch",
                "torch.fx.experimental.symbolic_shapes",
                "ipykernel.inprocess.ipkernel", "IPython.core.magics", "IPython.core.completer",
                "IPython.core.oinspect", "IPython.core.application", "IPython.core.completerlib",
                "IPython.core.pylabtools",
                "tornado.platform.asyncio", "tornado.queues", "tornado.gen", "sqlite3", "bdb", "tracemalloc",
                "matplotlib.backends.backend_agg", "numpy.random",  # not matplotlib_inline: it hooks the shell it finds
                # what grader.learner imports (it registers an observer when imported, so not it)
                "grader.attempts", "grader.exercises",
                "grader.compare", "grader.numerics", "grader.oracles", "grader.grading.sandbox.protocol",
                "grader.grading.sandbox.stream",
                "grader.grading.sandbox.isolation", "grader.grading.sandbox.teardown"]


def warm_up() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module; the learner's import will say
            pass
    _format_one_traceback()
    _memoise_word_patterns()
    from grader.grading.sandbox import allowlist

    allowlist.plan()  # what the sandboxes may see, computed once and inherited by every fork


def _format_one_traceback() -> None:
    """Format a traceback the way a kernel does, so that no fork pays for the first one.

    A learner's failing cell is formatted by IPython (stack_data, pygments): the first traceback of a
    process imports their formatting modules and has ``inspect.getmodule`` read every loaded module's
    path (about 2,000 with torch). A wrong notebook has a dozen failing cells; done here once, every
    fork inherits those caches. Only caches change: the learner's tracebacks read the same.
    """
    import linecache

    name, source = "<zygote warm-up>", "def warm_up():\n    raise ValueError('warm-up')\n\n\nwarm_up()\n"
    # Its lines are shown, as a cell's are: pygments compiles the Python lexer's patterns on first use.
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    try:
        from IPython.core import ultratb
        from IPython.core.interactiveshell import InteractiveShell

        formatter = ultratb.AutoFormattedTB(mode=InteractiveShell.xmode.default_value,
                                            theme_name=InteractiveShell.colors.default_value, tb_offset=1)
        try:
            exec(compile(source, name, "exec"), {})
        except ValueError:
            formatter.structured_traceback(*sys.exc_info())
    except Exception:  # noqa: BLE001 - a cache not filled costs time, not correctness
        pass
    finally:
        linecache.cache.pop(name, None)


def _memoise_word_patterns() -> None:
    """pygments' keyword patterns built once per zygote, not once per traceback frame
    (``grader.grading.seams.pygments``)."""
    from grader.grading.seams import pygments as pygments_seam

    pygments_seam.install_regex_memo()


_exited: dict[int, int] = {}  # children reaped (by a status request) and their exit codes
_groups: dict[int, list | None] = {}  # each live sandbox's control group folders
_levels: dict[int, tuple[str, int]] = {}  # each live sandbox's isolation level and uid
_sandbox_uids: set[int] = set()  # every sandbox uid this zygote (as root) has started: forgotten when it leaves


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

    A sandbox in namespaces first gets SIGTERM: its relay kills its PID 1, which takes the whole
    PID namespace with it, then (as root) invalidates the sandbox uid's keyrings and exits.
    Then, with a control group: freeze it, kill all, remove it. Then the sandbox's first process:
    SIGTERM, SIGKILL to its process group if it is still there a moment later. A sandbox without
    namespaces run as root (``basic``) then has its uid's leftovers swept (``teardown.sweep_uid``).
    """
    from grader.grading.sandbox import cgroup, teardown

    paths = _groups.pop(pid, None)
    level, uid = _levels.pop(pid, ("", -1))
    try:
        if level in ("user", "userns") and wait_for(pid, 0) is None:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
            wait_for(pid, 1.0)
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
        if level == "basic" and uid > 0 and os.geteuid() == 0 and uid not in (u for _, u in _levels.values()):
            teardown.sweep_uid(uid)
    except Exception:  # noqa: BLE001 - teardown must not stop the zygote
        code = _exited.get(pid)
    _exited.pop(pid, None)
    return code


def forget_sandbox_uids() -> None:
    """As root, when this zygote leaves: invalidate the keyrings of every sandbox uid it started (each
    sandbox already did at its start and its relay at its end; this catches a relay killed before it
    could), in one throw-away fork that becomes each uid in turn. Never raises."""
    from grader.grading.sandbox import keyrings

    uids = sorted(u for u in _sandbox_uids if u > 0 and u not in (v for _, v in _levels.values()))
    _sandbox_uids.clear()
    if not uids or os.geteuid() != 0:
        return
    try:
        child = os.fork()
    except OSError:
        return
    if child == 0:
        try:
            os.setgroups([])
            for uid in uids:
                os.setresuid(uid, uid, 0)  # the saved uid keeps the way back to root for the next one
                try:
                    if keyrings.fresh_session_keyring():
                        keyrings.forget_user_keyrings()
                except OSError:
                    pass
                os.setresuid(0, 0, 0)
        finally:
            os._exit(0)
    try:
        os.waitpid(child, 0)
    except OSError:
        pass


def fork_sandbox(request: dict, fds: list[int], control: socket.socket) -> int:
    """Fork a sandbox in a new control group (when the machine allows); returns its pid."""
    from grader.grading.sandbox import cgroup, levels, worker

    config = request["config"]
    limits = config.get("limits", {})
    paths = cgroup.create(limits.get("memory_bytes"), limits.get("processes")) if config.get("cgroup", True) else None
    config["cgroup"] = paths
    try:
        level = levels.choose_level(config.get("mode", "auto"), os.geteuid() == 0)
    except levels.IsolationError:
        level = ""  # the sandbox refuses to start itself
    uid = int(config.get("uid", 65534))
    child = os.fork()
    if child == 0:
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            control.close()
            os.dup2(fds[0], 0)
            os.dup2(fds[1], 1)
            if len(fds) > 2:  # the memory the grader shares with it (grader.grading.sandbox.shared_args)
                config["shared_fd"] = os.dup(fds[2])
            for fd in fds:
                os.close(fd)
            os.chdir(request["cwd"])
            worker.run(config)
        finally:
            os._exit(70)
    _groups[child] = paths
    _levels[child] = (level, uid)
    if os.geteuid() == 0 and uid > 0 and level in ("user", "basic"):
        _sandbox_uids.add(uid)
    _exited.pop(child, None)  # a recycled pid: forget its predecessor
    return child


def serve(control: socket.socket) -> None:
    try:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
            except OSError:
                return
            if not message:
                return
            request = json.loads(message.decode())
            if request["op"] == "status":
                code = wait_for(int(request["pid"]), float(request.get("wait", 0)))
                control.sendall((json.dumps({"code": code}) + "\n").encode())
                continue
            if request["op"] == "exit":  # the client leaves: reply once every sandbox, and all they left, is gone
                for pid in list(_groups):
                    destroy(pid)
                forget_sandbox_uids()
                control.sendall(b'{"code": 0}\n')
                return
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
        forget_sandbox_uids()


def _same_user(connection: socket.socket) -> bool:
    """The process at the other end runs as this user (never a sandbox's uid)."""
    import struct

    try:
        _, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                              struct.calcsize("3i")))
    except (OSError, struct.error):
        return False
    return uid == os.getuid()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def serve_factory(control: socket.socket, listener: socket.socket) -> None:
    """Give each connection a zygote of its own: a fork of this warm process, serving it (``serve``).

    Each such zygote lives as long as its connection (one grading slot's); the factory lives until
    ``control`` closes (its grader is done or dead), then stops taking connections.
    """
    import select

    try:
        _serve_connections(control, listener, select.select)
    finally:  # however its grader ended (even killed): no socket, no folder (torch's cache is in it) left
        path = listener.getsockname()
        try:
            os.unlink(path)
        except OSError:
            pass
        if os.path.basename(os.path.dirname(path)).startswith(FACTORY_FOLDER_PREFIX):
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _serve_connections(control: socket.socket, listener: socket.socket, select) -> None:
    while True:
        readable = select([control, listener], [], [], 5.0)[0]
        _reap()
        if control in readable:
            try:
                if not control.recv(1):
                    return
            except OSError:
                return
        if listener not in readable:
            continue
        try:
            connection, _ = listener.accept()
        except OSError:
            continue
        if not _same_user(connection):
            connection.close()
            continue
        child = os.fork()
        if child == 0:
            try:
                listener.close()
                control.close()
                connection.sendall(b'{"ready": true}\n')
                serve(connection)
            finally:
                os._exit(0)
        connection.close()


def main() -> None:
    """``zygote CONTROL_FD``: a zygote for the grader at the other end of the socket CONTROL_FD;
    ``zygote CONTROL_FD --factory LISTENER_FD``: a factory of zygotes (``serve_factory``)."""
    control = socket.socket(fileno=int(sys.argv[1]))
    listener = socket.socket(fileno=int(sys.argv[3])) if sys.argv[2:3] == ["--factory"] else None
    owner, torch_cache = os.getpid(), private_torch_cache()
    try:
        warm_up()
        import gc

        gc.freeze()  # the warm heap is shared by every fork: keep the collector from touching (copying) it
        control.sendall(b'{"ready": true}\n')
        if listener is None:
            serve(control)
        else:
            serve_factory(control, listener)
    finally:
        if torch_cache and os.getpid() == owner:  # a fork that returns here does not own it
            shutil.rmtree(torch_cache, ignore_errors=True)


if __name__ == "__main__":
    main()
