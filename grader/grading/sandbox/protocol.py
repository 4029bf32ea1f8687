"""The wire format between the trusted grader and a sandboxed learner process.

One JSON object per line. Values travel as tagged plain data: numbers, strings, tuples,
lists, string-keyed dicts and numpy arrays (raw bytes, base64, from a short list of dtypes).
Nothing is ever pickled, and a decoded value is always a fresh builtin or a plain
``np.ndarray``: an object from the other side cannot run code, override ``__eq__`` or
``__array_ufunc__``, or subclass anything. Callables cross as numbered handles, and a
trusted ``StreamSource`` (a check's read-once stream) crosses as a stream whose every read
is served, and counted, by the grader (``grader.grading.sandbox.stream``).
"""
from __future__ import annotations

# Every name this module uses is bound here, at import (before any learner code runs in a sandbox): a
# notebook that replaces json.dumps, base64's functions or a builtin for its own purposes (an honest
# `json.dumps = functools.partial(json.dumps, indent=1)`) must not change what goes over the channel.
from binascii import a2b_base64, b2a_base64
from builtins import (
    Exception,
    UnicodeDecodeError,
    ValueError,
    all,
    bool,
    callable,
    dict,
    float,
    getattr,
    int,
    isinstance,
    len,
    list,
    str,
    tuple,
    type,
)
from json import JSONDecoder, JSONEncoder
from math import isfinite
from re import compile as _compile

import numpy as np

from grader.boundary import StreamSource, Unsupported

_ENCODE = JSONEncoder(allow_nan=True, separators=(",", ":")).encode
_DECODE = JSONDecoder().decode
_BASE64 = _compile(r"[A-Za-z0-9+/]*={0,2}").fullmatch
_NDARRAY, _GENERIC, _ARRAY, _FROMBUFFER, _DTYPE, _ASARRAY = (np.ndarray, np.generic, np.array, np.frombuffer, np.dtype,
                                                             np.asarray)

# Plain numeric dtypes only: no object arrays, no structured or datetime dtypes.
ALLOWED_DTYPES = {
    np.dtype(name).str: np.dtype(name)
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128")
}
MAX_DEPTH = 20
MAX_LINE_BYTES = 64 * 2**20  # one message; a bigger one is treated as an output flood


class ProtocolError(Exception):
    """The other side sent something that is not a valid message."""


def _float(value: float):
    return value if isfinite(value) else float.__repr__(value)


def encode(value, register_callable=None, depth: int = 0):
    """Tagged plain data for ``value``; callables go through ``register_callable`` (-> number)."""
    if depth > MAX_DEPTH:
        return {"t": "unsupported", "type": "too deeply nested value"}
    if value is None:
        return {"t": "none"}
    if isinstance(value, bool) and type(value) is bool:
        return {"t": "bool", "v": value}
    if type(value) is int:
        return {"t": "int", "v": str(value)}
    if type(value) is float:
        return {"t": "float", "v": _float(value)}
    if type(value) is str:
        return {"t": "str", "v": value}
    if type(value) in (tuple, list):
        return {"t": type(value).__name__, "v": [encode(v, register_callable, depth + 1) for v in value]}
    if type(value) is dict and all(type(k) is str for k in value):
        return {"t": "dict", "v": [[k, encode(v, register_callable, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (_NDARRAY, _GENERIC)) and _ASARRAY(value).dtype.str in ALLOWED_DTYPES:
        array = _ARRAY(value, copy=True, order="C")  # keeps 0-d shapes (ascontiguousarray would not)
        kind = ("ndarray" if type(value) is _NDARRAY
                else "ndarray_subclass" if isinstance(value, _NDARRAY) else "scalar")
        return {"t": kind, "type": type(value).__module__ + "." + type(value).__qualname__, "dtype": array.dtype.str,
                "shape": list(array.shape), "b64": b2a_base64(array.tobytes(), newline=False).decode("ascii")}
    if isinstance(value, StreamSource) and register_callable is not None:
        return {"t": "stream", "id": register_callable(value.stream_request), "len": len(value),
                "dtype": np.dtype(value.dtype).str}
    if callable(value) and register_callable is not None:
        return {"t": "callable", "id": register_callable(value), "name": getattr(value, "__name__", "function")}
    return {"t": "unsupported", "type": type(value).__module__ + "." + type(value).__qualname__}


def shared(offset: int, dtype, shape: tuple) -> dict:
    """An argument array the grader wrote into the memory it shares with the sandbox (``SharedArgs``)."""
    return {"t": "shared", "offset": offset, "dtype": _DTYPE(dtype).str, "shape": list(shape)}


def decode(data, make_handle=None, depth: int = 0, make_stream=None, make_shared=None):
    """The value ``encode`` described, rebuilt from scratch; raises ProtocolError if malformed.

    ``make_stream(handle, length, dtype)`` builds the proxy for a stream, and
    ``make_shared(offset, dtype, shape)`` the array over shared memory; without them (the
    grader's side) a stream or a shared array is malformed.
    """
    if depth > MAX_DEPTH or type(data) is not dict or "t" not in data:
        raise ProtocolError("malformed value")
    tag = data["t"]
    try:
        if tag in ("none", "bool", "int", "float", "str", "unsupported"):
            return _decode_plain(tag, data)
        if tag in ("tuple", "list"):
            items = [decode(v, make_handle, depth + 1, make_stream, make_shared) for v in data["v"]]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict":
            return {str(k): decode(v, make_handle, depth + 1, make_stream, make_shared) for k, v in data["v"]}
        if tag in ("ndarray", "ndarray_subclass", "scalar"):
            return _decode_array(tag, data)
        if tag in ("callable", "stream") or (tag == "shared" and depth == 0):
            return _decode_reference(tag, data, make_handle, make_stream, make_shared)
    except ProtocolError:
        raise
    except Exception as error:  # noqa: BLE001 - any malformed field
        raise ProtocolError(f"malformed {tag}: {type(error).__name__}") from None
    raise ProtocolError(f"unknown tag {tag!r}")


def _decode_plain(tag: str, data: dict):
    """None, a bool, an int (at most 4000 digits), a float, a str, or the name of what could not cross."""
    if tag == "none":
        return None
    if tag == "bool":
        return bool(data["v"] is True)
    if tag == "int":
        text = str(data["v"])
        if len(text) > 4000:
            raise ProtocolError("integer too large")
        return int(text)
    if tag == "float":
        return float(data["v"])
    if tag == "str":
        return str(data["v"])
    return Unsupported(str(data.get("type", "unknown"))[:200])


def _decode_array(tag: str, data: dict):
    """A fresh plain ndarray (or numpy scalar) from its bytes; a subclass arrives as its name only."""
    dtype = _allowed_dtype(data)
    shape = tuple(int(n) for n in data["shape"])
    raw = _b64decode(str(data["b64"]))
    array = _FROMBUFFER(raw, dtype=dtype).reshape(shape).copy()
    if tag == "ndarray":
        return array
    if tag == "scalar":
        return array[()]
    return Unsupported(str(data.get("type", "ndarray subclass")) + " (a subclass of numpy.ndarray)")


def _decode_reference(tag: str, data: dict, make_handle, make_stream, make_shared):
    """What stays on the other side: a callable's or a stream's handle, or an array in the shared memory
    (only a whole argument, at depth 0)."""
    if tag == "callable":
        if make_handle is None:
            raise ProtocolError("unexpected callable")
        return make_handle(int(data["id"]), str(data.get("name", "function"))[:100])
    if tag == "stream":
        if make_handle is None or make_stream is None:
            raise ProtocolError("unexpected stream")
        dtype = _allowed_dtype(data)
        return make_stream(make_handle(int(data["id"]), "stream"), int(data["len"]), dtype)
    if make_shared is None:
        raise ProtocolError("unexpected shared array")
    dtype = _allowed_dtype(data)
    return make_shared(int(data["offset"]), dtype, tuple(int(n) for n in data["shape"]))


def _allowed_dtype(data: dict):
    dtype = ALLOWED_DTYPES.get(str(data["dtype"]))
    if dtype is None:
        raise ProtocolError(f"dtype {data['dtype']!r} not allowed")
    return dtype


def _b64decode(text: str) -> bytes:
    """base64.b64decode(text, validate=True), from the names bound at import."""
    if len(text) % 4 or _BASE64(text) is None:
        raise ValueError("not base64")
    return a2b_base64(text)


def dumps(message: dict) -> bytes:
    return (_ENCODE(message) + "\n").encode()


def loads(line: bytes) -> dict:
    try:
        message = _DECODE(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("not a JSON message") from None
    if type(message) is not dict or type(message.get("op")) is not str:
        raise ProtocolError("message without op")
    return message
