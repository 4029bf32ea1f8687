"""BeautifulSoup's non-public parts the grader relies on: its html.parser tree builder (``bs4.builder._htmlparser``).

Speed only. The soup pass (``grader.grading.feedback.soup_cache``, patch **soup-pass** in ``seams.nbconvert``) parses
each cell of a feedback page alone, and is exact only if it can tell that html.parser finished the cell before the end
of its input: ``soup_classes`` gives a tree builder whose parser records what html.parser left unparsed when its input
ended (``close`` sees ``rawdata``), and a BeautifulSoup that notes ignored end tags (``handle_endtag``, ``tagStack``,
``currentTag``). The self-check parses two tiny fragments and requires exactly those records.
"""
from __future__ import annotations

import functools
import inspect

from grader.grading.seams import expect, expect_signature

WRAPPER = "lncourse-fragment"


@functools.cache
def soup_classes():
    """(BeautifulSoup, its subclass for one cell inside ``WRAPPER``, a tree builder that keeps what
    html.parser left unparsed until the end of its input), imported at first use."""
    from bs4 import BeautifulSoup
    from bs4.builder._htmlparser import BeautifulSoupHTMLParser, HTMLParserTreeBuilder

    class RecordingParser(BeautifulSoupHTMLParser):
        def close(self):
            # html.parser reads a construct still open at the end of its input (a comment, a tag, a quoted
            # value) as text; inside the page, what follows could have closed it instead
            self.soup.unfinished = self.rawdata
            super().close()

    class RecordingBuilder(HTMLParserTreeBuilder):
        def feed(self, markup, _parser_class=RecordingParser):
            super().feed(markup, _parser_class=RecordingParser)

    class CellSoup(BeautifulSoup):
        """Notes what would make the cell parse differently inside its page.

        ``ignored``: names of end tags that closed none of the cell's elements (ignored here; inside the
        page they would close an ancestor of that name, if it had one); ``closed``: whether the wrapper's
        end tag found every element of the cell closed (else the page would keep them open after it).
        """

        def reset(self):
            super().reset()
            self.ignored, self.closed = set(), False

        def handle_endtag(self, name, nsprefix=None):
            if name == WRAPPER:
                self.closed = self.currentTag.name == WRAPPER
            elif not any(tag.name == name for tag in self.tagStack[2:]):  # above the document and the wrapper
                self.ignored.add(name)
            super().handle_endtag(name, nsprefix)

    return BeautifulSoup, CellSoup, RecordingBuilder


def check() -> None:
    from bs4 import BeautifulSoup
    from bs4.builder._htmlparser import BeautifulSoupHTMLParser, HTMLParserTreeBuilder

    expect_signature(HTMLParserTreeBuilder.feed, "self", "markup", "_parser_class")
    expect("_parser_class" in inspect.getsource(HTMLParserTreeBuilder.feed), "HTMLParserTreeBuilder.feed ignores "
           "_parser_class")
    expect_signature(BeautifulSoupHTMLParser.close, "self")
    expect_signature(BeautifulSoup.handle_endtag, "self", "name", "nsprefix")
    expect_signature(BeautifulSoup.reset, "self")
    _, CellSoup, RecordingBuilder = soup_classes()
    soup = CellSoup(f"<{WRAPPER}><div><p>a</p></span></div></{WRAPPER}>", builder=RecordingBuilder())
    expect(soup.closed and soup.ignored == {"span"} and soup.unfinished == "",
           f"bs4's parser records closed={soup.closed}, ignored={soup.ignored}, unfinished={soup.unfinished!r}")
    soup = CellSoup(f"<{WRAPPER}><div><!-- open", builder=RecordingBuilder())
    expect(not soup.closed and soup.unfinished.startswith("<!--"),
           f"bs4's parser leaves {soup.unfinished!r} unparsed, expected the open comment")
    expect(bool(RecordingBuilder().preserve_whitespace_tags), "HTMLParserTreeBuilder has no preserve_whitespace_tags")


PATCHES = []  # its one use is part of seams.nbconvert's soup-pass, which runs ``check``
