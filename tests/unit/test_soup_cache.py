"""grader.grading.feedback.soup_cache: nbconvert's accessibility pass, memoised per cell, gives the same bytes as
nbconvert's own pass over the whole page, for real exports and for random, malformed pages."""
import base64
import inspect
import logging
import random

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbconvert.exporters import html as nbconvert_html

from grader.grading import seams
from grader.grading.feedback import soup_cache
from grader.grading.seams import nbconvert as nbconvert_seam

PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                                     "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()

# Pieces of cells, honest and not: unclosed and stray tags, tags that close the page's own elements,
# raw-text elements and comments left open, whitespace-preserving elements, void elements, fake cell starts.
PIECES = ["<div>", "</div>", "<p>", "</p>", "<pre>", "</pre>", "<textarea>", "</textarea>", "<span class='x'>",
          "</span>", "<img src='a.png'>", "<img alt='' src='b.png'>", "<br>", "</br>", "<br/>", "<script>",
          "</script>", "<style>", "</style>", "<!--", "-->", "<li>", "</li>", "<ol>", "</ol>", "</main>",
          "</body>", '<div class="jp-Cell-inputWrapper">', '<div class="jp-OutputArea-output">',
          '<div class="jp-Notebook">', '<div id="cell-id=fake" class="jp-Cell">', "</lncourse-fragment>",
          "<details>", "</details>", "text", "a < b", "&amp;", "&quot;", "&nbsp;", "&lt;div&gt;", "  ", "\n",
          "\n\n  ", " ", "<b>bold</b>", "<code>x</code>"]


def reference(html: str) -> str:
    """nbconvert's own pass, on the whole page."""
    return soup_cache.whole_page(html)[0]


def random_page(rng: random.Random, cells: list[str]) -> str:
    body = "".join(f'<div id="cell-id=c{i}" class="jp-Cell jp-Notebook-cell">\n'
                   f'<div class="jp-Cell-inputWrapper">{cell}</div>\n</div>' + rng.choice(["", "\n", "\n\n"])
                   for i, cell in enumerate(cells))
    around = rng.choice(['<body class="jp-Notebook">\n<main>\n', "<body>\n<main>\n", '<body class="jp-Notebook"><pre>'])
    return f"<!DOCTYPE html>\n<html><head><style>p {{}}</style></head>{around}{body}\n</main>\n</body>\n</html>\n"


def balanced_cell(rng: random.Random, depth: int = 0) -> str:
    """Well-formed markup with awkward text: entities, whitespace, a void element."""
    text = "".join(rng.choice(["x", " ", "\n  ", "&amp;", "&quot;", "a < b", "<br>", "<img src='i.png'>", ""])
                   for _ in range(rng.randint(0, 3)))
    if depth > 2 or rng.random() < 0.3:
        return text
    tag = rng.choice(["div", "p", "span", "pre", "ol", "li", "details"])
    attribute = rng.choice(["", ' class="jp-OutputArea-output"', ' class="jp-Cell-inputWrapper x"', " title='a>b'"])
    return f"<{tag}{attribute}>{text}{balanced_cell(rng, depth + 1)}</{tag}>{balanced_cell(rng, depth + 1)}"


def random_cell(rng: random.Random, pool: list[str]) -> str:
    draw = rng.random()
    if draw < 0.6:
        return rng.choice(pool)  # a cell every learner has: the memo's case
    if draw < 0.85:
        return "<div>" + balanced_cell(rng) + "</div>"
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 8)))


@pytest.mark.slow  # hundreds of random pages through nbconvert (~25 s)
def test_random_pages_read_the_same_as_after_nbconvert_pass(monkeypatch):
    monkeypatch.setattr(soup_cache, "MEMO", type(soup_cache.MEMO)(4096, 400_000, 32_000_000))
    rng = random.Random(20261206)
    balanced = ["<p>prose</p>", "<div><pre>  x = 1\n\n  y</pre></div>", "<img src='c.png'>",
                '<div class="jp-OutputArea-output"><span>out</span></div>', "<ol><li>one</li></ol>"]
    pool = balanced + ["<div>" + balanced_cell(rng) + "</div>" for _ in range(10)] + [
        "".join(rng.choice(PIECES) for _ in range(6)) for _ in range(5)]
    by_cells = 0
    for _ in range(700):
        page = random_page(rng, [random_cell(rng, pool) for _ in range(rng.randint(1, 6))])
        expected = reference(page)
        assert soup_cache.accessible(page)[0] == expected, page
        by_cells += soup_cache._by_cells(page) is not None
        assert soup_cache.accessible(page)[0] == expected, page  # again, every cell from the memo
    assert by_cells > 150, f"only {by_cells} of 700 pages were done cell by cell: the test checks little"


def test_a_cell_that_would_close_its_page_or_run_past_its_end_makes_the_whole_page_pass():
    for cell in ["</main><p>", "<script>", "<!-- ", "<div>", "</body>", "<style>p", "</lncourse-fragment>"]:
        page = random_page(random.Random(0), ["<p>a</p>", cell, "<p>b</p>"])
        assert soup_cache._by_cells(page) is None, cell
        assert soup_cache.accessible(page)[0] == reference(page)


def _notebook(answer: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    code = nbformat.v4.new_code_cell(answer, id="answer", outputs=[
        nbformat.v4.new_output("display_data", {"image/png": PNG, "text/plain": "<Figure>"}),
        nbformat.v4.new_output("stream", name="stdout", text="printed\n"),
        nbformat.v4.new_output("error", ename="ValueError", evalue="no",
                               traceback=["\x1b[31mValueError\x1b[0m: no"])])
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\n<details><summary>s</summary>\n\n1. a\n2. b\n</details>",
                                              id="intro"),
                nbformat.v4.new_code_cell("import numpy as np", id="given"), code,
                nbformat.v4.new_raw_cell("<b>raw</b>", id="raw"),
                nbformat.v4.new_markdown_cell("Next: <a href='x.ipynb'>on</a>", id="last")]
    return nb


@pytest.mark.parametrize("sanitize", [False, True])
def test_the_feedback_exporter_writes_the_bytes_and_the_warning_nbconvert_does(monkeypatch, caplog, sanitize):
    from grader.grading.feedback.pages import exporter_class

    monkeypatch.setattr(soup_cache, "MEMO", type(soup_cache.MEMO)(4096, 400_000, 32_000_000))
    monkeypatch.setattr(seams, "_verdicts", {})  # checked here, on the real nbconvert
    notebooks = [_notebook(f"x = {i}\nprint('printed')") for i in range(2)]

    def export(exporter):
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            pages = [exporter(template_name="lab", sanitize_html=sanitize).from_notebook_node(nb)[0]
                     for nb in notebooks]
            return pages, [r.getMessage() for r in caplog.records if "Alternative text" in r.getMessage()]

    plain = export(HTMLExporter)
    assert nbconvert_seam.soup_pass_on()
    memoised = export(exporter_class())
    assert memoised == plain
    assert plain[1] == ["Alternative text is missing on 1 image(s)."] * 2
    assert 'tabindex="0"' in plain[0][0] and len(soup_cache.MEMO) >= 3


def test_common_cells_are_parsed_once(monkeypatch):
    monkeypatch.setattr(soup_cache, "MEMO", type(soup_cache.MEMO)(4096, 400_000, 32_000_000))
    parsed = []
    cell_soup = soup_cache.soup_classes()[1]
    original = cell_soup.__init__
    monkeypatch.setattr(cell_soup, "__init__",
                        lambda self, markup, **kw: parsed.append(markup) or original(self, markup, **kw))
    common = ["<p>the same prose</p>", "<pre>given()</pre>"]
    first = random_page(random.Random(1), [*common, "<p>ada's answer</p>", "<p>the end</p>"])
    second = first.replace("ada's answer", "bob's answer")
    for page in (first, second):
        assert soup_cache.accessible(page)[0] == reference(page)
    # the last cell is in the skeleton; of bob's page only his own cell is parsed again
    assert len(parsed) == 4 and "bob's answer" in parsed[-1]


def test_the_seam_leaves_an_unknown_nbconvert_pass_alone(monkeypatch):
    assert nbconvert_seam.nbconvert_pass_is_known(), "nbconvert's pass changed: compare NBCONVERT_PASS with it"

    def from_notebook_node(self, nb, resources=None, **kw):
        return "<html></html>", {}

    monkeypatch.setattr(HTMLExporter, "from_notebook_node", from_notebook_node)
    assert not nbconvert_seam.nbconvert_pass_is_known()
    monkeypatch.setattr(seams, "_verdicts", {})
    monkeypatch.setattr(seams, "_warned", set())
    assert not nbconvert_seam.soup_pass_on()  # the exporter then keeps nbconvert's own pass


def test_the_seam_refuses_a_module_that_parses_pages_elsewhere_too(monkeypatch):
    real = inspect.getsource
    assert nbconvert_seam.nbconvert_pass_is_known()
    monkeypatch.setattr(inspect, "getsource",
                        lambda obj: real(obj) + ("\nBeautifulSoup(x)\n" if obj is nbconvert_html else ""))
    assert not nbconvert_seam.nbconvert_pass_is_known()
