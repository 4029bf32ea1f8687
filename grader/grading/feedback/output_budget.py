"""The outputs of one executed notebook, all cells together, within ``GradeConfig.notebook_output_characters``.

The sandbox caps each cell's outputs (text per output, rich data per cell, outputs per cell), but not a
notebook's: forty cells each under the cap made a 240 MB result that nbgrader's record phase copied into
autograded/ and the feedback worker then spent 25+ minutes (1.4 GiB) turning into HTML (bleach parses a
learner's HTML at ~30 us a character, ANSI-coloured text at ~20). ``bound_outputs`` is applied to every
accepted result before it is stored for the record phase (``GradingRun._accepted``): in notebook order,
outputs are kept whole while they fit; past the budget, text is cut (a few hundred characters stay) and
images, HTML and other rich data are dropped, each with a note in the cell. Only outputs change: the
output *types* of every cell stay (a passed test cell's outputs are still its printed text only), so no
score changes. The cached result keeps the full outputs; what is stored for nbgrader is the bounded copy.
"""
from __future__ import annotations

import copy

KEPT_AFTER_BUDGET = 300  # characters of a text field kept once the budget is spent: the start of the message
# Markup the feedback parses (bleach, BeautifulSoup, mistune): ~30 us a character, against ~0.1 for plain text
# and images. It has its own share of the budget (a twentieth: ~200,000 characters, ~7 s, by default).
MARKUP = ("text/html", "text/markdown", "text/latex", "image/svg+xml")
MARKUP_SHARE = 20
NOTE = "\n[output cut: this notebook's outputs exceed the grader's budget of {limit:,} characters]"


def _markup(output: dict) -> int:
    data = output.get("data") or {}
    return sum(len(value) for mime, value in data.items() if mime in MARKUP and isinstance(value, str))


def _size(output: dict) -> int:
    kind = output.get("output_type")
    if kind == "stream":
        return len(output.get("text") or "")
    if kind == "error":
        return sum(len(line) for line in output.get("traceback") or []) + len(output.get("evalue") or "")
    return sum(len(value) for value in (output.get("data") or {}).values() if isinstance(value, str))


def _cut(text: str, keep: int, limit: int) -> str:
    return text if len(text) <= keep else text[:keep] + NOTE.format(limit=limit)


def _shrink(output: dict, keep: int, limit: int) -> dict:
    """``output`` with at most ``keep`` characters of each text field and no rich data (same type)."""
    kind = output.get("output_type")
    if kind == "stream":
        return {**output, "text": _cut(output.get("text") or "", keep, limit)}
    if kind == "error":
        lines = list(output.get("traceback") or [])[-3:]  # the innermost frames and the message
        return {**output, "evalue": _cut(output.get("evalue") or "", keep // 2, limit),
                "traceback": [_cut(line, keep // 6, limit) for line in lines]}
    data = output.get("data") or {}
    text = data.get("text/plain") if isinstance(data.get("text/plain"), str) else ""
    dropped = sorted(mime for mime in data if mime != "text/plain")
    note = f"\n[{', '.join(dropped)} dropped: this notebook's outputs exceed the grader's budget]" if dropped else ""
    return {**output, "data": {"text/plain": _cut(text, keep, limit) + note}}


def bound_outputs(result: dict, limit: int) -> tuple[dict, str | None]:
    """(``result`` with its cells' outputs within ``limit`` characters in all, a note for the learner or None).
    ``result`` itself is not changed."""
    cells = result.get("cells") or {}
    outputs = [o for outputs in cells.values() for o in outputs if isinstance(o, dict)]
    markup_limit = limit // MARKUP_SHARE
    if sum(map(_size, outputs)) <= limit and sum(map(_markup, outputs)) <= markup_limit:
        return result, None
    left, markup_left, bounded, cut = limit, markup_limit, {}, 0
    for key in sorted(cells, key=lambda k: int(k) if str(k).isdigit() else 0):
        kept = []
        for output in cells[key]:
            size = _size(output) if isinstance(output, dict) else 0
            markup = _markup(output) if isinstance(output, dict) else 0
            if size <= left and markup <= markup_left:
                kept.append(output)
                left -= size
                markup_left -= markup
            else:
                cut += 1
                shrunk = _shrink(output, max(min(left, size), KEPT_AFTER_BUDGET), limit)
                kept.append(shrunk)
                left = max(0, left - _size(shrunk))
        bounded[key] = kept
    smaller = copy.copy(result)
    smaller["cells"] = bounded
    return smaller, (f"its outputs exceed the grader's budget of {limit:,} characters per notebook: {cut} output(s) "
                     "were cut or dropped in the feedback (scores are unchanged)")
