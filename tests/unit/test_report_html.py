"""The class report's page (``grader.grading.report.html``, Jinja2 templates under ``templates/``).

- every learner-controlled text reaches the page as text, never as markup: a document whose every
  text is hostile (tags, quotes, ampersands, ANSI escapes), and a real report built from results of
  learners with hostile ids and flags;
- the templates ship with the package (``[tool.setuptools.package-data]``) and are found wherever the
  package is imported from;
- a name the template uses but the document lacks is an error, never an empty cell.
"""
import json
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import pytest

from grader.grading.report import html as report_html
from grader.grading.report.analysis import analyse
from grader.grading.report.html import render_html
from grader.grading.report.render import build_report
from grader.grading.run import results
from tests.conftest import ROOT, subprocess_env

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

# the tags the page is made of; anything else in it came from a learner
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "i", "code", "br", "span", "img",
             "table", "tr", "th", "td"}
ANSI = "\x1b[31m"


class Page(HTMLParser):
    """The tags, attributes and text of a page, as a browser's tokenizer sees them (entities decoded)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def hostile(field: str) -> str:
    """A text that is markup if it is not escaped: a tag, both quotes, an entity, an ANSI colour."""
    return f'<script>alert("{field}")</script><b title=\'{field}\'>&amp;{ANSI}{field}'


def assert_only_text(page: str, texts: list[str]) -> None:
    parsed = Page(page)
    assert {tag for tag, _ in parsed.tags} <= PAGE_TAGS, {tag for tag, _ in parsed.tags} - PAGE_TAGS
    for tag, attrs in parsed.tags:
        if tag == "img":
            assert set(attrs) == {"alt", "src"} and attrs["src"].startswith("data:image/png;base64,"), attrs
    assert "<script" not in page.lower() and "<b " not in page
    shown = "".join(parsed.text)
    for text in texts:  # each arrives whole, as the characters it was: escaped, not dropped
        assert text in shown, text


def a_document(**hostile_fields) -> dict:
    """The report of a small class, identified, in which every text a learner or a result can set is hostile."""
    h = hostile
    exercises = [h("exercise")]
    tests = {h("test"): {"status": "failed", "misconceptions": [h("id")]}, "test_ok": {"status": "passed"}}
    result = {"tests": tests, "flags": [{"test": h("flag_test"), "check": h("check"), "seen": h("seen")}]}
    by_student = {h("learner"): {h("notebook"): result}, "plain": {h("notebook"): result}}
    logs = {h("learner"): [{"exercise": exercises[0], "kind": "check", "check": None, "time": 1.0, "level": None}]}
    return analyse(h("assignment"), by_student, Counter({h("skipped_result"): 2}), logs,
                   Counter({h("skipped_notebook"): 1}), hostile_fields.get("problem"), exercises,
                   {h("test"): exercises[0]}, identify=True)


@pytest.mark.parametrize("problem", [None, hostile("problem")])
def test_every_text_of_the_document_reaches_the_page_as_text(problem):
    document = a_document(problem=problem)
    assert document["flags"] and document["by_learner"] and document["misconceptions"]
    fields = ["assignment", "exercise", "test", "id", "flag_test", "check", "seen", "learner", "notebook",
              "skipped_result"] + (["problem"] if problem else ["skipped_notebook"])
    page = render_html(document, {"pass_rate": None, "prevalence": None})
    assert_only_text(page, [hostile(field) for field in fields])
    assert page.count(ANSI) >= len(fields)  # an ANSI escape is not markup: kept, as before the templates
    assert '&lt;script&gt;alert(&#34;learner&#34;)&lt;/script&gt;&lt;b title=&#39;learner&#39;&gt;&amp;amp;' in page


def test_a_hostile_learner_and_flag_from_real_results_stay_text(tmp_path):
    """Through the whole report: results written and validated as the grading writes them."""
    from tests.unit.test_report import ASSIGNMENT, cells_by_role, release_notebook, result_for

    root = tmp_path / "course"
    nb = release_notebook()
    _, tests = cells_by_role(nb)
    learner = f'<img src=x onerror="alert(1)">\'{ANSI}&amp;'  # a folder name: no "/"
    seen = '</td></tr></table><script>alert("seen")</script>'
    for student in (learner, "zqplain"):
        document = result_for(nb, student, {tests[0]: ["common.fixed_rank"]})
        document["flags"] = [{"test": tests[0], "check": "check_'x'", "seen": seen}]
        results.write(root / "build" / "grading" / ASSIGNMENT / "results" / student / f"{ASSIGNMENT}.json", document)
    made = build_report(root, ASSIGNMENT, identify=True, out=tmp_path / "out")
    assert {flag["learner"] for flag in made["flags"]} == {learner, "zqplain"}
    page = Path(made["files"]["html"]).read_text(encoding="utf-8")
    assert_only_text(page, [learner, seen, "check_'x'"])
    assert "onerror=\"" not in page and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;&#39;" in page


def test_a_name_the_document_lacks_is_an_error_not_an_empty_cell():
    document = a_document()
    del document["tests"]
    with pytest.raises(jinja2.UndefinedError):
        render_html(document, {})


def test_the_templates_are_found_from_another_working_directory(tmp_path):
    """The package is imported from the checkout while the working directory is elsewhere."""
    document = a_document()
    (tmp_path / "document.json").write_text(json.dumps(document))
    script = ("import json, sys, grader.grading.report.html as h; "
              "sys.stdout.write(h.__file__ + '\\n' + h.render_html(json.load(open('document.json')), {}))")
    env = {**subprocess_env(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    where, page = done.stdout.split("\n", 1)
    assert Path(where).resolve() == Path(report_html.__file__).resolve()
    assert page == render_html(document, {}) and "<h1>Class report: <code>" in page


def test_the_templates_ship_with_the_package():
    """Every file under templates/ is matched by the package's package-data, so a wheel carries it."""
    package = Path(report_html.__file__).parent
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    matched = {path for pattern in shipped["grader.grading.report"] for path in package.glob(pattern)
               if path.is_file()}
    templates = {path for path in (package / "templates").rglob("*") if path.is_file()}
    assert templates and templates <= matched, templates - matched
    assert {path.name for path in templates} >= {"report.html.j2", "report.css"}
