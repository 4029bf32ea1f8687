"""The sandboxed side: runs one learner notebook's cells and calls its functions on request.

Started by ``grader.grading.sandbox.client`` as ``python -m grader.grading.sandbox.worker CONFIG_JSON``.
It confines itself first (``isolation.apply``), then serves requests on the pipes it was
given (stdin/stdout at start; the learner's code sees /dev/null there instead).
Everything the learner's code produces goes back as plain data (``protocol``).

Its helpers, imported here (in the zygote, before any learner code): ``kernel`` (the in-process
Jupyter kernel the cells run in), ``outputs`` (what they produce, capped) and ``tripwires`` (which
library implementations a called function used).
"""
from __future__ import annotations

import json
import os
import sys

from grader.grading.sandbox import kernel as sandbox_kernel
from grader.grading.sandbox import tripwires
from grader.grading.sandbox.outputs import CappedText, CellOutputs


def _take_channel():
    """Keep the pipes to the grader on private descriptors; point fds 0-2 at /dev/null."""
    channel_in = os.fdopen(os.dup(0), "rb")  # buffered: readline on a raw pipe reads one byte per call
    channel_out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    return channel_in, channel_out


class Worker:
    """Serves one learner notebook: its cells run in an in-process Jupyter kernel (``kernel``), its functions
    on request; the requests and replies go through the grader's channel (``serve``)."""

    MAX_OUTPUTS = 90  # outputs kept per cell (the trusted side keeps at most 100)
    RICH_LIMIT = 2 * 2**20  # characters of images, HTML and other rich data per cell, all together

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
        self.outputs = CellOutputs(output_limit, rich_limit or self.RICH_LIMIT, self.MAX_OUTPUTS)
        self.tripwires = tripwires.Tripwires(tripwires.FUNCTIONS, tripwires.MODULES, tripwires.PACKAGES,
                                             tripwires.SPARED)

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
        record = self.outputs.message  # the kernel's session holds this, never the worker
        kernel = sandbox_kernel.start(record, self.tripwires)
        self.kernel, self.shell = kernel, kernel.shell

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
        sandbox_kernel.known_not_a_module(self.shell, source)
        try:
            result = self.shell.run_cell(source, store_history=True, silent=False)
            failure = result.error_before_exec or result.error_in_exec
        except BaseException as exc:  # noqa: BLE001 - whatever escapes IPython's own handling
            failure = exc
        finally:
            sandbox_kernel.flush(self.kernel)
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
    from grader.grading.sandbox.levels import IsolationError
    from grader.grading.sandbox.rootfs import HOME, USER

    try:
        report = isolation.apply(config)
    except Exception as error:  # noqa: BLE001 - IsolationError, OSError from a mount...: never start unconfined
        _refuse(channel_out,
                str(error) if isinstance(error, IsolationError) else f"{type(error).__name__}: {error}")
    environment = dict(config["environment"])
    if report["mode"] in ("user", "userns"):  # the grader's paths mean nothing in here
        workdir = config.get("workdir")
        environment = {k: (HOME if v == workdir else v) for k, v in environment.items()}
        environment.update(HOME=HOME, TMPDIR="/tmp")
    environment.setdefault("USER", USER)
    environment.setdefault("LOGNAME", USER)
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
