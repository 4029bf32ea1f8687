"""The trusted side of a sandbox: start it, run cells in it, call learner functions in it.

A ``Sandbox`` owns one confined worker process (``grader.grading.sandbox.worker``). Learner
functions appear here as ``LearnerFunction`` proxies: calling one sends the arguments as
plain data, the learner's code runs over there, and what comes back is rebuilt from plain
data here. Checks therefore run in this process, which no learner code ever enters.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.boundary import RemoteFunction, SandboxError, learner_exception
from grader.grading.sandbox import protocol
from grader.grading.sandbox.shared_args import ArgumentsTooLarge, SharedArgs
from grader.grading.sandbox.zygote_client import Zygote, default_zygote


@dataclass
class Limits:
    cell_seconds: float = 120.0
    cpu_seconds: int = 600
    address_space_bytes: int = 8 * 2**30
    processes: int = 256
    file_bytes: int = 64 * 2**20
    open_files: int = 256
    output_characters: int = 20_000
    notebook_seconds: float = 600.0  # every cell and call of one notebook together
    rich_output_bytes: int = 2 * 2**20  # images and HTML a cell displays, all together

    def for_worker(self) -> dict:
        return {"cpu_seconds": self.cpu_seconds, "address_space_bytes": self.address_space_bytes,
                "processes": self.processes, "file_bytes": self.file_bytes, "open_files": self.open_files}


def _text(value, limit: int) -> str:
    """A learner-controlled field as a capped string (anything else becomes its capped str)."""
    text = value if type(value) is str else ("" if value is None else str(value)[:limit])
    return text if len(text) <= limit else text[:limit] + f"\n[truncated: {len(text) - limit} more characters]"


def clean_outputs(outputs, limits: "Limits") -> list[dict]:
    """Rebuild a cell's outputs from a sandbox reply: known output types, capped fields only.

    Whatever the sandbox sends, the result is a short list of nbformat-valid outputs with
    text fields capped at ``output_characters`` and rich (image/HTML) data at ``rich_output_bytes``.
    """
    cap, rich_left, cleaned = limits.output_characters, limits.rich_output_bytes, []
    for output in outputs[:100] if type(outputs) is list else []:
        if type(output) is not dict:
            continue
        kind = output.get("output_type")
        if kind == "stream":
            name = "stderr" if output.get("name") == "stderr" else "stdout"
            cleaned.append({"output_type": "stream", "name": name, "text": _text(output.get("text"), cap)})
        elif kind == "error":
            traceback = output.get("traceback")
            lines = [_text(line, cap) for line in traceback[:200]] if type(traceback) is list else []
            while sum(map(len, lines)) > cap and len(lines) > 1:
                lines.pop(0)  # keep the innermost frames and the message
            cleaned.append({"output_type": "error", "ename": _text(output.get("ename"), 200),
                            "evalue": _text(output.get("evalue"), cap), "traceback": lines})
        elif kind in ("display_data", "execute_result"):
            data = {}
            items = output.get("data") if type(output.get("data")) is dict else {}
            for mime, value in list(items.items())[:10]:
                if type(mime) is not str or len(mime) > 100 or type(value) is not str:
                    continue
                limit = cap if mime.startswith("text/plain") else min(rich_left, limits.rich_output_bytes)
                if len(value) > limit:
                    continue  # a half image is no image: drop this representation
                rich_left -= len(value) if not mime.startswith("text/plain") else 0
                data[mime] = value
            if not data:
                continue
            entry = {"output_type": kind, "data": data, "metadata": {}}
            if kind == "execute_result":
                entry["execution_count"] = None
            cleaned.append(entry)
    return cleaned


@dataclass
class CallRecord:
    """What the last call printed and how much memory it peaked at (when measured)."""

    stdout: str = ""
    peak_bytes: int | None = None
    traceback: str = ""


def sandbox_environment(home: str) -> dict:
    """A minimal environment: no instructor variables, no grading markers beyond nbgrader's own.

    No MPLBACKEND: the worker's kernel selects the inline backend, as a Jupyter kernel does."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": home, "TMPDIR": home, "MPLCONFIGDIR": home, "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "NBGRADER_EXECUTION": "autograde", "LANG": "C.UTF-8",
    }


def copy_learner_files(folder: Path, workdir: Path) -> None:
    """Copy the regular files under ``folder`` (already vetted by intake) into the workdir; links never followed."""
    for current, dirs, names in os.walk(folder):
        relative = Path(current).relative_to(folder)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(current, d))]
        (workdir / relative).mkdir(parents=True, exist_ok=True)
        for name in names:
            path = Path(current) / name
            if path.is_file() and not path.is_symlink():
                shutil.copyfile(path, workdir / relative / name)


class Sandbox:
    """One confined learner process. Use as a context manager."""

    def __init__(self, mode: str = "auto", uid: int = 65534, limits: Limits | None = None,
                 scratch: Path | None = None, zygote: "Zygote | None" = None, files: str | None = None,
                 hidden: list[str] | tuple[str, ...] = ()):
        self.limits = limits or Limits()
        self.cell_deadline = self.notebook_deadline = None
        self.launcher_died = False
        self.workdir = Path(tempfile.mkdtemp(prefix="lncourse-sandbox-", dir=scratch))
        if files:
            copy_learner_files(Path(files), self.workdir)  # the notebook's own folder, as Jupyter runs it
        if os.getuid() == 0:
            for folder, _, names in os.walk(self.workdir):
                for path in [folder, *(os.path.join(folder, n) for n in names)]:
                    os.chown(path, uid, uid, follow_symlinks=False)
        config = {"mode": mode, "uid": uid, "gid": uid, "workdir": str(self.workdir),
                  "limits": {**self.limits.for_worker(), **{k: getattr(self.limits, k) for k in
                                                            ("memory_bytes", "home_bytes", "tmp_bytes")
                                                            if getattr(self.limits, k, None) is not None}},
                  "environment": sandbox_environment(str(self.workdir)), "output_limit": self.limits.output_characters,
                  "hidden": [str(p) for p in hidden]}
        self.zygote = zygote or default_zygote()
        self.evidence: list[dict] = []  # what the grader saw but cannot prove (``note_evidence``)
        try:
            self.shared = SharedArgs()
        except OSError as error:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise SandboxError(f"no memory could be shared with the sandbox ({type(error).__name__})") from None
        config["shared_size"] = self.shared.size
        try:
            self.pid, self.to_child, self.from_child = self.zygote.spawn(config, str(self.workdir), self.shared.fd)
        except (OSError, ValueError, KeyError) as error:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.shared.close()
            raise SandboxError(f"the sandbox zygote failed ({type(error).__name__})") from None
        self.exit_code = None
        self.closed = False
        self.buffer = b""
        self.callbacks: dict[int, object] = {}
        self.last_call = CallRecord()
        hello = self.receive(deadline=time.monotonic() + 60)
        if hello.get("op") != "hello" or not hello.get("ok"):
            self.close()
            raise SandboxError(f"the sandbox could not start: {hello.get('error', hello)}")
        self.isolation = hello["isolation"]
        self.notebook_deadline = time.monotonic() + self.limits.notebook_seconds

    # -- lifetime ------------------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _finish(self, wait: float) -> None:
        """Collect the child's exit code from the zygote (it is the parent)."""
        if self.exit_code is None and not self.launcher_died:
            try:
                self.exit_code = self.zygote.status(self.pid, wait)
            except (OSError, ValueError, KeyError, SandboxError):
                self.launcher_died = True  # the grader's own failure, not the notebook's: worth a retry

    def close(self) -> None:
        """End the sandbox and everything it started (its control group, its PID namespace),
        then delete its folder however the notebook left it. Never raises."""
        if self.closed:
            return
        self.closed = True
        try:
            code = self.zygote.destroy(self.pid)
            if self.exit_code is None:
                self.exit_code = code
        except Exception:  # noqa: BLE001 - the zygote is gone: its children went to init, kill what we can
            self.launcher_died = True
            if self.exit_code is None:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except OSError:
                    pass
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self.shared.close()
        try:
            from grader.grading.sandbox.teardown import remove_tree

            remove_tree(str(self.workdir))
        except Exception:  # noqa: BLE001 - any failure falls back to rmtree
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- channel -------------------------------------------------------------------------
    def send(self, message: dict, deadline: float | None = None) -> None:
        """Write one message without ever blocking past ``deadline``: a sandbox that stops
        reading is a hung sandbox, not a hung grader."""
        data = protocol.dumps(message)
        deadline = self._deadline(deadline)
        os.set_blocking(self.to_child, False)
        while data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise SandboxError(self._timeout_message())
            try:
                _, writable, _ = select.select([], [self.to_child], [], min(remaining, 1.0))
                if writable:
                    data = data[os.write(self.to_child, data):]
            except BlockingIOError:
                continue
            except (OSError, ValueError):
                raise SandboxError(self._death_reason()) from None

    def _deadline(self, deadline: float | None) -> float:
        """The earliest of ``deadline``, the current test cell's budget and the notebook's."""
        candidates = [d for d in (deadline, self.cell_deadline, self.notebook_deadline) if d is not None]
        return min(candidates) if candidates else time.monotonic() + self.limits.cell_seconds

    def _timeout_message(self) -> str:
        if self.notebook_deadline is not None and time.monotonic() >= self.notebook_deadline:
            return f"time limit exceeded: the notebook ran longer than {self.limits.notebook_seconds:.0f} s in all"
        return f"time limit exceeded: a cell ran longer than {self.limits.cell_seconds:.0f} s"

    @contextlib.contextmanager
    def budget(self, seconds: float | None = None):
        """Every request inside shares one deadline (a test cell's calls all together)."""
        self.cell_deadline = time.monotonic() + (seconds or self.limits.cell_seconds)
        try:
            yield
        finally:
            self.cell_deadline = None

    def _death_reason(self) -> str:
        self._finish(2)
        code = self.exit_code
        if self.launcher_died:
            return "the grader's sandbox launcher died (not the notebook's doing)"
        if code is None:
            return "the notebook's process stopped answering"
        if code < 0:
            name = signal.Signals(-code).name
            hint = (" (CPU time limit)" if name == "SIGXCPU"
                    else " (killed: memory, process or file limits, or it killed itself)")
            return f"the notebook's process died from {name}{hint}"
        return f"the notebook's process exited with status {code} (sys.exit, os._exit or a crash in the kernel)"

    def receive(self, deadline: float) -> dict:
        fd = self.from_child
        deadline = self._deadline(deadline)
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise SandboxError(self._timeout_message())
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise SandboxError(self._death_reason())
            self.buffer += chunk
            if len(self.buffer) > protocol.MAX_LINE_BYTES:
                self.close()
                raise SandboxError("the notebook produced too much output (output flood)")
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            return protocol.loads(line)
        except protocol.ProtocolError as error:
            self.close()
            raise SandboxError(f"the notebook's process sent garbage on the grader's channel ({error})") from None

    def request(self, message: dict) -> dict:
        """Send a request; serve callbacks until the final reply arrives."""
        deadline = self._deadline(time.monotonic() + self.limits.cell_seconds)
        self.send(message, deadline)
        while True:
            reply = self.receive(deadline)
            if reply["op"] != "callback":
                return reply
            self.send(self._run_callback(reply), deadline)

    def _run_callback(self, message: dict) -> dict:
        function = self.callbacks.get(message.get("id"))
        try:
            args = [self.decode(a) for a in message.get("args", [])]
            kwargs = {str(k): self.decode(v) for k, v in message.get("kwargs", [])}
            return {"op": "return", "value": self.encode(function(*args, **kwargs))}
        except Exception as error:  # noqa: BLE001 - the check's own callable raised: hand the error over
            return {"op": "raise", "type": type(error).__name__, "message": str(error)[:4000]}

    # -- values --------------------------------------------------------------------------
    def _register(self, function) -> int:
        number = len(self.callbacks) + 1
        self.callbacks[number] = function
        return number

    def encode(self, value):
        return protocol.encode(value, register_callable=self._register)

    def decode(self, data):
        try:
            return protocol.decode(data, make_handle=lambda n, name: protocol.Unsupported(f"function {name}"))
        except protocol.ProtocolError as error:
            self.close()
            raise SandboxError(f"the notebook's process sent a malformed value ({error})") from None

    # -- requests ------------------------------------------------------------------------
    def run_cell(self, source: str) -> dict:
        """Run a learner cell; returns {"outputs": [nbformat outputs, capped], "error": {...} or None}."""
        reply = self.request({"op": "run", "source": source})
        if reply.get("op") != "ran":
            raise SandboxError("unexpected reply to a cell")
        if type(reply.get("outputs")) is list:
            outputs = reply["outputs"]
        else:  # a worker that reports streams and the error separately
            error = reply.get("error") if type(reply.get("error")) is dict else None
            outputs = [{"output_type": "stream", "name": n, "text": reply.get(n)} for n in ("stdout", "stderr")
                       if reply.get(n)]
            if error:
                outputs.append({"output_type": "error", "ename": error.get("ename"), "evalue": error.get("evalue"),
                                "traceback": [error.get("traceback")]})
        outputs = clean_outputs(outputs, self.limits)
        return {"outputs": outputs, "error": next((o for o in outputs if o["output_type"] == "error"), None)}

    def lookup(self, name: str):
        """The learner's global ``name``: a proxy for a function, a rebuilt value, or KeyError."""
        reply = self.request({"op": "describe", "name": name})
        kind = reply.get("kind")
        if kind == "callable":
            parameters = reply.get("parameters")
            return LearnerFunction(self, name, parameters[:100] if type(parameters) is list else None)
        if kind == "value":
            return self.decode(reply.get("value"))
        raise KeyError(name)

    def call(self, name: str, args: tuple, kwargs: dict, measure_memory: bool = False):
        """Call the learner's ``name``; array arguments travel through the shared memory, so that what the call
        did to them is read here (``SharedArgs``), and mirrored into ``args``/``kwargs``."""
        positions = [(i, a) for i, a in enumerate(args) if _shareable(a)]
        names = [(k, v) for k, v in kwargs.items() if _shareable(v)]
        try:
            placed = self.shared.place([a for _, a in positions] + [v for _, v in names])
        except ArgumentsTooLarge as error:
            raise SandboxError(f"the grader could not hand the arguments over ({error})") from None
        shared_args = {i: placed[n] for n, (i, _) in enumerate(positions)}
        shared_kwargs = {k: placed[len(positions) + n] for n, (k, _) in enumerate(names)}

        def encoded(value, slot):
            return protocol.shared(slot[0], slot[1].dtype, slot[1].shape) if slot else self.encode(value)

        message = {"op": "call", "name": name, "args": [encoded(a, shared_args.get(i)) for i, a in enumerate(args)],
                   "kwargs": [[k, encoded(v, shared_kwargs.get(k))] for k, v in kwargs.items()],
                   "measure_memory": measure_memory}
        try:
            reply = self.request(message)
        finally:
            if not self.closed:
                self._mirror(args, shared_args)
                self._mirror(kwargs, shared_kwargs)
        stdout = _text(reply.get("stdout", ""), self.limits.output_characters)
        if stdout:
            print(stdout, end="" if stdout.endswith("\n") else "\n")
        delegated = reply.get("delegated")
        if type(delegated) is list and delegated:
            names_seen = ", ".join(_text(n, 100) for n in delegated[:5])
            # what a process ran cannot be proven from its own report: evidence for the instructor, no verdict
            self.note_evidence("delegation", f"{name} called {names_seen} while the grader called it")
        if reply["op"] == "raise":
            self.last_call = CallRecord(stdout=stdout, traceback=_text(reply.get("traceback", ""), 8000))
            raise learner_exception(_text(reply.get("type", "Exception"), 100), _text(reply.get("message", ""), 4000))
        if reply["op"] != "return":
            raise SandboxError("unexpected reply to a call")
        value = self.decode(reply.get("value"))
        peak = reply.get("peak")
        self.last_call = CallRecord(stdout=stdout, peak_bytes=int(peak) if type(peak) is int and peak >= 0 else None)
        return value

    def _mirror(self, arguments, slots: dict) -> None:
        """Copy into the caller's arrays what the learner's call wrote into their shared copies."""
        for where, (offset, sent) in slots.items():
            updated = self.shared.read_back(offset, sent)
            if updated is None or np.array_equal(updated, sent, equal_nan=True):
                continue
            try:
                arguments[where][...] = updated  # the learner changed its input in place: the check sees it
            except (ValueError, TypeError):  # a read-only argument: the check compares its own copies
                pass

    def note_evidence(self, check: str, seen: str) -> None:
        """Something the grader saw but cannot prove (the sandbox reported it, or measured it itself): no points
        depend on it; it reaches the instructor's report as a flag (``grader.grading.report.render``)."""
        if len(self.evidence) < 50:
            entry = {"check": _text(check, 40), "seen": _text(seen, 500)}
            if entry not in self.evidence:
                self.evidence.append(entry)


def _shareable(value) -> bool:
    return type(value) is np.ndarray and value.dtype.str in protocol.ALLOWED_DTYPES


class LearnerFunction(RemoteFunction):
    """Calls a learner's function inside the sandbox; behaves like the function for checks."""

    def __init__(self, sandbox: Sandbox, name: str, parameters):
        self._sandbox, self.__name__, self.__qualname__ = sandbox, name, name
        self.__signature__ = _signature(parameters)

    def __call__(self, *args, **kwargs):
        return self._sandbox.call(self.__name__, args, kwargs)

    def call_measuring_memory(self, *args, **kwargs):
        """(result, peak bytes allocated during the call, as the sandbox reports it: evidence, not proof)."""
        value = self._sandbox.call(self.__name__, args, kwargs, measure_memory=True)
        return value, self._sandbox.last_call.peak_bytes

    def note_evidence(self, check: str, seen: str) -> None:
        self._sandbox.note_evidence(check, seen)

    def __repr__(self):
        return f"<learner function {self.__name__}>"


def _signature(parameters):
    """An inspect.Signature rebuilt from names, kinds and default reprs (defaults never evaluated as code)."""
    import ast

    if parameters is None:
        return None
    rebuilt = []
    try:
        for name, kind, default in parameters:
            value = inspect.Parameter.empty
            if default is not None:
                try:
                    value = ast.literal_eval(default)
                except (ValueError, SyntaxError):
                    value = _Repr(default)
            rebuilt.append(inspect.Parameter(str(name), inspect._ParameterKind(int(kind)), default=value))
        return inspect.Signature(rebuilt)
    except (ValueError, TypeError):
        return None


class _Repr:
    def __init__(self, text):
        self.text = str(text)[:200]

    def __repr__(self):
        return self.text
