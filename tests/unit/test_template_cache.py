"""grader.grading.feedback.template_cache: a feedback worker compiles nbconvert's HTML templates once, and
the HTML is byte-identical to an uncached export."""
import jinja2
import nbformat
from nbconvert.exporters import HTMLExporter

from grader.grading.feedback import template_cache


def _notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\nSome $x^2$ maths.", id="m"),
                nbformat.v4.new_code_cell("print(1)", id="c", outputs=[nbformat.v4.new_output(
                    "stream", name="stdout", text="1\n")])]
    return nb


def _cached_export() -> str:
    exporter = HTMLExporter()
    template_cache.attach(exporter)
    template_cache.attach(exporter)  # idempotent
    return exporter.from_notebook_node(_notebook())[0]


def test_templates_are_compiled_once_and_the_html_does_not_change(monkeypatch):
    template_cache.CACHE.clear()
    uncached = HTMLExporter().from_notebook_node(_notebook())[0]
    compiled = []
    original_compile = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda self, *a, **k: compiled.append(1) or original_compile(self, *a, **k))
    first = _cached_export()
    compiled_by_the_first = len(compiled)
    second = _cached_export()  # a new exporter, as nbgrader makes per learner
    assert compiled_by_the_first > 0 and len(compiled) == compiled_by_the_first, "the second exporter compiled again"
    assert uncached == first == second
    assert template_cache.CACHE.compiled


def test_an_edited_template_is_compiled_again():
    template_cache.CACHE.clear()
    render = lambda source: jinja2.Environment(bytecode_cache=template_cache.CACHE,  # noqa: E731 - a short helper
                                               loader=jinja2.DictLoader({"t": source})).get_template("t").render()
    assert render("one {{ 1 }}") == "one 1"
    assert render("two {{ 2 }}") == "two 2"  # same name, new source: the checksum differs
