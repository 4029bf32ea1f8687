"""What learner code produces in the sandbox, kept within limits.

``CellOutputs``: one cell's nbformat outputs, built from the messages the sandbox's kernel
publishes (``kernel.start`` hands them over). ``CappedText``: what a learner function prints
while the grader calls it.
"""
from __future__ import annotations

import io
import json

# Bound at import, before any learner code: a notebook that replaces json.dumps/loads for its own
# purposes does not change how the worker reads its outputs.
_JSON_DUMPS = json.JSONEncoder(default=repr, allow_nan=False).encode
_JSON_LOADS = json.JSONDecoder().decode


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


class CellOutputs:
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
