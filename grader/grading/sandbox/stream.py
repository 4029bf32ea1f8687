"""The sandbox's view of a trusted stream (``protocol.StreamSource``).

A check hands the learner's function a read-once stream; under ``grader grade`` that
function runs in a sandbox, so it gets a ``StreamProxy`` instead. The proxy holds no data:
each read asks the grader, which counts it on its own copy of the stream (where the
learner's code cannot reset the count) and answers or raises the check's diagnosis.

Elements come in chunks that start at one element and double up to ``MAX_CHUNK``, so a
loop that stops after its first element has read one element, as with the real stream,
and a full pass costs a few dozen round trips.
"""
from __future__ import annotations

import numpy as np

MAX_CHUNK = 256  # 2 KiB of float64 per message: small beside a one-pass memory budget


class StreamProxy:
    """A 1-D read-once sequence served by the grader: ``for xi in x``, ``len(x)``, ``x[i]``, ``x[a:b]``."""

    __array_ufunc__ = None  # numpy hands operators back to us; the grader then explains why they fail

    def __init__(self, request, length: int, dtype: np.dtype):
        self._request, self._length, self._dtype = request, length, dtype

    def __len__(self) -> int:
        return self._length

    def __iter__(self):
        token = self._request("iter")
        size = 1
        while True:
            chunk = self._request("next", token, size)
            yield from chunk
            if len(chunk) < size:
                return
            size = min(2 * size, MAX_CHUNK)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            return self._request("item", int(key))
        if isinstance(key, slice):
            parts = [None if v is None else int(v) for v in (key.start, key.stop, key.step)]
            return self._request("slice", *parts)
        return self._request("index", repr(key)[:200])

    @property
    def shape(self) -> tuple[int]:
        return (self._length,)

    @property
    def size(self) -> int:
        return self._length

    @property
    def ndim(self) -> int:
        return 1

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    def __repr__(self) -> str:
        return f"<stream of {self._length} values: loop over it once with `for xi in x`>"

    # whole-array operations: the grader records the violation and raises its diagnosis
    def __array__(self, *args, **kwargs):
        return self._request("array")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._request("attribute", name[:100])

    def _arithmetic(self, *args):
        return self._request("arithmetic")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arithmetic
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _arithmetic
    __neg__ = __abs__ = _arithmetic
