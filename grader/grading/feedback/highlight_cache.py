"""Code cells highlighted once per feedback worker instead of once per learner, and within a budget.

Every learner's feedback shows the same given cells (imports, plots, the visible checks), and
nbconvert's HTML export runs pygments over each of them again for every learner: about an eighth
of a learner's feedback CPU. ``highlighter_class()`` is nbconvert's ``Highlight2HTML`` memoised on
everything its output depends on: the source, the language, the cell's metadata, the lexer and its
formatter options. A cache hit returns the same string pygments made, so the HTML is byte-identical.
It reaches the exporter through nbconvert's public ``filters`` trait (``highlight_code``), set by
``grader.grading.feedback.pages.FeedbackExporter`` with the lexer nbconvert itself would pick.

Budget: pygments' IPython lexer is quadratic in the length of a line (a 120 kB attribute chain
``a.a.a...`` took minutes). A cell with a line longer than ``MAX_LINE_CHARS`` or more than
``MAX_CELL_CHARS`` in all, and every cell once a page has highlighted ``PAGE_CHARS`` (``new_page``
starts the count), is shown as escaped plain text in the same markup (pygments' text lexer: linear).
"""
from __future__ import annotations

import functools

from grader.grading.feedback.memo import BoundedMemo, digest
from grader.grading.seams import switched_off

NAME = "highlight-cache"  # for bench-grade --compare-patches ($LNCOURSE_SEAMS_OFF): budgets stay, the memo goes

# a class's distinct cells, many times over (learners' own cells are the churn); a huge cell is highlighted,
# not kept; and the memo holds at most 16 M characters of HTML in all
MEMO = BoundedMemo(max_entries=2048, max_kept_chars=200_000, max_total_chars=16_000_000)
MAX_LINE_CHARS = 1000  # the IPython lexer: ~0.1 s for such a line, 1.5 s for 8,000, minutes for 120,000
MAX_CELL_CHARS = 100_000
PAGE_CHARS = 500_000  # ~25 us a character: about 12 s of highlighting per page at most
_page = {"left": None}  # None: no page started, no page budget (outside the feedback workers)


def new_page(chars: int | None = PAGE_CHARS) -> None:
    """Start a page's budget of highlighted characters (the feedback worker calls it per learner); None: none."""
    _page["left"] = chars


def too_long(source: str) -> bool:
    return len(source) > MAX_CELL_CHARS or max(map(len, source.splitlines() or [""])) > MAX_LINE_CHARS


def plain(self, source: str, language) -> str:
    """``source`` escaped in the markup Highlight2HTML gives (pygments' text lexer), no colours."""
    from html import escape

    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers.special import TextLexer

    language = language or self.pygments_lexer
    formatter = HtmlFormatter(cssclass=escape(f" highlight hl-{language}"), **self.extra_formatter_options)
    return highlight(source or " ", TextLexer(), formatter)


@functools.cache
def highlighter_class():
    """nbconvert's ``Highlight2HTML``, memoised and within the budgets above (imported at first use)."""
    from nbconvert.filters.highlight import Highlight2HTML

    class MemoHighlight2HTML(Highlight2HTML):
        def __call__(self, source, language=None, metadata=None):
            key = None
            if len(source) <= MEMO.max_kept_chars and not switched_off(NAME):
                key = digest(source, language, self.pygments_lexer, self.extra_formatter_options, metadata)
            html = MEMO.recall(key)
            if html is None:
                if too_long(source):
                    html = plain(self, source, language)  # the same for every page: kept
                elif _page["left"] is not None and len(source) > _page["left"]:
                    return plain(self, source, language)  # this page's budget is spent: not kept
                else:
                    if _page["left"] is not None:
                        _page["left"] -= len(source)
                    html = super().__call__(source, language, metadata)
                MEMO.keep(key, html)
            return html

    return MemoHighlight2HTML
