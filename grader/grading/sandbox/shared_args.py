"""The argument arrays of a call, in memory the grader shares with the sandbox.

Whether a learner's function changed its input in place is a verdict that gives or takes
points, so the grader decides it from memory it reads itself, not from the sandbox's word:
before a call it writes each top-level array argument into a file both sides map
(a sealed ``memfd``: the sandbox can write its pages, never shrink or grow it), the
sandbox's function works on arrays over those pages, and after the call the grader reads the
pages back and compares them with what it wrote. A function that writes to its input writes
there; nothing in the sandbox's reply can say otherwise.

The grader's side only ever uses ``pread``/``pwrite`` on the file (no mapping of its own: a
sandbox could not make it fault).
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

SIZE = 256 * 2**20  # sparse: only the pages written cost memory
ALIGN = 64


class ArgumentsTooLarge(Exception):
    """The call's array arguments do not fit in the shared memory."""


class SharedArgs:
    """The grader's end: the file, and what it wrote for the current call."""

    def __init__(self, size: int = SIZE):
        self.size = size
        self.fd = _sealed_file(size)
        self.written: list[tuple[int, bytes]] = []

    def place(self, arrays: list[np.ndarray]) -> list[tuple[int, np.ndarray]]:
        """Write ``arrays`` (C-contiguous copies) one after another; returns (offset, copy) for each."""
        placed, offset = [], 0
        self.written = []
        for array in arrays:
            data = np.array(array, copy=True, order="C")
            raw = data.tobytes()
            if offset + len(raw) > self.size:
                raise ArgumentsTooLarge(f"the arguments need more than {self.size // 2**20} MiB")
            if raw:
                os.pwrite(self.fd, raw, offset)
            placed.append((offset, data))
            self.written.append((offset, raw))
            offset = -(-(offset + len(raw)) // ALIGN) * ALIGN
        return placed

    def read_back(self, offset: int, template: np.ndarray) -> np.ndarray | None:
        """The array at ``offset`` as the call left it, or None if it is byte for byte what was written."""
        raw = dict(self.written).get(offset)
        if raw is None or not raw:
            return None
        now = os.pread(self.fd, len(raw), offset)
        if now == raw:
            return None
        if len(now) != len(raw):  # cannot happen with a sealed file; a shrunken one counts as changed to zeros
            now = now.ljust(len(raw), b"\0")
        return np.frombuffer(now, dtype=template.dtype).reshape(template.shape).copy()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _sealed_file(size: int) -> int:
    """A file of ``size`` bytes that lives in memory; sealed against shrinking and growing where Linux allows."""
    try:
        fd = os.memfd_create("lncourse-args", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):  # no memfd (not Linux): an unlinked temporary file does the same job
        handle = tempfile.TemporaryFile()
        fd = os.dup(handle.fileno())
        handle.close()
        os.ftruncate(fd, size)
        return fd
    os.ftruncate(fd, size)
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except (AttributeError, OSError):
        pass
    return fd


class SharedView:
    """The sandbox's end: the file mapped once; arrays over its pages, as the grader placed them.

    A process forked from the sandbox gets a private copy of the pages instead (as a forked child's
    writes to its parent's arrays never reach the parent under Jupyter): an ``os.fork`` hook maps the
    file over the same addresses, copy-on-write, in the child.
    """

    def __init__(self, fd: int, size: int):
        import mmap

        self.size, self.fd = size, fd
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            import ctypes

            self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
            os.register_at_fork(after_in_child=self._private_in_child)
        except (ImportError, TypeError, ValueError, AttributeError):
            os.close(fd)
            self.fd = None

    def _private_in_child(self) -> None:
        """In a forked child: the same addresses, now a private copy-on-write view of the file."""
        if self.fd is None:
            return
        import ctypes
        import mmap

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_long]
            fixed = 0x10  # MAP_FIXED (Linux, every architecture Python runs on)
            libc.mmap(self.address, self.size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | fixed, self.fd, 0)
            os.close(self.fd)
        except (OSError, AttributeError):
            pass
        self.fd = None

    def array(self, offset: int, dtype, shape: tuple) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        if offset < 0 or count < 0 or offset + count * np.dtype(dtype).itemsize > self.size:
            raise ValueError("a shared array outside the shared memory")
        return np.ndarray(shape, dtype=dtype, buffer=self.map, offset=offset)
