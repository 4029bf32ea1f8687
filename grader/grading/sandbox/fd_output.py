"""Text written straight to fds 1 and 2 (``os.system``, C code, child processes) as a cell's outputs.

ipykernel's ``OutStream(watchfd=True)`` points the fd at a pipe and starts a thread that reads the
pipe and then writes the text to the stream. Between that read and that write the text is in
neither place, so a flush at the cell's end could miss it: under load a child's output went
missing from its cell about once in twenty runs. Here the thread reads only while it holds a lock,
and ``drain`` (every flush, and so the end of each cell) takes the lock and reads what is left:
once it returns, every byte the cell wrote to the fd is in the stream.
"""
from __future__ import annotations

import codecs
import os
import select
import sys
import threading

from ipykernel.iostream import OutStream

READ_SIZE = 65536  # a pipe's default capacity
DRAIN_BUDGET = 8 * 2**20  # bytes one drain reads at most: a background writer that never stops must not hold the cell


class FdOutStream(OutStream):
    """An ``OutStream`` that watches its fd (always) and can be drained: ``(session, iopub_thread, name)``."""

    def __init__(self, session, pub_thread, name: str):
        self._read_lock = threading.RLock()  # a write that flushes (a learner's wrapper) re-enters drain on this thread
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split across reads
        super().__init__(session, pub_thread, name, watchfd="force")

    def _watch_pipe_fd(self) -> None:
        """The watching thread: wait for bytes without the lock, read them with it."""
        try:
            while self._should_watch:
                select.select([self._fid], [], [])
                with self._read_lock:
                    if not self._should_watch or not self._read_available(DRAIN_BUDGET):
                        return
        except Exception:  # noqa: BLE001 - kept for close(), as ipykernel does
            self._exc = sys.exc_info()

    def _read_available(self, budget: int) -> bool:
        """Write to the stream what the pipe holds now (up to ``budget`` bytes); False once no writer is left."""
        while budget > 0 and select.select([self._fid], [], [], 0)[0]:
            data = os.read(self._fid, READ_SIZE)
            if not data:
                return False
            budget -= len(data)
            text = self._decoder.decode(data)
            if text:
                self.write(text)
        return True

    def drain(self) -> None:
        """Hand the stream everything written to the fd so far (none of it left in the pipe or in flight).
        Only in the process that made the stream: a fork of it (a learner's multiprocessing) has no watching
        thread, and may have been forked while that thread held the lock."""
        if self._should_watch and os.getpid() == self._master_pid:
            with self._read_lock:
                self._read_available(DRAIN_BUDGET)

    def flush(self) -> None:
        """Drain, then flush: what a cell wrote to the fd comes before what it shows next (the displayhook flushes
        before it publishes a result, as does a print with flush=True)."""
        try:
            self.drain()
        except Exception:  # noqa: BLE001 - a learner who broke os.read or closed the fd still gets their printed text
            pass
        super().flush()
