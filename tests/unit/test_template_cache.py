"""grader.grading.template_cache: a feedback worker compiles nbconvert's HTML templates once, and
the HTML is byte-identical to an uncached export."""
import jinja2
import nbformat
from nbconvert.exporters import HTMLExporter
from nbconvert.exporters.templateexporter import TemplateExporter

from grader.grading import template_cache


def _notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\nSome $x^2$ maths.", id="m"),
                nbformat.v4.new_code_cell("print(1)", id="c", outputs=[nbformat.v4.new_output(
                    "stream", name="stdout", text="1\n")])]
    return nb


def test_templates_are_compiled_once_and_the_html_does_not_change(monkeypatch):
    monkeypatch.setattr(TemplateExporter, "_create_environment", TemplateExporter._create_environment)
    template_cache.CACHE.clear()
    uncached = HTMLExporter().from_notebook_node(_notebook())[0]
    template_cache.install()
    template_cache.install()  # idempotent: one wrapper, not two
    compiled = []
    original_compile = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile", lambda self, *a, **k: compiled.append(1) or original_compile(self, *a, **k))
    first = HTMLExporter().from_notebook_node(_notebook())[0]
    compiled_by_the_first = len(compiled)
    second = HTMLExporter().from_notebook_node(_notebook())[0]  # a new exporter, as nbgrader makes per learner
    assert compiled_by_the_first > 0 and len(compiled) == compiled_by_the_first, "the second exporter compiled again"
    assert uncached == first == second
    assert template_cache.CACHE.compiled


def test_an_edited_template_is_compiled_again(monkeypatch):
    monkeypatch.setattr(TemplateExporter, "_create_environment", TemplateExporter._create_environment)
    template_cache.CACHE.clear()
    template_cache.install()
    render = lambda source: jinja2.Environment(bytecode_cache=template_cache.CACHE,  # noqa: E731
                                               loader=jinja2.DictLoader({"t": source})).get_template("t").render()
    assert render("one {{ 1 }}") == "one 1"
    assert render("two {{ 2 }}") == "two 2"  # same name, new source: the checksum differs
