"""Code cells highlighted once per feedback worker instead of once per learner.

Every learner's feedback shows the same given cells (imports, plots, the visible checks), and
nbconvert's HTML export runs pygments over each of them again for every learner: about an eighth
of a learner's feedback CPU. ``install`` memoises ``Highlight2HTML.__call__`` on everything its
output depends on: the source, the language, the cell's metadata, the exporter's lexer and its
formatter options. A cache hit returns the same string pygments made, so the HTML is byte-identical.
"""
from __future__ import annotations

from grader.grading.memo import BoundedMemo, digest

# a class's distinct cells, many times over (learners' own cells are the churn); a huge cell is highlighted,
# not kept; and the memo holds at most 16 M characters of HTML in all
MEMO = BoundedMemo(max_entries=2048, max_kept_chars=200_000, max_total_chars=16_000_000)


def install() -> None:
    """Memoise every ``Highlight2HTML`` of this process (idempotent)."""
    from nbconvert.filters.highlight import Highlight2HTML

    highlight = Highlight2HTML.__call__
    if getattr(highlight, "memoised", False):
        return

    def memoised(self, source, language=None, metadata=None):
        key = None
        if len(source) <= MEMO.max_kept_chars:
            key = digest(source, language, self.pygments_lexer, self.extra_formatter_options, metadata)
        html = MEMO.recall(key)
        if html is None:
            html = highlight(self, source, language, metadata)
            MEMO.keep(key, html)
        return html

    memoised.memoised = True
    Highlight2HTML.__call__ = memoised
