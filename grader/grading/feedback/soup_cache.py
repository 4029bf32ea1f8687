"""nbconvert's accessibility pass over a feedback page, done once per distinct cell instead of once per page.

After rendering a page, nbconvert's ``HTMLExporter.from_notebook_node`` parses the whole of it with
BeautifulSoup (``html.parser``), gives images without ``alt`` one, makes the cells' input and output
areas focusable (``tabindex="0"``), and serialises the tree again: about 70% of a learner's feedback
CPU (~5,000 tags a page, most of them in cells every learner's page shares). ``accessible`` gives the
same bytes: each cell but the last is cut out of the page, replaced by a placeholder element, and
passed through BeautifulSoup on its own, memoised; the rest of the page (the skeleton) is parsed as
before, and each placeholder is replaced by its cell's serialisation.

That is exact only where a cell parses the same alone as in its page, so each condition is checked,
and any page that fails one gets nbconvert's own pass, whole:

- a cell closes every element it opens, and nothing it opens (a ``<script>``, a comment, a tag, a
  quoted value) runs past its end: html.parser finished it before the end of the cell's own input;
- an end tag that closes none of the cell's elements (BeautifulSoup ignores it) names no ancestor of
  the cell in the page (where it would close that ancestor);
- it starts with a start tag and ends with a tag, so no text merges with the page's around it;
- each placeholder is an element of the skeleton (not swallowed by a script, a comment, an attribute,
  and parsed before html.parser's end of input, where it reads what is still open as text),
  with no ``<pre>``/``<textarea>`` around it (whitespace-only text is kept there, collapsed elsewhere);
- whether it lies inside ``.jp-Notebook`` (the focus selectors' ancestor) is part of its memo key.

``grader.grading.feedback.pages.FeedbackExporter`` uses ``accessible`` in place of nbconvert's pass only where
the seams allow it (``grader.grading.seams.nbconvert``: nbconvert's pass is the one replicated here, checked
against its source; ``grader.grading.seams.bs4``: the private tree builder used below has the shape relied on),
so a changed nbconvert or BeautifulSoup keeps nbconvert's own pass.
"""
from __future__ import annotations

import json
import re
import secrets

from grader.grading.feedback.memo import BoundedMemo, digest
from grader.grading.seams.bs4 import WRAPPER, soup_classes

ALT_TEXT = "No description has been provided for this image"
MISSING_ALT = "img:not([alt])"
FOCUSABLE = ["div.jp-Cell-inputWrapper", "div.jp-OutputArea-output"]  # each under .jp-Notebook
NOTEBOOK = ".jp-Notebook"
FOCUSABLE_IN_PAGE = [f"{NOTEBOOK} {selector}" for selector in FOCUSABLE]  # nbconvert's selectors, whole
CELL_START = re.compile(r'<div id="cell-id=')  # how nbconvert's lab template opens each cell
# a class's distinct cells, a few variants each; a huge cell is parsed, not kept
MEMO = BoundedMemo(max_entries=4096, max_kept_chars=400_000, max_total_chars=32_000_000)


def _mark(soup, focusable: list[str]) -> int:
    """nbconvert's changes to ``soup`` (alt text, tabindex); returns how many images had no alt."""
    missing = 0
    for element in soup.select(MISSING_ALT):
        element.attrs["alt"] = ALT_TEXT
        missing += 1
    for selector in focusable:
        for element in soup.select(selector):
            element.attrs["tabindex"] = "0"
    return missing


def whole_page(html: str) -> tuple[str, int]:
    """nbconvert's pass on the whole page: (html, images without alt)."""
    BeautifulSoup = soup_classes()[0]
    soup = BeautifulSoup(html, features="html.parser")
    missing = _mark(soup, FOCUSABLE_IN_PAGE)
    return str(soup), missing


def _cell(fragment: str, in_notebook: bool) -> tuple[str, int, list[str]] | None:
    """One cell after the pass, serialised as it would read inside its page: (html, images without alt,
    names of end tags it leaves to its ancestors); None if the page could parse it differently."""
    key = digest(fragment, in_notebook)
    kept = MEMO.recall(key)
    if kept is not None:
        return tuple(json.loads(kept))
    if WRAPPER in fragment.lower():
        return None
    _, CellSoup, RecordingBuilder = soup_classes()
    soup = CellSoup(f"<{WRAPPER}>{fragment}</{WRAPPER}>", builder=RecordingBuilder())
    children = soup.contents
    if not soup.closed or soup.unfinished or len(children) != 1 or getattr(children[0], "name", None) != WRAPPER:
        return None
    # inside .jp-Notebook every element of the cell has that ancestor; outside, only one within the cell can
    missing = _mark(soup, FOCUSABLE if in_notebook else FOCUSABLE_IN_PAGE)
    cell = (children[0].decode_contents(), missing, sorted(soup.ignored))
    MEMO.keep(key, json.dumps(cell))
    return cell


def well_formed(fragment: str) -> bool:
    """Whether ``fragment`` (starting with a tag, ending with one) closes every element it opens and no other."""
    cell = _cell(fragment, False)
    return cell is not None and not cell[2]


def _by_cells(html: str) -> tuple[str, int] | None:
    """The pass with each cell but the last memoised; None where the page does not allow it (see the module)."""
    starts = [match.start() for match in CELL_START.finditer(html)]
    if len(starts) < 2:
        return None
    name = f"lncourse-cell-{secrets.token_hex(8)}"  # no learner can write it into the page
    pieces, fragments, end = [], [], 0
    for start, following in zip(starts, starts[1:], strict=False):
        stop = html.rfind(">", start, following) + 1  # text after the cell's last tag stays in the skeleton
        pieces += [html[end:start], f'<{name} data-i="{len(fragments)}"></{name}>']
        fragments.append(html[start:stop])
        end = stop
    pieces.append(html[end:])

    BeautifulSoup, _, RecordingBuilder = soup_classes()
    skeleton = BeautifulSoup("".join(pieces), builder=RecordingBuilder())
    placeholders = skeleton.find_all(name)
    if name in skeleton.unfinished:  # html.parser reached a placeholder only at the end of its input
        return None
    if [p.get("data-i") for p in placeholders] != [str(i) for i in range(len(fragments))]:
        return None
    ancestors = [{parent.name for parent in p.parents} for p in placeholders]
    if any(names & skeleton.builder.preserve_whitespace_tags for names in ancestors):
        return None
    in_notebook = {id(p) for p in skeleton.select(f"{NOTEBOOK} {name}")}
    missing = _mark(skeleton, FOCUSABLE_IN_PAGE)
    cells = []
    for placeholder, names, fragment in zip(placeholders, ancestors, fragments, strict=True):
        cell = _cell(fragment, id(placeholder) in in_notebook)
        if cell is None or not names.isdisjoint(cell[2]):
            return None
        cells.append(cell[0])
        missing += cell[1]
    parts = re.split(f'<{name} data-i="(\\d+)"></{name}>', str(skeleton))
    if [int(i) for i in parts[1::2]] != list(range(len(fragments))):
        return None
    parts[1::2] = cells
    return "".join(parts), missing


def accessible(html: str) -> tuple[str, int]:
    """``html`` after nbconvert's accessibility pass, byte for byte: (html, images that had no alt)."""
    return _by_cells(html) or whole_page(html)
