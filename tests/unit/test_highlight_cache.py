"""grader.grading.feedback.highlight_cache: a feedback worker highlights a code cell it has seen once, and the
HTML is byte-identical to an unmemoised export."""
import nbformat
import pygments
import pytest
from nbconvert.exporters import HTMLExporter

from grader.grading.feedback import highlight_cache
from grader.grading.feedback.pages import exporter_class


def _notebook(solution: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np\n%matplotlib inline", id="given"),
                nbformat.v4.new_code_cell(solution, id="answer"),
                nbformat.v4.new_code_cell("%%bash\necho hi", id="magic")]
    return nb


@pytest.fixture
def memoised(monkeypatch):
    fresh = highlight_cache.MEMO
    monkeypatch.setattr(highlight_cache, "MEMO", type(fresh)(fresh.max_entries, fresh.max_kept_chars,
                                                             fresh.max_total_chars))
    plain = [HTMLExporter().from_notebook_node(_notebook(f"x = {i}"))[0] for i in range(2)]
    return plain


def test_a_seen_cell_is_not_highlighted_again_and_the_html_does_not_change(memoised, monkeypatch):
    calls = []
    original = pygments.highlight
    monkeypatch.setattr(pygments, "highlight", lambda *a, **k: calls.append(a[0]) or original(*a, **k))
    first = exporter_class()().from_notebook_node(_notebook("x = 0"))[0]
    highlighted_by_the_first = list(calls)
    # a new exporter, as nbgrader makes per learner
    second = exporter_class()().from_notebook_node(_notebook("x = 1"))[0]
    assert [first, second] == memoised
    assert "x = 0" in highlighted_by_the_first
    assert calls[len(highlighted_by_the_first):] == ["x = 1"], "only the new learner's own cell is highlighted"


def test_the_memo_keys_on_the_lexer_the_options_and_the_metadata(memoised):
    python = highlight_cache.highlighter_class()(pygments_lexer="ipython3")
    text = highlight_cache.highlighter_class()(pygments_lexer="text")
    numbered = highlight_cache.highlighter_class()(pygments_lexer="ipython3",
                                                   extra_formatter_options={"linenos": "inline"})
    source = "def f(x):\n    return x  # note"
    calls = [(python, {}), (text, {}), (numbered, {}), (python, {"metadata": {"magics_language": "bash"}}),
             (python, {"language": "text"})]
    first = [highlighter(source, **kw) for highlighter, kw in calls]  # each a miss, then kept
    assert len(highlight_cache.MEMO) == len(calls)
    highlight_cache.MEMO.clear()
    alone = [highlighter(source, **kw) for highlighter, kw in reversed(calls)][::-1]  # another order
    assert first == alone
    assert len({first[0], first[1], first[2], first[3]}) == 4


def test_the_memo_is_bounded(memoised, monkeypatch):
    monkeypatch.setattr(highlight_cache.MEMO, "max_entries", 3)
    python = highlight_cache.highlighter_class()(pygments_lexer="ipython3")
    for i in range(10):
        python(f"y = {i}")
    kept = list(highlight_cache.MEMO)
    assert len(kept) == 3
    python("z" * (highlight_cache.MEMO.max_kept_chars + 1))  # too big to keep
    python("z = " + "1" * (highlight_cache.MEMO.max_kept_chars - 10))  # its HTML is too big to keep
    assert list(highlight_cache.MEMO) == kept  # neither was kept, nor pushed a small one out


def test_the_memo_holds_a_bounded_amount_of_html(memoised, monkeypatch):
    python = highlight_cache.highlighter_class()(pygments_lexer="ipython3")
    one_page = len(python("w = 0"))
    highlight_cache.MEMO.clear()
    monkeypatch.setattr(highlight_cache.MEMO, "max_total_chars", 3 * one_page + 5)
    for i in range(6):
        python(f"w = {i}")
    assert sum(map(len, highlight_cache.MEMO.values())) <= highlight_cache.MEMO.max_total_chars
    assert len(highlight_cache.MEMO) == 3  # the three most recent
    assert python("w = 5") in highlight_cache.MEMO.values()
