"""The sandboxed side: runs one learner notebook's cells and calls its functions on request.

Started by ``grader.sandbox.client`` as ``python -m grader.sandbox.worker CONFIG_JSON``.
It confines itself first (``isolation.apply``), then serves requests on the pipes it was
given (stdin/stdout at start; the learner's code sees /dev/null there instead).
Everything the learner's code produces goes back as plain data (``protocol``).
"""
from __future__ import annotations

import io
import json
import os
import sys


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
    def __init__(self, channel_in, channel_out, output_limit: int):
        from grader.sandbox import protocol

        self.protocol = protocol
        self.channel_in, self.channel_out = channel_in, channel_out
        self.output_limit = output_limit
        self.shell = None

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
        from grader.sandbox.stream import StreamProxy

        return self.protocol.decode(data, make_handle=self.callback_stub, make_stream=StreamProxy)

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

    # -- requests ----------------------------------------------------------------------
    def capture(self):
        out, err = CappedText(self.output_limit), CappedText(self.output_limit)
        return out, err

    def run_cell(self, source: str) -> dict:
        import contextlib
        import traceback

        if self.shell is None:
            from IPython.core.interactiveshell import InteractiveShell

            self.shell = InteractiveShell.instance()
            self.shell.showtraceback = lambda *a, **k: None  # errors are reported below, as data
        out, err = self.capture()
        error = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                result = self.shell.run_cell(source, store_history=False)
                failure = result.error_before_exec or result.error_in_exec
            except BaseException as exc:  # SystemExit, KeyboardInterrupt raised by the cell
                failure = exc
            if failure is not None:
                lines = traceback.format_exception(type(failure), failure, failure.__traceback__)
                error = {"ename": type(failure).__name__, "evalue": str(failure)[:2000],
                         "traceback": "".join(lines)[-self.output_limit:]}
        return {"op": "ran", "stdout": out.value(), "stderr": err.value(), "error": error}

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
        import contextlib
        import traceback
        import tracemalloc

        import numpy as np

        function = self.namespace().get(message["name"])
        args = [self.decode(a) for a in message["args"]]
        kwargs = {str(k): self.decode(v) for k, v in message["kwargs"]}
        before = [a.copy() if type(a) is np.ndarray else None for a in args]
        out, err = self.capture()
        measure = bool(message.get("measure_memory"))
        peak = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if measure:
                    tracemalloc.start()
                try:
                    value = function(*args, **kwargs)
                finally:
                    if measure:
                        peak = tracemalloc.get_traced_memory()[1]
                        tracemalloc.stop()
            except BaseException as exc:
                return {"op": "raise", "type": type(exc).__name__, "message": str(exc)[:4000],
                        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
                        "stdout": out.value()}
        mutated = [[i, self.encode(a)] for i, (a, b) in enumerate(zip(args, before))
                   if b is not None and not (a.shape == b.shape and np.array_equal(a, b, equal_nan=True))]
        return {"op": "return", "value": self.encode(value), "stdout": out.value(), "peak": peak, "mutated": mutated}

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
    """Confine this process, then serve the grader on fds 0 and 1 until told to exit."""
    channel_in, channel_out = _take_channel()
    from grader.sandbox import isolation

    try:
        report = isolation.apply(config["mode"], config["hide"], config["uid"], config["gid"], config["limits"],
                                 expose=[sys.base_prefix, sys.prefix])
    except OSError as error:
        channel_out.write((json.dumps({"op": "hello", "ok": False, "error": str(error)}) + "\n").encode())
        os._exit(3)
    os.environ.clear()
    os.environ.update(config["environment"])
    worker = Worker(channel_in, channel_out, int(config["output_limit"]))
    worker.send({"op": "hello", "ok": True, "isolation": report})
    worker.serve()


if __name__ == "__main__":
    main()
