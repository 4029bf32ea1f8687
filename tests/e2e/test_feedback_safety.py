"""Feedback HTML cannot run a learner's script, and still shows the learner's honest work.

The instructor opens every learner's feedback file (made by nbgrader's GenerateFeedback) and
views submissions in the formgrader, so whatever a learner writes into a markdown cell, a
raw cell or an output must reach those pages as inert text. One hostile learner puts every
injection vector we know of into markdown, a raw cell, and code that displays HTML,
JavaScript, SVG and Markdown when graded. Grading clears saved outputs and re-executes, so
hostile *outputs* (every MIME type and metadata trick) are then written into the graded
notebook, and its feedback is made again by plain ``nbgrader generate_feedback`` (what an
instructor who skips ``grader grade`` runs) and rendered as the formgrader renders it.

Each page is opened in headless Chromium: every vector, if it ran, logs ``PWNED-<name>`` to
the console, opens a dialog, navigates, or leaves markup that could run or cover the page;
none may happen. The learner's markdown, printed output and figure must still show.
The configuration under test is nbgrader_config.py (HTMLExporter section).
"""
import base64
import io
import subprocess
import sys

import nbformat
import pytest

from tests.conftest import subprocess_env
from tests.course_helpers import launch_chromium, make_course, require_chromium, submit

# Outputs whose every type was removed leave nbconvert nothing to show, and it says so.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Your element with mimetype")]

ASSIGNMENT = "06_welford"  # no torch: the cheapest assignment to grade
STUDENT = "mallory"
HONEST_MARKDOWN = "HONEST-MARKDOWN my derivation: the mean is $\\mu = \\frac{1}{n}\\sum_i x_i$ and $a < b$ holds."
HONEST_PRINT = "HONEST-PRINT the loop ran"
RED, RESET = "\x1b[31m", "\x1b[0m"


def log(name: str) -> str:
    """JavaScript that reports that vector ``name`` ran."""
    return f"console.log('PWNED-{name}')"


# Raw HTML and markdown syntax a learner can type into a markdown cell.
MARKDOWN_VECTORS = "\n\n".join([
    f"<script>{log('md-script')}</script>",
    f'<img src="x" onerror="{log("md-img")}">',
    f"<IMG SRC=x oNeRrOr={log('md-img-unquoted')}>",
    f'<a href="javascript:{log("md-a-href")}">click me</a>',
    f"[a markdown link](javascript:{log('md-link')})",
    f"[an encoded link](&#106;avascript:{log('md-link-entity')})",
    f"[a tab link](java&#9;script:{log('md-link-tab')})",
    f"<javascript:{log('md-autolink')}>",
    f"[a reference link][evil]\n\n[evil]: javascript:{log('md-ref')}",
    f"![an image](javascript:{log('md-image')})",
    f'![alt" onerror="{log("md-image-alt")}](x)',
    f'<iframe src="javascript:{log("md-iframe")}"></iframe>',
    f'<iframe srcdoc="&lt;script&gt;{log("md-srcdoc")}&lt;/script&gt;"></iframe>',
    f'<svg onload="{log("md-svg-onload")}"><circle r="5"/></svg>',
    f"<svg><script>{log('md-svg-script')}</script></svg>",
    f'<math><a xlink:href="javascript:{log("md-mathml")}">m</a></math>',
    '<meta http-equiv="refresh" content="0; url=about:blank#PWNED-md-meta">',
    f'<object data="javascript:{log("md-object")}"></object><embed src="javascript:{log("md-embed")}">',
    f'<details open ontoggle="{log("md-details")}"><summary>s</summary>d</details>',
    f'<input autofocus onfocus="{log("md-autofocus")}">',
    f'<video><source onerror="{log("md-video")}"></video>',
    f'<body onload="{log("md-body")}">',
    f'<form action="javascript:{log("md-form")}"><button id="pwn-button">go</button></form>',
    '<base href="https://evil.example/">',
    f'<noscript><p title="</noscript><img src=x onerror={log("md-noscript")}>"></p></noscript>',
    f"<!-- --><script>{log('md-comment')}</script> -->",
    "<style>/* PWNED-css */ body { display: none !important; } #notebook { visibility: hidden; }</style>",
    '<div style="position:fixed;top:0;left:0;width:100%;height:100%;background:white;z-index:99999">'
    'PWNED-overlay</div>',
    f'<a href="#" style="behavior:url(x)" onclick="{log("md-onclick")}">x</a>',
    f"```mermaid\n<img src=x onerror=\"{log('md-mermaid')}\">\n```",
    f"$<img src=x onerror=\"{log('md-math')}\">$",
    f"$$\\href{{javascript:{log('md-mathjax-href')}}}{{x}}$$",
    f"# heading <img src=x onerror=\"{log('md-heading')}\">",
    f"```\"><img src=x onerror=\"{log('md-fence-info')}\">\ncode\n```",
])

RAW_VECTORS = (f"<script>{log('raw-script')}</script>\n<img src=x onerror=\"{log('raw-img')}\">\n"
               f'<iframe src="javascript:{log("raw-iframe")}"></iframe><svg onload="{log("raw-svg")}"></svg>')

# Code a learner's cell runs when graded: what it displays becomes an output of the graded notebook.
EXECUTED_HTML = f'<img src=x onerror="{log("exec-html")}"><script>{log("exec-html-script")}</script>'
EXECUTED_SVG = (f'<svg xmlns="http://www.w3.org/2000/svg" onload="{log("exec-svg")}">'
                f'<script>{log("exec-svg-script")}</script></svg>')
EXECUTED_MARKDOWN = f'[md](javascript:{log("exec-md")}) <img src=x onerror="{log("exec-md-img")}">'
EXECUTED_PRINT = f'<script>{log("exec-print")}</script><img src=x onerror="{log("exec-print-img")}">'
EXECUTED_VECTORS = "\n".join([
    "from IPython.display import HTML, SVG, Javascript, Markdown, display",
    f"display(HTML({EXECUTED_HTML!r}))",
    f"display(Javascript({log('exec-js')!r}))",
    f"display(SVG({EXECUTED_SVG!r}))",
    f"display(Markdown({EXECUTED_MARKDOWN!r}))",
    f"print({EXECUTED_PRINT!r})",
    f"print({RED + EXECUTED_PRINT + RESET!r})",
    f"print({HONEST_PRINT!r})",
    "",
])
PLOT = "import matplotlib.pyplot as plt\nplt.plot([0, 1, 4, 9])\nplt.show()\n"
RAISES = f"raise ValueError({EXECUTED_HTML.replace('exec-html', 'exec-error')!r})\n"


def png_bytes() -> bytes:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(2, 1.5), dpi=50)
    axes.plot([0, 1, 4, 9])
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def hostile_outputs() -> list[dict]:
    """Outputs as a learner could save them (or a display hook could produce them) in a notebook."""
    display = lambda data, metadata=None: {"output_type": "display_data", "data": data,  # noqa: E731 - a short helper
                                           "metadata": metadata or {}}
    return [
        display({"text/html": f'<img src=x onerror="{log("out-html")}"><script>{log("out-html-script")}</script>'
                              f'<iframe src="javascript:{log("out-iframe")}"></iframe>'
                              f'<svg onload="{log("out-svg-in-html")}"></svg>'
                              '<style>/* PWNED-out-css */ body{display:none}</style>'
                              '<div style="position:fixed;top:0;left:0;width:100%;height:100%;background:white;'
                              'z-index:99999">PWNED-out-overlay</div>',
                 "text/plain": "<HTML object>"}),
        display({"text/html": f'<img src=x onerror="{log("out-isolated")}">'}, {"text/html": {"isolated": True}}),
        display({"application/javascript": log("out-js"), "text/plain": "<Javascript object>"}),
        display({"text/javascript": log("out-text-js")}),
        display({"image/svg+xml": f'<svg xmlns="http://www.w3.org/2000/svg" onload="{log("out-svg")}">'
                                  f'<script>{log("out-svg-script")}</script><circle r="3"/></svg>'}),
        display({"text/markdown": f"[md](javascript:{log('out-md-link')}) <img src=x onerror=\"{log('out-md')}\">"}),
        display({"application/vnd.jupyter.widget-view+json": {"model_id": "pwn", "version_major": 2,
                                                              "version_minor": 0},
                 "text/plain": "widget"}),
        display({"image/png": "not base64"}, {"image/png": {"width": f"1 onerror={log('out-png-width')}",
                                                            "height": f"1 onload={log('out-png-height')}"}}),
        display({"image/jpeg": "nope"}, {"width": f"1 onerror={log('out-jpeg-width')}"}),
        display({"text/latex": f"$<img src=x onerror=\"{log('out-latex')}\">$"}),
        display({"application/pdf": b64(f"<script>{log('out-pdf')}</script>")}),
        {"output_type": "execute_result", "execution_count": 1, "metadata": {},
         "data": {"text/html": f"<script>{log('out-result')}</script>", "text/plain": "x"}},
        {"output_type": "stream", "name": "stdout",
         "text": f"\x1b[31m<script>{log('out-stream')}</script>\x1b[0m\n{HONEST_PRINT}\n"},
        {"output_type": "error", "ename": f"<img src=x onerror=\"{log('out-ename')}\">",
         "evalue": f"<script>{log('out-evalue')}</script>",
         "traceback": [f"\x1b[31m<img src=x onerror=\"{log('out-traceback')}\">\x1b[0m"]},
        display({"image/png": base64.b64encode(png_bytes()).decode(), "text/plain": "<Figure>"}),
    ]


def submission(release) -> nbformat.NotebookNode:
    """The release notebook with the learner's markdown, a raw cell and hostile code added."""
    nb = nbformat.read(release, as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")  # the imports
    cells = [c for c in nb.cells if c.cell_type != "code" or c is first_code or c.metadata.get("nbgrader")]
    markdown = nbformat.v4.new_markdown_cell(HONEST_MARKDOWN + "\n\n" + MARKDOWN_VECTORS)
    markdown.attachments = {"evil.svg": {"text/html": b64(f"<script>{log('attachment')}</script>")}}
    markdown.source += "\n\n![attached](attachment:evil.svg)"
    markdown.metadata["tags"] = [f'x" onmouseover="{log("tag")}']
    raw = nbformat.v4.new_raw_cell(RAW_VECTORS, metadata={"raw_mimetype": "text/html"})
    saved = [nbformat.from_dict(o) for o in hostile_outputs()]  # grading clears them
    code = nbformat.v4.new_code_cell(EXECUTED_VECTORS + PLOT, outputs=saved)
    raises = nbformat.v4.new_code_cell(RAISES)
    after = cells.index(first_code) + 1  # demo cells dropped above: they cost time
    cells[after:after] = [markdown, raw, code, raises]
    nb.cells = cells
    return nb


def inject_outputs(path) -> None:
    """Put the hostile outputs into the graded notebook: into the learner's cell and a test cell."""
    nb = nbformat.read(path, as_version=4)
    outputs = [nbformat.from_dict(o) for o in hostile_outputs()]
    learner = next(c for c in nb.cells if c.cell_type == "code" and "display(HTML" in c.source)
    test = next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade"))
    learner.outputs = outputs
    test.outputs = [*test.outputs, *[nbformat.from_dict(o) for o in hostile_outputs()]]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "version_major": 2, "version_minor": 0,
        "state": {"pwn": {"model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls",
                          "model_module_version": "2.0.0",
                          "state": {"value": f"<img src=x onerror=\"{log('widget-state')}\">"}}}}}
    nbformat.write(nb, path)


def formgrade_page(course, student: str):
    """The formgrader's view of a submission, made as the formgrader makes it (its HTMLExporter, the course config)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers
    from traitlets.config import Config

    from grader.grading.run.course_setup import load_config

    config = load_config(course)
    formgrader = Config()
    formgrader.HTMLExporter.template_name = "formgrade"  # nbgrader's FormgradeExtension.build_extra_config
    formgrader.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    config.merge(formgrader)
    resources = {"assignment_id": ASSIGNMENT, "notebook_id": ASSIGNMENT, "submission_id": "s", "index": 0, "total": 1,
                 "base_url": "", "student": student, "last_name": "L", "first_name": "F", "notebook_path": "n"}
    html, _ = HTMLExporter(config=config).from_filename(
        str(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"), resources=resources)
    path = course / "formgrade.html"
    path.write_text(html)
    return path


@pytest.fixture(scope="module")
def html_pages(tmp_path_factory):
    """graded: `grader grade`'s feedback; nbgrader: plain `nbgrader generate_feedback`'s, after the
    hostile outputs were written into the graded notebook; formgrade: the formgrader's view of it."""
    course = make_course(tmp_path_factory.mktemp("feedback_safety"), ASSIGNMENT)
    submit(course, STUDENT, submission(course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"), ASSIGNMENT)
    env = subprocess_env()
    result = subprocess.run([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course),
                             "--timeout", "30", "--jobs", "1"], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    feedback = course / "feedback" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.html"
    pages = {"graded": feedback.rename(course / "graded.html")}
    inject_outputs(course / "autograded" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    result = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT, "--student",
                             STUDENT, "--force"], cwd=course, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    pages["nbgrader"] = feedback
    pages["formgrade"] = formgrade_page(course, STUDENT)
    return pages


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = launch_chromium(p)
        yield chromium
        chromium.close()


# Read in the page once it has settled: everything a vector could have left behind. Attributes,
# form controls and fixed positioning are checked where learner content is rendered (the
# formgrader's own score inputs and buttons are not the learner's); frames, scripts, styles,
# <meta http-equiv> and <base> anywhere.
INSPECT = """() => {
  const bad = [];
  const learnerAreas = '.text_cell_render, .output_wrapper, .input_area';
  const urlAttrs = ['href', 'src', 'action', 'formaction', 'data', 'xlink:href', 'background', 'poster'];
  for (const el of document.querySelectorAll('*')) {
    const tag = el.tagName.toLowerCase();
    // nbconvert's own frame for an output marked "isolated": a data: URL of the sanitised HTML.
    const isolated = tag === 'iframe' && el.classList.contains('isolated-iframe');
    if (['iframe', 'frame', 'object', 'embed', 'base'].includes(tag) && !isolated) bad.push(`element ${tag}`);
    if (tag === 'meta' && el.hasAttribute('http-equiv') && !/content-type/i.test(el.getAttribute('http-equiv')))
      bad.push('meta http-equiv');
    if ((tag === 'script' || tag === 'style') && el.textContent.includes('PWNED')) bad.push(`${tag} with learner text`);
    if (!el.closest(learnerAreas)) continue;
    for (const attr of el.attributes) {
      const name = attr.name.toLowerCase();
      const value = attr.value.replace(/[\\s\\u0000-\\u001f]/g, '').toLowerCase();
      if (name.startsWith('on') || name === 'srcdoc') bad.push(`${tag} ${name}`);
      if (urlAttrs.includes(name) && !isolated && /^(javascript|vbscript|data:text\\/html)/.test(value))
        bad.push(`${tag} ${name}=${value}`);
    }
    if (['form', 'input', 'button', 'video', 'audio', 'svg', 'math', 'style', 'script'].includes(tag))
      bad.push(`learner element ${tag}`);
    if (getComputedStyle(el).position === 'fixed') bad.push(`${tag} position:fixed`);
  }
  return {bad, title: document.title, url: location.href};
}"""


def open_page(browser, path):
    """Open one feedback page; returns what the page did and what its DOM holds."""
    context = browser.new_context(java_script_enabled=True, offline=True)
    events = {"console": [], "dialogs": [], "popups": []}

    def watched_page():
        opened = context.new_page()
        opened.on("console", lambda message: events["console"].append(message.text))
        opened.on("dialog", lambda dialog: (events["dialogs"].append(dialog.message), dialog.dismiss()))
        opened.on("popup", lambda popup: events["popups"].append(popup.url))
        return opened

    page = watched_page()
    navigations = []
    page.on("framenavigated", lambda frame: frame == page.main_frame and navigations.append(frame.url))
    url = path.as_uri()
    page.goto(url, wait_until="load")
    page.wait_for_timeout(1000)  # timers, refreshes, autofocus, late image errors
    state = page.evaluate(INSPECT)
    events["navigations"] = list(navigations)  # on its own, before anything is clicked
    # A learner's link the instructor might click: none may run anything (following one is fine).
    # Each click happens in a page of its own, closed afterwards: a navigation a click started may
    # still be in flight on a busy machine, and would interrupt the next load of a shared page.
    # Links within the page ("#...", every heading's anchor) are not clicked, so no page is opened for them.
    hrefs = page.locator("#notebook a[href]").evaluate_all("links => links.map(a => a.getAttribute('href') || '')")
    for index, href in enumerate(hrefs):
        if href.startswith("#"):
            continue
        clicked = watched_page()
        clicked.goto(url, wait_until="load")
        link = clicked.locator("#notebook a[href]").nth(index)
        if link.is_visible():
            link.click(modifiers=[], no_wait_after=True, timeout=2000)
            clicked.wait_for_timeout(100)
        clicked.close()
    page.goto(url, wait_until="load")
    honest = {
        "markdown": page.get_by_text("HONEST-MARKDOWN").first.is_visible(),
        "print": page.locator(".output_stdout", has_text="HONEST-PRINT").first.is_visible(),
        "png": page.evaluate("""() => [...document.querySelectorAll('img')].some(
            img => img.src.startsWith('data:image/png;base64,') && img.naturalWidth > 50)"""),
        "text": page.inner_text("body"),
    }
    context.close()
    return state, events, honest


@pytest.fixture(scope="module")
def pages(browser, html_pages):  # the browser first: no Chromium, no minute spent grading
    return {name: (path, *open_page(browser, path)) for name, path in html_pages.items()}


PAGES = ["graded", "nbgrader", "formgrade"]


@pytest.mark.parametrize("page", PAGES)
def test_no_learner_script_runs(pages, page):
    path, state, events, _ = pages[page]
    ran = sorted({text for text in events["console"] if "PWNED" in text})
    assert not ran, f"learner scripts ran in {path}: {ran}"
    assert not events["dialogs"] and not events["popups"], events
    assert not [url for url in events["navigations"] if url != path.as_uri()], events["navigations"]
    assert state["url"] == path.as_uri()
    assert state["title"] == ASSIGNMENT
    assert not state["bad"], f"unsafe markup in {path}: {state['bad']}"


@pytest.mark.parametrize("page", PAGES)
def test_honest_work_still_shows(pages, page):
    _, _, _, honest = pages[page]
    assert honest["markdown"] and honest["print"]
    assert "$a < b$" in honest["text"]  # math keeps its "<" (MathJax typesets it when online)
    assert "&lt;" not in honest["text"] and "&amp;" not in honest["text"]  # nothing escaped twice
    if page != "graded":  # outputs put in by hand; `plt.show()` in the grading sandbox may make no image
        assert honest["png"], "the learner's matplotlib figure is missing"


def test_vectors_are_shown_as_text(pages):
    """The instructor sees what the learner tried, as text, rather than nothing."""
    text = pages["graded"][3]["text"]
    assert "<script>console.log('PWNED-md-script')</script>" in text
    assert "<script>console.log('PWNED-exec-html-script')</script>" in text  # displayed by the learner's code
