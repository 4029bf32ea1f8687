"""A bounded memo of rendered HTML, keyed by a digest of everything the rendering depends on.

A class's feedback pages repeat themselves: the same given code cells, the same prose. The feedback
workers' code highlighting (``highlight_cache``) and the course's markdown rendering
(``grader.grading.feedback.sanitise.markdown2html``) each keep what they rendered here. The key is a digest, so a
learner's huge cell costs 64 characters of key; a page too big is rendered, not kept; the least
recently used pages go first once the memo holds too many pages or too many characters in all (a
long-lived process, the formgrader, keeps only recent ones).
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict


def digest(*inputs) -> str | None:
    """sha256 of ``inputs`` as canonical JSON; None when JSON cannot name them (not memoised, then)."""
    try:
        text = json.dumps(inputs, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class BoundedMemo(OrderedDict):
    """Key -> html, least recently used first; ``chars``: the characters of html it holds."""

    def __init__(self, max_entries: int, max_kept_chars: int, max_total_chars: int) -> None:
        super().__init__()
        self.max_entries, self.max_kept_chars, self.max_total_chars = max_entries, max_kept_chars, max_total_chars
        self.chars = 0

    def recall(self, key: str | None) -> str | None:
        """The html kept under ``key`` (now the most recently used), or None."""
        if key is None or key not in self:
            return None
        self.move_to_end(key)
        return self[key]

    def keep(self, key: str | None, html: str) -> None:
        """Keep ``html`` unless it is too big, then drop the oldest pages beyond the bounds."""
        if key is None or len(html) > self.max_kept_chars:
            return
        self[key] = html
        self.chars += len(html)
        while len(self) > self.max_entries or self.chars > self.max_total_chars:
            self.chars -= len(self.popitem(last=False)[1])

    def clear(self) -> None:
        super().clear()
        self.chars = 0
