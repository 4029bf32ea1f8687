"""Code cells highlighted once per feedback worker instead of once per learner.

Every learner's feedback shows the same given cells (imports, plots, the visible checks), and
nbconvert's HTML export runs pygments over each of them again for every learner: about an eighth
of a learner's feedback CPU. ``install`` memoises ``Highlight2HTML.__call__`` on everything its
output depends on: the source, the language, the cell's metadata, the exporter's lexer and its
formatter options. A cache hit returns the same string pygments made, so the HTML is byte-identical.
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict

MAX_ENTRIES = 2048  # a class's distinct cells, many times over; learners' own cells are the churn
MAX_KEPT_CHARS = 200_000  # a huge cell is highlighted, not kept
MAX_TOTAL_CHARS = 16_000_000  # and the memo holds at most this much HTML in all


class Memo(OrderedDict):
    """Key (a digest of the inputs) -> html, least recently used first, and how many characters it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0

    def keep(self, key: str, html: str) -> None:
        self[key] = html
        self.chars += len(html)
        while len(self) > MAX_ENTRIES or self.chars > MAX_TOTAL_CHARS:
            self.chars -= len(self.popitem(last=False)[1])

    def clear(self) -> None:
        super().clear()
        self.chars = 0


MEMO = Memo()


def _key(highlighter, source, language, metadata) -> str | None:
    try:
        inputs = json.dumps([source, language, highlighter.pygments_lexer, highlighter.extra_formatter_options,
                             metadata], sort_keys=True)
    except (TypeError, ValueError):  # options or metadata that JSON cannot name: not memoised
        return None
    return hashlib.sha256(inputs.encode("utf-8", "surrogatepass")).hexdigest()


def install() -> None:
    """Memoise every ``Highlight2HTML`` of this process (idempotent)."""
    from nbconvert.filters.highlight import Highlight2HTML

    highlight = Highlight2HTML.__call__
    if getattr(highlight, "memoised", False):
        return

    def memoised(self, source, language=None, metadata=None):
        key = _key(self, source, language, metadata) if len(source) <= MAX_KEPT_CHARS else None
        if key is None:
            return highlight(self, source, language, metadata)
        if key in MEMO:
            MEMO.move_to_end(key)
            return MEMO[key]
        html = highlight(self, source, language, metadata)
        if len(html) <= MAX_KEPT_CHARS:
            MEMO.keep(key, html)
        return html

    memoised.memoised = True
    Highlight2HTML.__call__ = memoised
