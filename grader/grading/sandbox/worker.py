"""The sandboxed side: runs one learner notebook's cells and calls its functions on request.

Started by ``grader.grading.sandbox.client`` as ``python -m grader.grading.sandbox.worker CONFIG_JSON``.
It confines itself first (``isolation.apply``), then serves requests on the pipes it was
given (stdin/stdout at start; the learner's code sees /dev/null there instead).
Everything the learner's code produces goes back as plain data (``protocol``).
"""
from __future__ import annotations

import io
import json
import os
import sys

# Bound at import, before any learner code: a notebook that replaces json.dumps/loads for its own
# purposes does not change how the worker reads its outputs.
_JSON_DUMPS = json.JSONEncoder(default=repr, allow_nan=False).encode
_JSON_LOADS = json.JSONDecoder().decode


def _take_channel():
    """Keep the pipes to the grader on private descriptors; point fds 0-2 at /dev/null."""
    channel_in = os.fdopen(os.dup(0), "rb")  # buffered: readline on a raw pipe reads one byte per call
    channel_out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    return channel_in, channel_out


class CappedText(io.TextIOBase):
    """A text sink that keeps at most ``limit`` characters and notes what it dropped."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0

    def write(self, text):
        text = str(text)
        room = self.limit - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def writable(self):
        return True

    def flush(self):
        pass

    def value(self) -> str:
        tail = f"\n[output truncated: {self.dropped} more characters]\n" if self.dropped else ""
        return "".join(self.parts) + tail


class Worker:
    """Serves one learner notebook: its cells run in an in-process Jupyter kernel, its functions on request.

    The kernel is ipykernel's own (``InProcessKernel`` and its ``ZMQInteractiveShell``): the same
    magics (``%matplotlib``, ``%timeit``, ``%%capture``, ``!cmd``...), display publisher, inline
    matplotlib backend and ``get_ipython().kernel`` as under ``nbgrader autograde``. What it
    publishes becomes nbformat outputs (``Worker.Outputs``): no network socket is opened (its event
    loop's wake-up socketpair is a Unix one) and no kernel object holds the worker or its channel.
    """

    MAX_OUTPUTS = 90  # outputs kept per cell (the trusted side keeps at most 100)
    RICH_LIMIT = 2 * 2**20  # characters of images, HTML and other rich data per cell, all together

    # Library implementations of the exercises themselves. A graded function that calls one of them
    # while the grader calls it is reported ("delegated"); notebook cells may use them freely.
    TRIPWIRE_FUNCTIONS = {
        "torch": ["layer_norm", "native_layer_norm", "rms_norm", "batch_norm", "native_batch_norm", "group_norm",
                  "native_group_norm", "instance_norm", "var_mean"],
        "torch.nn.functional": ["layer_norm", "rms_norm", "batch_norm", "group_norm", "instance_norm"],
    }
    TRIPWIRE_MODULES = {  # torch.nn classes whose forward() is the whole exercise (subclasses included)
        "torch.nn.modules.normalization": ["LayerNorm", "RMSNorm", "GroupNorm"],
        "torch.nn.modules.batchnorm": ["_BatchNorm"],
        "torch.nn.modules.instancenorm": ["_InstanceNorm"],
    }
    TRIPWIRE_PACKAGES = ("grader", "normlab")  # every function and method the course's own packages define,
    TRIPWIRE_SPARED = ("grader.grading.sandbox",)  # except the sandbox's own machinery (protocol, streams)

    def __init__(self, channel_in, channel_out, output_limit: int, rich_limit: int | None = None, shared=None):
        import gc

        # What the zygote imported stays alive for good: leave it out of garbage collections, which
        # would otherwise walk (and copy on write) all of torch, 0.4 s at the kernel's first one.
        gc.freeze()
        from grader.grading.sandbox import protocol

        self.protocol = protocol
        self.channel_in, self.channel_out = channel_in, channel_out
        self.output_limit = output_limit
        self.shared = shared  # grader.grading.sandbox.shared_args.SharedView: the calls' array arguments
        self.kernel = self.shell = None
        self.outputs = Worker.Outputs(output_limit, rich_limit or self.RICH_LIMIT, self.MAX_OUTPUTS)
        self.tripwires = Worker.Tripwires(self.TRIPWIRE_FUNCTIONS, self.TRIPWIRE_MODULES, self.TRIPWIRE_PACKAGES,
                                          self.TRIPWIRE_SPARED)

    # -- channel -------------------------------------------------------------------
    def send(self, message: dict) -> None:
        self.channel_out.write(self.protocol.dumps(message))

    def receive(self) -> dict:
        line = self.channel_in.readline(self.protocol.MAX_LINE_BYTES)
        if not line:
            os._exit(0)  # the grader went away
        return self.protocol.loads(line)

    # -- values ----------------------------------------------------------------------
    def encode(self, value):
        return self.protocol.encode(value)

    def decode(self, data):
        from grader.grading.sandbox.stream import StreamProxy

        return self.protocol.decode(data, make_handle=self.callback_stub, make_stream=StreamProxy,
                                    make_shared=self.shared.array if self.shared is not None else None)

    def callback_stub(self, number: int, name: str):
        """A local function that asks the grader to run its callable number ``number``."""
        worker = self

        def call_grader(*args, **kwargs):
            worker.send({"op": "callback", "id": number, "args": [worker.encode(a) for a in args],
                         "kwargs": [[k, worker.encode(v)] for k, v in kwargs.items()]})
            reply = worker.receive()
            if reply["op"] == "return":
                return worker.decode(reply["value"])
            raise _rebuild_exception(reply.get("type", "RuntimeError"), reply.get("message", ""))

        call_grader.__name__ = call_grader.__qualname__ = name
        return call_grader

    # -- the kernel ----------------------------------------------------------------------
    def start_kernel(self) -> None:
        """Start the in-process kernel, once: ``run`` does, before the grader's hello, so a kernel that cannot start
        says why (and every request finds it started)."""
        import base64  # noqa: F401 - everything this class imports later, imported before '' joins sys.path:
        import contextlib  # noqa: F401 - a learner's inspect.py or traceback.py must not replace them
        import inspect  # noqa: F401 - imported before '' joins sys.path (see above)
        import json  # noqa: F401 - imported before '' joins sys.path (see above)
        import pwd
        import select  # noqa: F401 - imported before '' joins sys.path (see above)
        import time  # noqa: F401 - imported before '' joins sys.path (see above)
        import traceback  # noqa: F401 - imported before '' joins sys.path (see above)
        import tracemalloc  # noqa: F401 - imported before '' joins sys.path (see above)

        import numpy  # noqa: F401 - imported before '' joins sys.path (see above)

        from grader.grading.seams import ipykernel as ipykernel_seam

        ipykernel_seam.refuse_unless_usable()

        self.tripwires.install()  # before any learner code: `from torch... import layer_norm` binds the wrapper
        if not os.environ.get("USER") or not os.environ.get("LOGNAME"):
            try:
                user = pwd.getpwuid(os.getuid()).pw_name
            except KeyError:
                user = "learner"
            os.environ.setdefault("USER", user)
            os.environ.setdefault("LOGNAME", user)
        if not os.environ.get("MPLBACKEND"):  # ipykernel's default: figures appear as outputs
            os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
            if "matplotlib" in sys.modules:  # imported by the zygote, under another default
                sys.modules["matplotlib"].rcParams["backend"] = os.environ["MPLBACKEND"]
        kernel_class = self._kernel_class()
        from jupyter_client.session import Session
        from traitlets.config import Config

        record = self.outputs.message  # the session below holds this, never the worker

        class RecordingSession(Session):
            """Hands each message the kernel publishes to ``record`` instead of a socket."""

            def send(self, stream, msg_or_type, content=None, parent=None, ident=None, buffers=None, track=False,
                     header=None, metadata=None):
                msg = msg_or_type if isinstance(msg_or_type, dict) else self.msg(
                    msg_or_type, content=content, parent=parent, header=header, metadata=metadata)
                record(msg)
                return msg

        config = Config()
        config.HistoryManager.hist_file = ":memory:"  # In/Out and %history work; no file, no saving thread
        kernel = kernel_class(config=config, session=RecordingSession(config=config))
        # As in a kernel started by Jupyter: print() and writes to fds 1 and 2 (os.system, C code) are outputs.
        kernel.stdout = ipykernel_seam.FdOutStream(kernel.session, kernel.iopub_thread, "stdout")
        kernel.stderr = ipykernel_seam.FdOutStream(kernel.session, kernel.iopub_thread, "stderr")
        sys.stdout, sys.stderr = kernel.stdout, kernel.stderr
        ipykernel_seam.refuse_stdin(kernel)  # input() raises StdinNotImplementedError, as under nbclient
        self._without_pty(kernel.shell)
        if "" not in sys.path:
            sys.path.insert(0, "")  # the notebook's folder, as in a kernel: its helper modules import
        self.kernel, self.shell = kernel, kernel.shell

    @staticmethod
    def _without_pty(shell) -> None:
        """``!cmd`` and ``x = !cmd`` run through a pseudo-terminal (pexpect); where the sandbox has
        none, run them as IPython does on Windows: through pipes (fds 1 and 2 are outputs already)."""
        try:
            for fd in os.openpty():
                os.close(fd)
            return
        except OSError:
            pass
        from IPython.utils.process import get_output_error_code
        from IPython.utils.text import LSString, SList

        def getoutput(cmd, split=True, depth=0):
            if cmd.rstrip().endswith("&"):
                raise OSError("Background processes not supported.")
            out, err, code = get_output_error_code(shell.var_expand(cmd, depth=depth + 1))
            shell.user_ns["_exit_code"] = code
            text = out + err if err else out
            return SList(text.splitlines()) if split else LSString(text)

        shell.system = shell.system_raw
        shell.getoutput = getoutput

    def _flush(self) -> None:
        """Hand over everything the cell printed: its text, and what it wrote to fds 1 and 2."""
        for stream in (self.kernel.stdout, self.kernel.stderr):
            try:
                stream.flush()  # drains the fd's pipe, then waits until the IOPub thread has handed everything over
            except Exception:  # noqa: BLE001 - a broken stream must not stop the cell
                pass

    @staticmethod
    def _kernel_class():
        """ipykernel's InProcessKernel, without the debugger (no frontend can attach; debugpy costs 0.2 s)."""
        if "ipykernel.debugger" not in sys.modules and "debugpy" not in sys.modules:
            sys.modules["debugpy"] = None  # so ipykernel.debugger finds no debugpy
            try:
                import ipykernel.debugger  # noqa: F401 - imported for its side effect, before the learner runs
            except ImportError:
                pass
            finally:
                del sys.modules["debugpy"]  # the learner's own `import debugpy` still works
        from ipykernel.inprocess.ipkernel import InProcessKernel

        return InProcessKernel

    class Outputs:
        """One cell's outputs as nbformat dicts, built from the messages the kernel publishes.

        Each stream, text/plain value and error field is capped at ``text_limit`` characters;
        images and other rich values share ``rich_limit`` characters per cell, and one that
        does not fit is dropped whole (half an image is no image). Thread-safe: the kernel
        flushes printed text from its IOPub thread. Outside a cell, messages are dropped.
        """

        NOTE = "\n[output truncated: {} more characters]\n"

        def __init__(self, text_limit: int, rich_limit: int, max_outputs: int):
            import threading

            self.text_limit, self.rich_limit, self.max_outputs = text_limit, rich_limit, max_outputs
            self.lock = threading.Lock()
            self.items = None

        def start(self) -> None:
            with self.lock:
                self._reset()

        def _reset(self) -> None:
            self.items, self.displays, self.clear_pending = [], {}, False
            self.kept, self.dropped = {"stdout": 0, "stderr": 0}, {"stdout": 0, "stderr": 0}
            self.rich_used = self.outputs_dropped = 0

        def finish(self) -> list[dict]:
            with self.lock:
                items, self.items = self.items or [], None
                dropped, outputs_dropped = dict(self.dropped), self.outputs_dropped
            for name, count in dropped.items():
                if not count:
                    continue
                last = next((o for o in reversed(items) if o["output_type"] == "stream" and o["name"] == name), None)
                if last is None:
                    last = {"output_type": "stream", "name": name, "text": ""}
                    items.append(last)
                excess = min(len(last["text"]), len(self.NOTE.format(count)) + 8)  # the note fits in the cap
                last["text"] = last["text"][:len(last["text"]) - excess] + self.NOTE.format(count + excess)
            if outputs_dropped:
                items.append({"output_type": "stream", "name": "stdout",
                              "text": f"[{outputs_dropped} more outputs not kept]\n"})
            return items

        def message(self, msg) -> None:
            """Called by the kernel's session for every message it publishes (any thread)."""
            try:
                kind, content = msg["header"]["msg_type"], msg["content"]
            except (KeyError, TypeError):
                return
            with self.lock:
                if self.items is None:
                    return
                try:
                    self._take(kind, content)
                except Exception:  # noqa: BLE001 - a malformed message costs that output, never the cell
                    pass

        def _take(self, kind: str, content: dict) -> None:
            if kind == "clear_output":
                if content.get("wait"):
                    self.clear_pending = True  # clear when the next output arrives, as Jupyter does
                else:
                    self._reset()
                return
            if kind not in ("stream", "display_data", "execute_result", "error", "update_display_data"):
                return  # status, comm messages...: not outputs
            if self.clear_pending:
                self._reset()
            if kind == "stream":
                self._stream("stderr" if content.get("name") == "stderr" else "stdout", content.get("text"))
            elif kind == "update_display_data":
                for output in self.displays.get(self._display_id(content), []):
                    output["data"], output["metadata"] = self._bundle(content)
            elif len(self.items) >= self.max_outputs:
                self.outputs_dropped += 1
            elif kind == "error":
                self.items.append({"output_type": "error", "ename": self._cap(content.get("ename")),
                                   "evalue": self._cap(content.get("evalue")),
                                   "traceback": self._traceback(content.get("traceback"))})
            else:
                data, metadata = self._bundle(content)
                if not data:
                    return
                output = {"output_type": kind, "data": data, "metadata": metadata}
                if kind == "execute_result":
                    count = content.get("execution_count")
                    output["execution_count"] = count if type(count) is int else None
                display_id = self._display_id(content)
                if display_id is not None:
                    self.displays.setdefault(display_id, []).append(output)
                self.items.append(output)

        def _stream(self, name: str, text) -> None:
            text = text if type(text) is str else str(text)
            kept = text[:max(0, self.text_limit - self.kept[name])]
            self.dropped[name] += len(text) - len(kept)
            if not kept:
                return
            self.kept[name] += len(kept)
            last = self.items[-1] if self.items else None
            if last is not None and last["output_type"] == "stream" and last["name"] == name:
                last["text"] += kept
            elif len(self.items) < self.max_outputs:
                self.items.append({"output_type": "stream", "name": name, "text": kept})
            else:
                self.outputs_dropped += 1

        @staticmethod
        def _display_id(content: dict):
            transient = content.get("transient")
            if type(transient) is dict and "display_id" in transient:
                return str(transient["display_id"])[:200]
            return None

        def _cap(self, value) -> str:
            """A text field within ``text_limit`` characters, a note saying how much was cut included."""
            text = value if type(value) is str else ("" if value is None else str(value))
            if len(text) <= self.text_limit:
                return text
            keep = max(0, self.text_limit - len(self.NOTE.format(len(text))))
            return (text[:keep] + self.NOTE.format(len(text) - keep))[:self.text_limit]

        def _traceback(self, lines) -> list[str]:
            """The innermost frames and the message, within ``text_limit`` characters in all."""
            lines = [self._cap(line) for line in lines[-500:]] if type(lines) is list else []
            kept, size = [], 0
            for line in reversed(lines):
                if kept and size + len(line) > self.text_limit:
                    break
                kept.insert(0, line)
                size += len(line)
            return kept

        def _bundle(self, content: dict) -> tuple[dict, dict]:
            import base64

            data = {}
            items = content.get("data") if type(content.get("data")) is dict else {}
            for mime, value in items.items():
                mime = str(mime)[:200]
                if isinstance(value, (bytes, bytearray)):
                    value = base64.b64encode(value).decode("ascii")
                elif type(value) is list and all(type(v) is str for v in value):
                    value = "".join(value)
                if type(value) is str and mime == "text/plain":
                    data[mime] = self._cap(value)
                    continue
                if type(value) is not str:  # JSON data (application/json, widget views)
                    try:
                        text = _JSON_DUMPS(value)
                    except (TypeError, ValueError, RecursionError):
                        continue
                    size = len(text)
                else:
                    size = len(value)
                if size > self.rich_limit - self.rich_used:
                    continue  # dropped whole
                self.rich_used += size
                data[mime] = value if type(value) is str else _JSON_LOADS(text)
            metadata = {}
            if type(content.get("metadata")) is dict:
                try:
                    text = _JSON_DUMPS(content["metadata"])
                    metadata = _JSON_LOADS(text) if len(text) <= min(self.text_limit, 10_000) else {}
                except (TypeError, ValueError, RecursionError):
                    metadata = {}
            return data, metadata

    class Tripwires:
        """Wraps library implementations of the exercises, and records which a learner function calls.

        Installed once, before the first learner cell, so that ``from torch.nn.functional import
        layer_norm`` in a notebook binds the wrapper; a module imported or reloaded later is wrapped
        as it loads (an import hook). Only calls between ``start()`` and ``stop()`` are recorded, and
        only the outermost one (``nn.LayerNorm`` calls ``F.layer_norm``, which calls ``torch.layer_norm``:
        one name). Holds no reference to the worker or its channel. A learner bent on it can unwrap
        these; they are there for honest delegation, not for a hostile notebook.
        """

        MARK = "_lncourse_tripwire"

        def __init__(self, functions: dict, modules: dict, packages: tuple, spared: tuple):
            self.functions, self.modules, self.packages, self.spared = functions, modules, packages, spared
            self.calls = None  # names called since start(), or None: not recording
            self.dispatch = None  # the dispatch-mode recorder of the current call
            self.depth = 0
            self.wires = {}  # id(original) -> (original, wrapper)

        # What those library calls become in torch's dispatcher, whichever door they came through
        # (torch.ops.aten, torch._C, an unwrapped original): seen by a dispatch mode during the call.
        DISPATCHED = {"native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
                      "native_batch_norm_backward", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                      "native_group_norm", "native_group_norm_backward", "var_mean", "_fused_rms_norm",
                      "_fused_rms_norm_backward"}

        def start(self) -> None:
            self.calls, self.depth = [], 0
            self.dispatch = self._dispatch_recorder()
            if self.dispatch is not None:
                self.dispatch.__enter__()

        def stop(self) -> list[str]:
            calls, self.calls = self.calls or [], None
            if self.dispatch is not None:
                try:
                    self.dispatch.__exit__(None, None, None)
                except Exception:  # noqa: BLE001 - the learner's code left torch's mode stack in a mess
                    calls = calls or ["torch (its dispatch mode stack was tampered with)"]
                seen, self.dispatch = self.dispatch.seen, None
                if not calls and seen:
                    calls = [f"torch.ops.aten.{name}" for name in seen]
            return calls

        def _dispatch_recorder(self):
            """A torch dispatch mode that notes the norms' kernels, or None when torch is not loaded."""
            if "torch" not in sys.modules:
                return None
            try:
                from grader.compare import uncompiled_dispatch_mode

                TorchDispatchMode = uncompiled_dispatch_mode()
            except ImportError:
                return None
            watched = self.DISPATCHED

            class Recorder(TorchDispatchMode):
                def __init__(self):
                    super().__init__()
                    self.seen = []

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
                    if name in watched and name not in self.seen:
                        self.seen.append(name)
                    return func(*args, **(kwargs or {}))

            return Recorder()

        def wants(self, name: str) -> bool:
            if name in self.functions or name in self.modules:
                return True
            return (name.partition(".")[0] in self.packages
                    and not any(name == s or name.startswith(s + ".") for s in self.spared))

        def install(self) -> None:
            sys.meta_path.insert(0, self._finder())
            loaded = [m for name, m in list(sys.modules.items()) if m is not None and self.wants(name)]
            for module in loaded:
                self.arm(module)
            for module in loaded:  # names one module imported from another before the wires were in place
                self._rebind(module)

        def arm(self, module) -> None:
            """Wire the library entry points ``module`` defines."""
            import inspect

            name = getattr(module, "__name__", "")
            for attr in self.functions.get(name, ()):
                original = getattr(module, attr, None)
                if callable(original):
                    setattr(module, attr, self.wire(original, f"{name}.{attr}"))
            for class_name in self.modules.get(name, ()):
                cls = getattr(module, class_name, None)
                if isinstance(cls, type) and inspect.isfunction(vars(cls).get("forward")):
                    cls.forward = self.wire(vars(cls)["forward"], self._torch_module_name)
            if name.partition(".")[0] in self.packages and self.wants(name):
                for attr, value in list(vars(module).items()):
                    if getattr(value, "__module__", None) != name:
                        continue
                    if inspect.isfunction(value):
                        setattr(module, attr, self.wire(value, f"{name}.{value.__qualname__}"))
                    elif inspect.isclass(value):
                        for method_name, method in list(vars(value).items()):
                            if inspect.isfunction(method) and (not method_name.startswith("__")
                                                               or method_name in ("__init__", "__call__")):
                                label = f"{name}.{value.__qualname__}"
                                if method_name != "__init__":
                                    label += f".{method_name}"
                                setattr(value, method_name, self.wire(method, label))
            self._rebind(module)

        def _rebind(self, module) -> None:
            for attr, value in list(vars(module).items()):
                known = self.wires.get(id(value))
                if known is not None and known[0] is value:
                    setattr(module, attr, known[1])

        @staticmethod
        def _torch_module_name(args) -> str:
            kind = type(args[0]) if args else object
            public = next((c for c in kind.__mro__
                           if c.__module__.startswith("torch.nn") and not c.__name__.startswith("_")), kind)
            return f"torch.nn.{public.__name__}"

        def wire(self, original, label):
            """``original`` behind a tripwire that records ``label`` (or ``label(args)``) while recording."""
            import functools

            if getattr(original, self.MARK, False):
                return original
            known = self.wires.get(id(original))
            if known is not None and known[0] is original:
                return known[1]
            recorder = self

            @functools.wraps(original)
            def tripwire(*args, **kwargs):
                calls = recorder.calls
                if calls is None:
                    return original(*args, **kwargs)
                if not recorder.depth:
                    name = label if type(label) is str else label(args)
                    if name not in calls:
                        calls.append(name)
                recorder.depth += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    recorder.depth -= 1

            del tripwire.__wrapped__  # no handle to the original for the learner's code
            setattr(tripwire, self.MARK, True)
            self.wires[id(original)] = (original, tripwire)
            return tripwire

        def _finder(self):
            """A meta-path finder that wires the modules of interest as they are executed (import, reload)."""
            import importlib.machinery

            tripwires = self

            class TripwireFinder:
                @staticmethod
                def find_spec(fullname, path=None, target=None):
                    if not tripwires.wants(fullname):
                        return None
                    for finder in sys.meta_path:
                        if isinstance(finder, TripwireFinder) or not hasattr(finder, "find_spec"):
                            continue
                        spec = finder.find_spec(fullname, path, target)
                        if spec is not None:
                            break
                    else:
                        return None
                    loader = spec.loader
                    if isinstance(loader, importlib.machinery.SourceFileLoader):  # one loader per module
                        execute = loader.exec_module

                        def exec_module(module):
                            execute(module)
                            tripwires.arm(module)

                        loader.exec_module = exec_module
                    return spec

            return TripwireFinder()

    # -- requests ----------------------------------------------------------------------
    @staticmethod
    def safe_str(error: BaseException) -> str:
        """str(error), or a stand-in when the learner's exception cannot say what it is."""
        try:
            return str(error)
        except Exception:  # noqa: BLE001 - a learner's __str__ may raise anything
            return f"<{type(error).__name__} whose message could not be read>"

    def capture(self):
        out, err = CappedText(self.output_limit), CappedText(self.output_limit)
        return out, err

    def run_cell(self, source: str) -> dict:
        """Run one cell as Jupyter would; reply with its outputs (and, as before, its streams and error)."""
        import traceback

        self.outputs.start()
        failure = None
        self._known_not_a_module(source)
        try:
            result = self.shell.run_cell(source, store_history=True, silent=False)
            failure = result.error_before_exec or result.error_in_exec
        except BaseException as exc:  # noqa: BLE001 - whatever escapes IPython's own handling
            failure = exc
        finally:
            self._flush()
            try:
                self.shell.payload_manager.clear_payload()  # a frontend would have taken them
            except Exception:  # noqa: BLE001 - best effort: nothing reads the payloads
                pass
        outputs = self.outputs.finish()
        error = None
        if failure is not None:
            lines = traceback.format_exception(type(failure), failure, failure.__traceback__)
            error = {"ename": type(failure).__name__, "evalue": self.safe_str(failure)[:2000],
                     "traceback": "".join(lines)[-self.output_limit:]}
        streams = {name: "".join(o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == name)
                   for name in ("stdout", "stderr")}
        return {"op": "ran", "outputs": outputs, "stdout": streams["stdout"], "stderr": streams["stderr"],
                "error": error}

    NOT_A_MODULE = "<a notebook cell: no module>"  # a name no import gives sys.modules

    def _known_not_a_module(self, source: str) -> None:
        """Tell ``inspect`` that this cell's file is no module's file, before the cell runs.

        Formatting a traceback, IPython asks ``inspect.getmodule`` about each frame, about ten times a
        frame; for a cell's file, which is on no disk and in no module, every ask walks all of
        ``sys.modules`` (about 2,000 with torch) to find none. A wrong notebook fails a dozen cells:
        a third of its sandbox's CPU went there. With the file mapped to a name that is not in
        ``sys.modules``, getmodule answers None at once, as the walk would have for any frame or code
        object (objects without ``__name__``; objects with ``__module__`` never look). A module that
        really has this file replaces the entry at the next walk.
        """
        try:
            import inspect

            cell_file = self.shell.compile.get_code_name(source, source, self.shell.execution_count)
            inspect.modulesbyfile.setdefault(cell_file, self.NOT_A_MODULE)
        except Exception:  # noqa: BLE001 - a faster traceback only; the cell runs either way
            pass

    def namespace(self) -> dict:
        return self.shell.user_ns if self.shell is not None else {}

    def describe(self, name: str) -> dict:
        import inspect

        namespace = self.namespace()
        if name not in namespace or name.startswith("_"):
            return {"op": "described", "kind": "missing"}
        value = namespace[name]
        if callable(value):
            try:
                parameters = [[p.name, int(p.kind), repr(p.default) if p.default is not p.empty else None]
                              for p in inspect.signature(value).parameters.values()]
            except (TypeError, ValueError):
                parameters = None
            return {"op": "described", "kind": "callable", "parameters": parameters}
        return {"op": "described", "kind": "value", "value": self.encode(value)}

    def call(self, message: dict) -> dict:
        """Call a learner function; the reply says which library implementations it called ("delegated").

        Array arguments lie in the memory the grader shares (``SharedView``): what the call does to them
        the grader reads there itself. The "delegated" names and the memory peak come from this process,
        which the learner's code controls: the grader treats them as evidence, never as a verdict."""
        import contextlib
        import traceback

        from grader.compare import measuring_memory

        function = self.namespace().get(message["name"])
        args = [self.decode(a) for a in message["args"]]
        kwargs = {str(k): self.decode(v) for k, v in message["kwargs"]}
        out, err = self.capture()
        measure = bool(message.get("measure_memory"))
        peak, delegated = None, []
        # numpy/Python through tracemalloc, torch's allocator through a dispatch mode (torch is
        # imported in the zygote): the same measurement as in the notebook (grader.compare).
        meter = measuring_memory("auto") if measure else contextlib.nullcontext()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                self.tripwires.start()
                try:
                    with meter as report:
                        value = function(*args, **kwargs)
                finally:
                    delegated = self.tripwires.stop()
                    if measure:
                        peak = report.peak
            except BaseException as exc:  # noqa: BLE001 - whatever the learner's code raises goes back
                return {"op": "raise", "type": type(exc).__name__, "message": self.safe_str(exc)[:4000],
                        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
                        "stdout": out.value(), "delegated": delegated}
        return {"op": "return", "value": self.encode(value), "stdout": out.value(), "peak": peak,
                "delegated": delegated}

    def serve(self) -> None:
        while True:
            message = self.receive()
            op = message["op"]
            if op == "run":
                reply = self.run_cell(str(message["source"]))
            elif op == "describe":
                reply = self.describe(str(message["name"]))
            elif op == "call":
                reply = self.call(message)
            elif op == "exit":
                os._exit(0)
            else:
                reply = {"op": "error", "message": f"unknown op {op!r}"}
            self.send(reply)


def _rebuild_exception(type_name: str, message: str) -> BaseException:
    import builtins

    kind = getattr(builtins, str(type_name), None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(message)
    return RuntimeError(f"{type_name}: {message}")


def main() -> None:
    run(json.loads(sys.argv[1]))


def run(config: dict) -> None:
    """Confine this process, then serve the grader on fds 0 and 1 until told to exit.

    If the isolation asked for cannot be had, say so and exit: learner code never runs less
    confined than asked.
    """
    channel_in, channel_out = _take_channel()
    from grader.grading.sandbox import isolation

    try:
        report = isolation.apply(config)
    except Exception as error:  # noqa: BLE001 - IsolationError, OSError from a mount...: never start unconfined
        _refuse(channel_out,
                str(error) if isinstance(error, isolation.IsolationError) else f"{type(error).__name__}: {error}")
    environment = dict(config["environment"])
    if report["mode"] in ("user", "userns"):  # the grader's paths mean nothing in here
        workdir = config.get("workdir")
        environment = {k: (isolation.HOME if v == workdir else v) for k, v in environment.items()}
        environment.update(HOME=isolation.HOME, TMPDIR="/tmp")
    environment.setdefault("USER", isolation.USER)
    environment.setdefault("LOGNAME", isolation.USER)
    os.environ.clear()
    os.environ.update(environment)
    try:  # the kernel starts before the hello: if it cannot, the hello says why (an exit status would not)
        shared = None
        if config.get("shared_fd") is not None:  # the memory the grader shares for the calls' array arguments
            from grader.grading.sandbox.shared_args import SharedView

            shared = SharedView(int(config["shared_fd"]), int(config["shared_size"]))
        worker = Worker(channel_in, channel_out, int(config["output_limit"]), shared=shared)
        worker.start_kernel()
    except Exception as error:  # noqa: BLE001 - before any learner cell: most likely the grader's environment (an
        # ipykernel too old for the sandbox's streams...), and the instructor reads why; the notebook scores zero
        _refuse(channel_out, f"its kernel could not start ({type(error).__name__}: {str(error)[:300]})")
    worker.send({"op": "hello", "ok": True, "isolation": report})
    worker.serve()


def _refuse(channel_out, reason: str) -> None:
    """Answer the grader's hello with why this sandbox cannot serve, and exit before any learner code runs."""
    channel_out.write((json.dumps({"op": "hello", "ok": False, "error": reason}) + "\n").encode())
    os._exit(3)


if __name__ == "__main__":
    main()
