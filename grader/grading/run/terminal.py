"""Learner-controlled text, made safe to print on the instructor's terminal.

Student ids are folder names, messages quote notebook content and exception messages: any of
them may hold ANSI/OSC escape sequences, carriage returns, backspaces, bidirectional
overrides or zero-width characters that rewrite the terminal, hide text or reorder a table
row. ``printable`` shows each such character as a visible escape, the way ``repr`` does
(``\\x1b``, ``\\r``, ``\\u202e``), and caps the length.

Which characters count is decided by their Unicode category, not by a list: every control
(Cc: C0, DEL, C1), format character (Cf: bidi embeddings, overrides and isolates, zero-width
spaces and joiners, the BOM, tag characters), surrogate (Cs: undecodable bytes in a file
name, which would make ``print`` raise), line and paragraph separator (Zl, Zp) and
unassigned code point (Cn: what a newer terminal may treat as a format character).
Backslashes are left alone, so the function is idempotent: ``printable(printable(s)) ==
printable(s)``; the output is for reading, not for decoding back.
"""
from __future__ import annotations

import unicodedata

__all__ = ["printable", "is_unsafe", "Progress"]

UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"})
ELLIPSIS = "…"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_unsafe(char: str) -> bool:
    """True for a character that must not reach a terminal as itself."""
    return unicodedata.category(char) in UNSAFE_CATEGORIES


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: object, limit: int | None = None, *, multiline: bool = False) -> str:
    """``text`` with every unsafe character shown as an escape, at most ``limit`` characters long.

    - ``limit``: the most characters returned (``None``: no cap). A longer result is cut
      before an escape, never inside one, and ends with "…".
    - ``multiline``: keep ``\\n`` and ``\\t`` as themselves (a message printed on its own
      lines); by default they are escaped too, so one value stays on one table row.

    Anything that is not a ``str`` is converted with ``str()`` first.
    """
    text = text if isinstance(text, str) else str(text)
    if limit is not None and limit <= 0:
        return ""
    if text.isprintable():  # fast path: no Cc, Cf, Cs, Cn, Zl or Zp anywhere (nor Co, nor Zs but " ")
        if limit is None or len(text) <= limit:
            return text
        return text[:limit - len(ELLIPSIS)] + ELLIPSIS
    pieces: list[str] = []
    length = 0
    for char in text:
        if multiline and char in "\n\t":
            piece = char
        elif not char.isprintable() and is_unsafe(char):
            piece = _escape(char)
        else:
            piece = char
        pieces.append(piece)
        length += len(piece)
        if limit is not None and length > limit:
            break
    if limit is None or length <= limit:
        return "".join(pieces)
    # Too long: keep whole pieces that fit before the ellipsis.
    kept, used = [], 0
    for piece in pieces:
        if used + len(piece) > limit - len(ELLIPSIS):
            break
        kept.append(piece)
        used += len(piece)
    return "".join(kept) + ELLIPSIS


class Progress:
    """The grading run's progress bar (tqdm, on stderr). The only text in it that a learner
    controls, the last learner's id and notebook name, passes through ``printable`` first."""

    def __init__(self, total: int = 0, stream=None, mininterval: float = 0.5):
        self.total, self.stream, self.bar, self.mininterval = total, stream, None, mininterval

    def start(self, total: int) -> None:
        import sys

        from tqdm import tqdm

        self.total = total
        self.bar = tqdm(total=total, unit="notebook", file=self.stream or sys.stderr, dynamic_ncols=True,
                        mininterval=self.mininterval, smoothing=0.1, leave=True, ascii=True)

    def update(self, student: str = "", notebook: str = "") -> None:
        if self.bar is None:
            return
        if student:
            self.bar.set_postfix_str(printable(f"{student}/{notebook}", 40), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str("", refresh=False)
            self.bar.close()
            self.bar = None
