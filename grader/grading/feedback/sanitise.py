"""Every HTML page made from a learner's notebook is sanitised.

That is the feedback files (which the instructor opens, all of them) and the formgrader's submission view (served
from the instructor's Jupyter server, where a script could run code as the instructor). Both use nbconvert's
HTMLExporter, configured in the course's ``nbgrader_config.py`` with the parts below
(tests/e2e/test_feedback_safety.py opens all of them in Chromium). Three parts, built from nbconvert's, mistune's and
bleach's own tools:

1. ``HTMLExporter.sanitize_html``: nbconvert's switch for untrusted notebooks. Its templates then emit no
   application/javascript output, no widget view or widget state, and pass text/html and text/markdown outputs and
   raw cells through its clean_html (bleach).
2. ``SanitizeLearnerHTML``, nbconvert's SanitizeHTML preprocessor (bleach) on raw cells and outputs: text/html and
   text/markdown are cleaned, every output type that is not plain data (JavaScript, widget views, unknown types) is
   removed.
3. Markdown cells (``markdown2html``): neither of the above covers them. nbgrader's feedback and formgrade templates
   render them with ``markdown2html`` and no clean_html, and nbconvert's mistune renderer keeps raw HTML and
   ``javascript:`` links. SanitizeHTML on the markdown *source* escapes every "<" and "&", which then shows as "&lt;"
   in math and code spans (nbconvert#850; the course's own "$a<0$"), and clean_html on the rendered page escapes <p>
   and <h1> (nbconvert#2016). So markdown is rendered first, with nbconvert's renderer and mistune's own link check,
   and the HTML is then cleaned by the same bleach allow-list as the outputs. (Cost: images attached to a markdown
   cell lose their data: URL, and headings lose their anchors.)
"""
from __future__ import annotations

import bleach
from jinja2 import pass_context
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors.sanitize import SanitizeHTML  # public module; not re-exported by the package
from traitlets import default

from grader.grading.feedback.memo import BoundedMemo, digest

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

    @default("tags")
    def _tags(self):
        return LEARNER_HTML_TAGS

    @default("attributes")
    def _attributes(self):
        return LEARNER_HTML_ATTRIBUTES

    @default("safe_output_keys")
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
_rendered_markdown = BoundedMemo(max_entries=4096, max_kept_chars=100_000, max_total_chars=16_000_000)


@pass_context
def markdown2html(context, source):
    """nbconvert's markdown rendering (math, attachments), then the learner HTML allow-list."""
    attachments = context.get("cell", {}).get("attachments", {})
    key = digest(source, attachments)
    html = _rendered_markdown.recall(key)
    if html is None:
        renderer = IPythonRenderer(escape=False, allow_harmful_protocols=False, exclude_anchor_links=True,
                                   attachments=attachments)
        html = SanitizeLearnerHTML().sanitize_html_tags(MarkdownWithMath(renderer=renderer).render(source))
        _rendered_markdown.keep(key, html)
    return html
