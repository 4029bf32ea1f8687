"""ipykernel's non-public parts the grader relies on: ``OutStream``'s fd watching, and the kernel's stdin switch.

Correctness depends on both (a failed self-check refuses to grade: exit 2 before anything executes; a sandbox
refuses to start). **outstream**: ``FdOutStream`` below.

Text written straight to fds 1 and 2 (``os.system``, C code, child processes) is a cell's output.
ipykernel's ``OutStream(watchfd=True)`` points the fd at a pipe and starts a thread that reads the
pipe and then writes the text to the stream. Between that read and that write the text is in
neither place, so a flush at the cell's end could miss it: under load a child's output went
missing from its cell about once in twenty runs. Here the thread reads only while it holds a lock,
and ``drain`` takes the lock and reads what is left: once it returns, every byte written to the fd
so far is in the stream. Every flush drains (so the end of each cell does), and so does a write
while bytes are in the pipe or in the thread's hands: what reached the fd before a print comes before it.
A forked child (a learner's multiprocessing) writes its lines to the fd, which its parent reads.

There is no public alternative: ipykernel's public OutStream cannot be drained (its watching thread's read and
write are not atomic), and jupyter_client's public API drives a kernel in another process over ZMQ, which the
in-process sandbox kernel (``grader.grading.sandbox.worker``) has no use for. The check reads OutStream's source
for every name used here (``OUTSTREAM_NAMES``) and the signatures of what is called or overridden.
"""
from __future__ import annotations

import codecs
import os
import select
import sys
import threading

import ipykernel
from ipykernel.iostream import OutStream

from grader.grading.seams import CORRECTNESS, Patch, expect, expect_signature, refusal

# The first ipykernel whose OutStream takes watchfd="force" and keeps the fd it replaced (_original_stdstream_fd,
# where a forked child writes); pyproject.toml asks for it. An older one would grade a notebook that forks
# differently from Jupyter, so a sandbox refuses to start on it (the class is then scored by nobody, with why).
IPYKERNEL_MINIMUM = (6, 24)
# what FdOutStream reads or replaces of OutStream, each found in its source
OUTSTREAM_NAMES = ("self._fid", "self._should_watch", "self._master_pid", "self._original_stdstream_fd",
                   "def _watch_pipe_fd", "self._exc", '"force"')


def check_outstream() -> None:
    import inspect

    from ipykernel.ipkernel import IPythonKernel

    expect(tuple(ipykernel.version_info[:2]) >= IPYKERNEL_MINIMUM,
           f"ipykernel >= {'.'.join(map(str, IPYKERNEL_MINIMUM))} is needed")
    expect_signature(OutStream.__init__, "self", "session", "pub_thread", "name")
    expect("watchfd" in inspect.signature(OutStream.__init__).parameters, "OutStream takes no watchfd")
    source = inspect.getsource(OutStream)
    missing = [name for name in OUTSTREAM_NAMES if name not in source]
    expect(not missing, f"OutStream no longer has {', '.join(missing)}")
    for name in ("write", "flush"):
        expect_signature(getattr(OutStream, name), "self")
    expect_signature(IPythonKernel._forward_input, "self", "allow_stdin")


OUTSTREAM = Patch("outstream", "ipykernel", CORRECTNESS, "the sandbox's output streams (text written to fds 1 and 2 "
                  "kept in its cell; input() refused as under nbclient)", check_outstream)
PATCHES = [OUTSTREAM]


def refuse_unless_usable() -> None:
    """In a sandbox, before any learner code: an ipykernel whose internals differ grades nobody (ImportError: the
    sandbox does not start, and the instructor reads why)."""
    problem = refusal(OUTSTREAM)
    if problem:
        raise ImportError(f"the grading sandbox cannot start: {problem}")


def refuse_stdin(kernel) -> None:
    """``input()`` raises StdinNotImplementedError in the learner's code, as under nbclient (ipykernel's own switch,
    ``_forward_input``, the one a kernel uses for a request that allows no stdin)."""
    kernel._forward_input(allow_stdin=False)

READ_SIZE = 65536  # a pipe's default capacity
DRAIN_BUDGET = 8 * 2**20  # bytes one drain reads at most: a background writer that never stops must not hold the cell


class FdOutStream(OutStream):
    """An ``OutStream`` that watches its fd (always) and can be drained: ``(session, iopub_thread, name)``."""

    def __init__(self, session, pub_thread, name: str):
        self._read_lock = threading.RLock()  # a write that flushes (a learner's wrapper) re-enters drain on this thread
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split across reads
        self._forked_pending = {}  # pid -> the start of a line a forked child has written (``write``)
        self._reading = threading.local()  # .now: this thread is writing what it read from the fd
        self._waiting = select.poll()  # whether the pipe holds bytes: cheaper than select on every write
        self._watcher_holds_bytes = False  # the watching thread has read bytes it has not written yet
        super().__init__(session, pub_thread, name, watchfd="force")
        if self._fid is not None:
            self._waiting.register(self._fid, select.POLLIN)

    def write(self, text: str) -> int:
        """As ``OutStream.write``; in a fork of this process (a learner's multiprocessing), whole lines go to the fd
        instead: the child's copy of this stream reaches no cell, the fd reaches the parent's watching thread (in
        Jupyter, ipykernel forwards a forked child's output to its parent too)."""
        if os.getpid() == self._master_pid or not self._should_watch or not isinstance(text, str):
            # what reached the fd before this text comes before it: bytes in the pipe, or read and not yet written
            # (the flag is set before the read, so one of the two is seen)
            if (self._watcher_holds_bytes or self._pipe_holds_bytes()) and not getattr(self._reading, "now", False):
                self.drain(READ_SIZE)  # a pipe holds no more: under a flood, what follows is no earlier
            return super().write(text)
        pending = self._forked_pending.get(os.getpid(), "") + text
        end = pending.rfind("\n") + 1
        self._forked_pending = {os.getpid(): pending[end:]}  # a grandchild does not inherit its parent's line
        self._to_fd(pending[:end])
        return len(text)

    def _pipe_holds_bytes(self) -> bool:
        """Whether the pipe may hold unread bytes: cheap enough for every write. One ``select.poll`` object refuses
        a second thread while it polls (a learner's threads print at once): that thread then just looks."""
        try:
            return bool(self._waiting.poll(0))
        except RuntimeError:
            return True

    def _to_fd(self, text: str) -> None:
        data = memoryview(text.encode(errors="replace"))
        while data:
            data = data[os.write(self._original_stdstream_fd, data):]

    def _watch_pipe_fd(self) -> None:
        """The watching thread: wait for bytes without the lock, read them with it."""
        try:
            while self._should_watch:
                select.select([self._fid], [], [])
                with self._read_lock:
                    self._watcher_holds_bytes = True
                    try:
                        if not self._should_watch or not self._read_available(DRAIN_BUDGET):
                            return
                    finally:
                        self._watcher_holds_bytes = False
        except Exception:  # noqa: BLE001 - kept for close(), as ipykernel does
            self._exc = sys.exc_info()

    def _read_available(self, budget: int) -> bool:
        """Write to the stream what the pipe holds now (up to ``budget`` bytes); False once no writer is left."""
        was_reading, self._reading.now = getattr(self._reading, "now", False), True
        try:
            while budget > 0 and select.select([self._fid], [], [], 0)[0]:
                data = os.read(self._fid, READ_SIZE)
                if not data:
                    return False
                budget -= len(data)
                text = self._decoder.decode(data)
                if text:
                    self.write(text)
            return True
        finally:
            self._reading.now = was_reading

    def drain(self, budget: int = DRAIN_BUDGET) -> None:
        """Hand the stream everything written to the fd so far (none of it left in the pipe or in flight).
        Only in the process that made the stream: a fork of it (a learner's multiprocessing) has no watching
        thread, and may have been forked while that thread held the lock. A failure to read is the reader's:
        a learner who broke os.read or closed the fd still gets their printed text."""
        if not self._should_watch or os.getpid() != self._master_pid:
            return
        try:
            with self._read_lock:  # the watching thread holds it from its read to its write
                if self._pipe_holds_bytes():
                    self._read_available(budget)
        except Exception:  # noqa: BLE001 - best effort: a drain must never break the kernel
            pass

    def flush(self) -> None:
        """Drain, then flush: what a cell wrote to the fd comes before what it shows next (the displayhook flushes
        before it publishes a result, as does a print with flush=True). In a forked child: its unfinished line."""
        if os.getpid() != self._master_pid and self._should_watch:
            self._to_fd(self._forked_pending.pop(os.getpid(), ""))
            return
        self.drain()
        super().flush()
