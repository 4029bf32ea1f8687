"""nbgrader configuration for the LayerNorm/RMSNorm course (this folder is the course root)."""
import os

c = get_config()  # noqa: F821 - injected by traitlets

course_root = os.path.dirname(os.path.abspath(__file__))
build_dir = os.path.join(course_root, "build")
os.makedirs(build_dir, exist_ok=True)

c.CourseDirectory.course_id = "layernorm-rmsnorm"
c.CourseDirectory.root = course_root
# The percent scripts in source/ hold the solutions and hidden tests: nbgrader copies every
# non-notebook file of an assignment into release/, so they must never be copied. Only they
# are named: nbgrader applies the same list to submissions, and a learner's own helper
# module (helpers.py beside the notebook) must reach autograded/ like any other file.
_percent_scripts = sorted(name for name in os.listdir(os.path.join(course_root, "source"))
                          if os.path.isfile(os.path.join(course_root, "source", name, name + ".py"))
                          ) if os.path.isdir(os.path.join(course_root, "source")) else []
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback",
                            *(name + ".py" for name in _percent_scripts)]
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(build_dir, "gradebook.db")

# The stub a learner sees in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# nbgrader zeroes a test cell that writes to stderr; strip known harmless noise.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"Matplotlib is building the font cache|UserWarning: FigureCanvasAgg is non-interactive"

# `python -m grader grade` (grader/grading/config.py; `python -m grader grade --help-all` lists them all).
# Graded notebooks are small; a cell that takes minutes is a hung submission. Plain
# `nbgrader autograde` gets the same per-cell limit.
c.GradeConfig.cell_timeout = 120
c.GradeConfig.notebook_timeout = 600
# c.GradeConfig.jobs = 0            # notebooks in parallel (0: one per core)
# c.GradeConfig.cache_dir = ""      # cached job results (default: build/grading-cache)
c.Execute.timeout = int(c.GradeConfig.cell_timeout)

# Feedback must not reveal the hidden tests. nbgrader's feedback shows each test cell as it
# ran, hidden block included, and an error's traceback quotes the lines around the failing
# one, so a learner whose visible check fails would still read the hidden lines below it.
# This preprocessor removes the hidden block from the source (nbgrader's ClearHiddenTests)
# and, from the error output of such a cell, the traceback frames that quote the cell
# itself; the learner's own frames, the checks' frames and every message stay.
import re as _re  # noqa: E402 - the traceback filter's import, kept with it

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402 - the traceback filter's import, kept with it
from nbgrader.preprocessors import ClearHiddenTests, GetGrades  # noqa: E402 - the traceback filter's import, kept with it

_ANSI = _re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ClearHiddenTestsFromFeedback(ClearHiddenTests):
    """ClearHiddenTests for feedback: also drops traceback frames that quote a hidden block."""

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "code" and self.begin_test_delimeter in cell.source:
            own_frame = _re.compile(rf"^\s*(Cell|Input) In ?\[\s*{cell.get('execution_count')}\s*\]")
            hidden = [line.strip() for line in cell.source.split(self.begin_test_delimeter, 1)[1].splitlines()
                      if len(line.strip()) > 3]
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    frames = [_ANSI.sub("", frame) for frame in output.get("traceback", [])]
                    output.traceback = [
                        frame for frame, plain in zip(output.traceback, frames, strict=True)
                        if not own_frame.match(plain) and not any(line in plain for line in hidden)
                    ]
        return super().preprocess_cell(cell, resources, cell_index)


c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTestsFromFeedback, CSSHTMLHeaderPreprocessor]

# Every HTML page made from a learner's notebook is sanitised: the feedback files (which the
# instructor opens, all of them) and the formgrader's submission view (served from the
# instructor's Jupyter server, where a script could run code as the instructor). Both use
# nbconvert's HTMLExporter with this configuration (tests/e2e/test_feedback_safety.py opens all of
# them in Chromium). Three parts, built from nbconvert's, mistune's and bleach's own tools:
#
# 1. HTMLExporter.sanitize_html: nbconvert's switch for untrusted notebooks. Its templates
#    then emit no application/javascript output, no widget view or widget state, and pass
#    text/html and text/markdown outputs and raw cells through its clean_html (bleach).
# 2. SanitizeLearnerHTML, nbconvert's SanitizeHTML preprocessor (bleach) on raw cells and
#    outputs: text/html and text/markdown are cleaned, every output type that is not plain
#    data (JavaScript, widget views, unknown types) is removed.
# 3. Markdown cells: neither of the above covers them. nbgrader's feedback and formgrade
#    templates render them with `markdown2html` and no clean_html, and nbconvert's mistune
#    renderer keeps raw HTML and `javascript:` links. SanitizeHTML on the markdown *source*
#    escapes every "<" and "&", which then shows as "&lt;" in math and code spans
#    (nbconvert#850; the course's own "$a<0$"), and clean_html on the rendered page escapes
#    <p> and <h1> (nbconvert#2016). So markdown is rendered first, with nbconvert's renderer
#    and mistune's own link check, and the HTML is then cleaned by the same bleach
#    allow-list as the outputs. (Cost: images attached to a markdown cell lose their data:
#    URL, and headings lose their anchors.)

import bleach  # noqa: E402 - the sanitising part's import, kept with it
from jinja2 import pass_context  # noqa: E402 - the sanitising part's import
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath  # noqa: E402 - the sanitising part's import
from nbconvert.preprocessors.sanitize import SanitizeHTML  # noqa: E402 - the sanitising part's; not re-exported
from traitlets import default as _default  # noqa: E402 - the sanitising part's import

from grader.grading.feedback.memo import BoundedMemo as _BoundedMemo  # noqa: E402 - the sanitising part's import
from grader.grading.feedback.memo import digest as _digest  # noqa: E402 - the sanitising part's import

# What a learner's HTML may keep: structure and text formatting only. No attribute that runs
# script (on*), no style or class (the page's Bootstrap has position:fixed classes), no id.
LEARNER_HTML_TAGS = sorted({*bleach.ALLOWED_TAGS, "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "span",
                            "div", "table", "thead", "tbody", "tr", "th", "td", "img", "details", "summary", "del",
                            "s", "sub", "sup", "dl", "dt", "dd", "kbd"})
LEARNER_HTML_ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "img": ["src", "alt", "title"]}


class SanitizeLearnerHTML(SanitizeHTML):
    """nbconvert's SanitizeHTML for raw cells and outputs (markdown cells: see ``markdown2html``).

    Also keeps an image output's width and height only when they are numbers: nbconvert's
    templates write them into the <img> tag unquoted, so "1 onerror=..." adds an attribute.
    """

    @_default("tags")
    def _tags(self):
        return LEARNER_HTML_TAGS

    @_default("attributes")
    def _attributes(self):
        return LEARNER_HTML_ATTRIBUTES

    @_default("safe_output_keys")
    def _safe_output_keys(self):
        # SVG is safe as the template shows it: an <img> with a data: URL runs no script.
        return {"metadata", "text/plain", "text/latex", "application/json", "image/png", "image/jpeg",
                "image/svg+xml"}

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "markdown":
            return cell, resources
        for output in cell.get("outputs", []):
            metadata = output.get("metadata") or {}
            for level in [metadata, *[v for v in metadata.values() if isinstance(v, dict)]]:
                for key in ("width", "height"):
                    value = level.get(key)
                    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                        del level[key]
        return super().preprocess_cell(cell, resources, cell_index)


# (source, attachments) -> HTML: a class's feedback repeats the same prose cells. Bounded (a long-lived
# formgrader keeps only recent pages).
_rendered_markdown = _BoundedMemo(max_entries=4096, max_kept_chars=100_000, max_total_chars=16_000_000)


@pass_context
def markdown2html(context, source):
    """nbconvert's markdown rendering (math, attachments), then the learner HTML allow-list."""
    attachments = context.get("cell", {}).get("attachments", {})
    key = _digest(source, attachments)
    html = _rendered_markdown.recall(key)
    if html is None:
        renderer = IPythonRenderer(escape=False, allow_harmful_protocols=False, exclude_anchor_links=True,
                                   attachments=attachments)
        html = SanitizeLearnerHTML().sanitize_html_tags(MarkdownWithMath(renderer=renderer).render(source))
        _rendered_markdown.keep(key, html)
    return html


c.HTMLExporter.sanitize_html = True
c.HTMLExporter.preprocessors = [SanitizeLearnerHTML]
c.HTMLExporter.filters = {"markdown2html": markdown2html}
