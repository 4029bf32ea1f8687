"""nbconvert's non-public parts the grader relies on: the ``BeautifulSoup`` name of ``nbconvert.exporters.html``.

Speed only: **soup-pass**. After rendering a page, ``HTMLExporter.from_notebook_node`` parses all of it with
BeautifulSoup to add alt text and tabindex (about 70% of a learner's feedback CPU);
``grader.grading.feedback.soup_cache`` gives the same bytes parsing each cell shared by the class once. nbconvert has
no switch for that pass, so ``FeedbackExporter`` (an ``HTMLExporter`` subclass chosen through nbgrader's public
``exporter_class``, ``grader.grading.feedback.pages``) renders with the module's ``BeautifulSoup`` name bound to a
stand-in that changes nothing (``unparsed``), then runs the memoised pass. The self-check requires nbconvert's method
to end with exactly the pass replicated (``NBCONVERT_PASS``, compared with its source) and its module to parse with
BeautifulSoup nowhere else; the bs4 seam's own check runs too (the memoised pass uses its private builder).

What nbconvert offers publicly is used as such, not patched: the Jinja environment is the public
``TemplateExporter.environment`` (``grader.grading.feedback.template_cache``) and the code highlighter is a
``Highlight2HTML`` given through the exporter's ``filters`` trait (``grader.grading.feedback.highlight_cache``).
"""
from __future__ import annotations

import contextlib
import inspect

from grader.grading.seams import SPEED, Patch, enabled, expect
from grader.grading.seams import bs4 as bs4_seam

# What nbconvert's from_notebook_node does after rendering, statement by statement (whitespace aside).
NBCONVERT_PASS = """
soup = BeautifulSoup(html, features="html.parser")
missing_alt = 0
for elem in soup.select("img:not([alt])"):
    elem.attrs["alt"] = "No description has been provided for this image"
    missing_alt += 1
if missing_alt:
    self.log.warning("Alternative text is missing on %s image(s).", missing_alt)
for elem in soup.select(".jp-Notebook div.jp-Cell-inputWrapper"):
    elem.attrs["tabindex"] = "0"
for elem in soup.select(".jp-Notebook div.jp-OutputArea-output"):
    elem.attrs["tabindex"] = "0"
return str(soup), resources
"""


class Unparsed:
    """Stands in for BeautifulSoup inside nbconvert's exporter: no images, no cells, the page as it is."""

    def __init__(self, markup: str, features: str | None = None) -> None:
        self.markup = markup

    def select(self, selector: str) -> list:
        return []

    def __str__(self) -> str:
        return self.markup


def _normalised(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]


def nbconvert_pass_is_known() -> bool:
    """Whether nbconvert's ``HTMLExporter.from_notebook_node`` ends with the pass replicated here, and its module
    makes no other BeautifulSoup (``without_soup_pass`` stands in for that name while a page renders)."""
    from nbconvert.exporters import html as nbconvert_html

    try:
        module = inspect.getsource(nbconvert_html)
        source = _normalised(inspect.getsource(nbconvert_html.HTMLExporter.from_notebook_node))
    except (OSError, TypeError):
        return False
    expected = _normalised(NBCONVERT_PASS)
    return source[-len(expected):] == expected and module.count("BeautifulSoup(") == 1


def check_soup_pass() -> None:
    from nbconvert.exporters import html as nbconvert_html

    expect(hasattr(nbconvert_html, "BeautifulSoup"), "nbconvert.exporters.html has no BeautifulSoup name")
    expect(nbconvert_pass_is_known(), "HTMLExporter.from_notebook_node no longer ends with the accessibility pass "
           "replicated in grader.grading.seams.nbconvert.NBCONVERT_PASS")
    bs4_seam.check()


SOUP_PASS = Patch("soup-pass", "nbconvert", SPEED, "nbconvert's accessibility pass, each common cell parsed once",
                  check_soup_pass)
PATCHES = [SOUP_PASS]


def soup_pass_on() -> bool:
    """Whether ``without_soup_pass`` may be used in this process (switched on, and its self-check passed)."""
    return enabled(SOUP_PASS)


@contextlib.contextmanager
def without_soup_pass():
    """Within: nbconvert's ``from_notebook_node`` renders and leaves the page as it is (no BeautifulSoup pass).
    Only where ``soup_pass_on()``."""
    from nbconvert.exporters import html as nbconvert_html

    real = nbconvert_html.BeautifulSoup
    nbconvert_html.BeautifulSoup = Unparsed
    try:
        yield
    finally:
        nbconvert_html.BeautifulSoup = real
