"""A real browser: JupyterLab runs every solved notebook that shows a widget, every formula of
every notebook renders, and the geometry widget answers a drag.

Run All Cells in the browser is kept for the notebooks with widgets, the part only a browser
can show (a widget that fails renders an error there and nowhere else). The others' cells run
in a real kernel in test_colab_like (at Colab's versions), in test_scripts and whenever a test
grades them; here they are opened, without a kernel, and their formulas checked.

One JupyterLab server (its own port, token, HOME and Jupyter folders, serving a temporary
copy of solutions/) and one headless Chromium, driven by Playwright, serve every test here.
Each notebook run in the browser has a page (a JupyterLab workspace) and a kernel of its own;
the notebooks only read (the others and a probe of planted formula mistakes) are opened one
after another in one more page, through JupyterLab's document manager, and closed again.
Playwright cannot download its own browser on these machines: Debian's /usr/bin/chromium
is launched instead (`tools/ensure-chromium` installs it). Screenshots land in
test-artifacts/screenshots/ (git-ignored); the Run All time of each notebook and its slowest
cells (JupyterLab records cell timing) in test-artifacts/browser-timings.json.
"""
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import ASSIGNMENTS, ROOT, subprocess_env
from tests.course_helpers import free_port, jupyter_folders, launch_chromium, require_chromium, stop, wait_for_server

pytestmark = pytest.mark.slow

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
TIMINGS = ROOT / "test-artifacts" / "browser-timings.json"
VIEWPORT = {"width": 1440, "height": 900}
RUN_TIMEOUT_S = 300  # one notebook, Run All Cells until the kernel is idle again
GEOMETRY = "02_geometry"


def shows_a_widget(assignment: str) -> bool:
    """Whether a code cell of the solved notebook builds or displays a widget."""
    nb = json.loads((ROOT / "solutions" / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    return any("widget" in "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


RUN_IN_LAB = [a for a in ASSIGNMENTS if shows_a_widget(a)]
# LNCOURSE_BROWSER_FROM_SOURCE=1: serve the solved notebooks as build() makes them from today's
# source/ (while authoring), instead of the committed solutions/.
FROM_SOURCE = "LNCOURSE_BROWSER_FROM_SOURCE"

# JupyterLab user settings: every cell in the DOM (so the error and formula searches see them
# all), cell timing recorded in the metadata, and no news or update checks (they would try to
# reach the network).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "recordTiming": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}

# Outputs JupyterLab renders with the stderr MIME type: stderr streams and error tracebacks.
STDERR_OUTPUTS = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'


@pytest.fixture(scope="module")
def chromium_path():
    return require_chromium()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium_path):
    """JupyterLab serving a copy of the solved notebooks; yields (base_url, token, log_path)."""
    base = tmp_path_factory.mktemp("lab")
    notebooks = base / "notebooks"
    notebooks.mkdir()
    for assignment in ASSIGNMENTS:
        if os.environ.get(FROM_SOURCE):  # authoring: today's source/, before `make build`
            from grader.course.build import script_to_notebook, solution_edition, write_notebook

            script = ROOT / "source" / assignment / f"{assignment}.py"
            write_notebook(solution_edition(script_to_notebook(script)), notebooks / f"{assignment}.ipynb")
        else:
            shutil.copy2(ROOT / "solutions" / f"{assignment}.ipynb", notebooks / f"{assignment}.ipynb")
    (notebooks / f"{MATH_PROBE}.ipynb").write_text(math_probe_notebook())
    env = subprocess_env()
    env.pop("MPLBACKEND", None)  # as for a learner: the kernel's inline backend draws the figures
    env.pop("NBGRADER_EXECUTION", None)
    for name in list(env):
        if name.startswith(("JUPYTER", "JPY_")) or name == "PYTHONPATH":
            del env[name]
    env.update(jupyter_folders(base))
    for name, value in LAB_SETTINGS.items():
        path = base / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    (base / "home").mkdir()
    port, token = free_port(), uuid.uuid4().hex
    log_path = base / "jupyterlab.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={notebooks}",
             "--ServerApp.port_retries=0", "--LabApp.news_url=None",
             "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the reader opens notebooks through it
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(process, base_url, token, log_path, 120)
        yield base_url, token, log_path
    finally:
        stop(process)


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = launch_chromium(p)
        context = chromium.new_context(viewport=VIEWPORT, device_scale_factor=1)
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()
            chromium.close()


def screenshot(target, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def bring_into_view(locator, block: str = "start", offset_px: int = 0) -> None:
    """Scroll the notebook so the element sits at the top/center/end, then by offset_px more."""
    locator.evaluate("""(e, [block, offset]) => {
        e.scrollIntoView({block});
        const panel = e.closest('.jp-WindowedPanel-outer');
        if (panel) panel.scrollBy(0, offset);
    }""", [block, offset_px])
    time.sleep(0.3)  # let lazy images and MathJax settle before a screenshot


def open_notebook(context, lab, assignment):
    """A page with the notebook open in a workspace of its own, kernel started."""
    base_url, token, _ = lab
    page = context.new_page()
    page.goto(f"{base_url}/lab/workspaces/{assignment}/tree/{assignment}.ipynb?reset&token={token}")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
    page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').wait_for(timeout=120_000)
    # The file browser would take a third of the screenshots: collapse the left sidebar.
    if page.locator("#jp-left-stack").is_visible():
        page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current').click()
    return page


@pytest.fixture(scope="module")
def reader(browser, lab):
    """One JupyterLab page, no document open, for the notebooks that are only read: each is opened in
    it without a kernel (read_notebook) and closed again: a page load and a kernel per notebook cost
    more CPU than reading it."""
    base_url, token, _ = lab
    page = browser.new_page()
    page.goto(f"{base_url}/lab/workspaces/reader?reset&token={token}")
    page.wait_for_function("() => window.jupyterapp !== undefined", polling=100)
    # All plugins activated, the layout restored: the document manager's commands are there. The file
    # browser would take a third of a failure's screenshot: collapse the left sidebar.
    page.evaluate("() => window.jupyterapp.restored.then(() => window.jupyterapp.shell.collapseLeft())")
    try:
        yield page
    finally:
        page.close()


@contextlib.contextmanager
def read_notebook(reader, name):
    """The notebook NAME open in the reader page, without a kernel ("Open With → Notebook (no kernel)"):
    yields a CSS selector of its panel, which is closed afterwards."""
    panel_id = reader.evaluate("""async path => {
        const widget = await window.jupyterapp.commands.execute('docmanager:open', {
            path, factory: 'Notebook', kernelPreference: {shouldStart: false, canStart: false, shouldReuse: false}});
        return widget.id;
    }""", f"{name}.ipynb")
    panel = f'.jp-NotebookPanel[id="{panel_id}"]'
    reader.locator(f"{panel} .jp-Cell").first.wait_for()
    try:
        yield panel
    finally:  # dispose, not close: nothing to save, and no dialog can hold it open
        reader.evaluate("""id => {
            for (const widget of window.jupyterapp.shell.widgets('main')) if (widget.id === id) widget.dispose();
        }""", panel_id)
        reader.locator(panel).wait_for(state="detached")


def run_all_cells(page) -> float:
    """Run → Run All Cells from the menu bar; wait until every code cell has run; return seconds."""
    n_code = page.locator(".jp-Notebook .jp-CodeCell").count()
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt")
    began = time.monotonic()
    for _ in range(3):
        # Select the first cell, so the notebook is JupyterLab's current widget and the
        # Run menu's items are enabled (on a freshly loaded page they may not be yet).
        page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.click()
        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        item = page.locator(".lm-Menu-item:not(.lm-mod-disabled)", has_text="Run All Cells").first
        try:
            item.click(timeout=10_000)
        except Exception:  # noqa: BLE001 - Playwright's TimeoutError: the item stayed disabled
            page.keyboard.press("Escape")
            continue
        started = time.monotonic()
        while time.monotonic() - started < 15:
            if any(t.strip() not in ("", "[ ]:") for t in prompts.all_inner_texts()):
                break
            time.sleep(0.25)
        else:
            continue
        break
    else:
        screenshot(page, f"FAILED-start-{page.url.split('/')[-1].split('?')[0]}")
        pytest.fail("Run → Run All Cells did not start the notebook (3 tries)")
    deadline = began + RUN_TIMEOUT_S
    while True:
        texts = prompts.all_inner_texts()
        done = sum(1 for t in texts if t.strip().startswith("[") and t.strip()[1:-2].strip().isdigit())
        busy = page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').count() == 0
        if not busy and not any("*" in t for t in texts):
            if done < n_code:  # JupyterLab stops at the first error: say which one
                name = page.url.split("/")[-1].split("?")[0]
                screenshot(page, f"FAILED-stopped-{name}")
                pytest.fail(f"Run All Cells stopped after {done} of {n_code} code cells of {name}:\n"
                            + "\n---\n".join(e[-2000:] for e in error_outputs(page)))
            return time.monotonic() - began
        if time.monotonic() > deadline:
            screenshot(page, f"FAILED-timeout-{page.url.split('/')[-1].split('?')[0]}")
            pytest.fail(f"Run All Cells did not finish in {RUN_TIMEOUT_S} s ({done}/{n_code} cells ran)")
        time.sleep(0.5)


def error_outputs(page) -> list[str]:
    """Text of every stderr or error output that reports a problem (tracebacks, errors, warnings)."""
    texts = page.locator(STDERR_OUTPUTS).all_inner_texts()
    return [t for t in texts if any(w in t for w in ("Traceback", "Error", "Warning"))]


def save_notebook(page, lab, assignment) -> dict:
    """File → Save (Ctrl+S) and the notebook as saved, with the cell timing JupyterLab recorded."""
    path = lab[2].parent / "notebooks" / f"{assignment}.ipynb"
    before = path.stat().st_mtime_ns
    page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.stat().st_mtime_ns != before:
            time.sleep(0.5)  # the write may still be going on
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                continue
        time.sleep(0.25)
    pytest.fail(f"saving {assignment} from JupyterLab did not write {path.name} in 30 s")


def cell_seconds(nb: dict) -> list[tuple[float, int, str]]:
    """(seconds, index among code cells, first line) per executed code cell, from the recorded timing."""
    from datetime import datetime

    found = []
    code_cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for index, cell in enumerate(code_cells):
        times = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in times and "shell.execute_reply" in times:
            start, end = (datetime.fromisoformat(times[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            source = "".join(cell["source"])
            first = next((line for line in source.splitlines() if line.strip() and not line.startswith("#")), "")
            found.append(((end - start).total_seconds(), index, first[:80]))
    return found


# assignment -> {"run_all_s": wall time of Run All Cells, "cells_s": sum of cell times, "slowest": [...]}
RUN_TIMES: dict[str, dict] = {}


def record_run_time(assignment: str, seconds: float, nb: dict) -> None:
    cells = cell_seconds(nb)
    RUN_TIMES[assignment] = {"run_all_s": round(seconds, 2), "cells_s": round(sum(t for t, _, _ in cells), 2),
                             "slowest": [{"code_cell": i, "s": round(t, 2), "starts": first}
                                         for t, i, first in sorted(cells, reverse=True)[:5]]}
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    total = {"total_run_all_s": round(sum(r["run_all_s"] for r in RUN_TIMES.values()), 2)}
    TIMINGS.write_text(json.dumps({**total, "notebooks": RUN_TIMES}, indent=1) + "\n")


@pytest.fixture(scope="module")
def executed(browser, lab):
    """assignment -> page with the solved notebook run to the end (each run once, on demand)."""
    pages, timings, failures = {}, {}, {}

    def get(assignment):
        if assignment in failures:  # one failed run is enough: the test that ran it shows why
            pytest.fail(f"{assignment} did not run to the end in JupyterLab:\n{failures[assignment][:1500]}")
        if assignment not in pages:
            began = time.monotonic()
            try:
                page = open_notebook(browser, lab, assignment)
                print(f"{assignment}: opened in {time.monotonic() - began:.1f} s")
                timings[assignment] = run_all_cells(page)
            except pytest.fail.Exception as failure:
                failures[assignment] = str(failure)
                raise
            pages[assignment] = page
            record_run_time(assignment, timings[assignment], save_notebook(page, lab, assignment))
        return pages[assignment], timings[assignment]

    return get


def test_the_notebooks_with_widgets_are_found():
    assert GEOMETRY in RUN_IN_LAB and "05_placement" in RUN_IN_LAB and "03_backward" not in RUN_IN_LAB


@pytest.mark.parametrize("assignment", RUN_IN_LAB)
def test_solved_notebook_runs_clean_in_jupyterlab(executed, assignment):
    """Run All Cells in JupyterLab: every cell runs, none shows a traceback, an error or a warning."""
    page, seconds = executed(assignment)
    record = RUN_TIMES.get(assignment, {})
    slowest = ", ".join(f"code cell {c['code_cell']} {c['s']:.1f} s ({c['starts']})"
                        for c in record.get("slowest", [])[:3])
    print(f"{assignment}: Run All Cells took {seconds:.1f} s in the browser (cells {record.get('cells_s', 0):.1f} s); "
          f"slowest: {slowest}")
    errors = error_outputs(page)
    if errors:
        screenshot(page, f"FAILED-{assignment}")
    assert not errors, f"{assignment} shows errors in JupyterLab:\n" + "\n---\n".join(e[-2000:] for e in errors)
    assert page.locator(".jp-OutputArea-output").count() > 0
    # README-grade pictures: the top of the notebook, its first passing check, its first figure.
    page.locator(".jp-WindowedPanel-outer").first.evaluate("e => e.scrollTo(0, 0)")
    screenshot(page, f"{assignment}-top")
    check = page.locator(".jp-OutputArea-output", has_text="✔").first
    if check.count():
        bring_into_view(check, "center")
        screenshot(page, f"{assignment}-checks")
    figure = page.locator(".jp-OutputArea-output img").first
    if figure.count():
        bring_into_view(figure, "center")
        screenshot(page, f"{assignment}-figure")
        screenshot(page.locator(".jp-Notebook .jp-CodeCell", has=figure).first, f"{assignment}-figure-cell")


# ------------------------------------------------------------------ every formula renders

MATH_PROBE = "mathjax-probe"  # a notebook of planted mistakes: the formula report must see each one
PROBE_CELLS = [
    ("fine", "Inline $x^2 + \\sqrt{d}$, a code span `a $ b`, and a display $$\\frac{a}{b}$$"),
    ("error", "No right delimiter: $\\left( x$ here."),
    ("unbalanced", "Unbalanced: $\\frac{1}{2$ here (MathJax never sees it: the '$' stays)."),
    ("undefined", "Misspelt: $\\boldsymbl{x}$ here."),
    ("raw", "A dollar $ left alone, with nothing to close it."),
]

# Per markdown cell, in notebook order: how many formulas MathJax typeset, what it could not
# (merror nodes, or the red text of an undefined macro), and any text outside formulas and
# code that still holds a '$' (a fragment MathJax never saw). Error nodes in outputs count too.
MATH_REPORT_JS = """panel => {
    const notebook = document.querySelector(panel);
    const outside = n => !n.parentElement.closest('mjx-container, code, pre, script, style');
    const red = e => ['rgb(255, 0, 0)', 'red'].includes(getComputedStyle(e).color);
    const cells = [...notebook.querySelectorAll('.jp-Notebook .jp-MarkdownCell')].map(cell => {
        const md = cell.querySelector('.jp-RenderedMarkdown');
        if (!md) return {rendered: false, head: cell.innerText.slice(0, 100)};
        const errors = [...md.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 200));
        const undefined_ = [...md.querySelectorAll('mjx-container')]
            .filter(m => [...m.querySelectorAll('mjx-mtext, mjx-mi')].some(red))
            .map(m => m.getAttribute('aria-label') || m.textContent || 'a formula');
        const raw = [];
        const walker = document.createTreeWalker(md, NodeFilter.SHOW_TEXT);
        while (walker.nextNode()) {
            const n = walker.currentNode;
            if (n.nodeValue.includes('$') && outside(n)) raw.push(n.nodeValue.trim().slice(0, 160));
        }
        if (md.innerText.includes('Math input error')) errors.push('Math input error');
        return {rendered: true, math: md.querySelectorAll('mjx-container').length, errors,
                undefined: undefined_, raw, head: md.innerText.trim().slice(0, 100)};
    });
    const outputErrors = [...notebook.querySelectorAll('.jp-OutputArea mjx-merror')].map(e => e.textContent);
    return {cells, outputErrors};
}"""


def math_probe_notebook() -> str:
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_markdown_cell(text, id=f"probe-{name}") for name, text in PROBE_CELLS]
    return nbformat.writes(nb)


def expected_formulas(markdown: str) -> int:
    """How many $...$ / $$...$$ fragments a markdown cell holds (code spans excluded), as
    tests/unit/test_notebook_text.py reads them."""
    from tests.unit.test_notebook_text import FORMULA

    return len(FORMULA.findall(re.sub(r"`[^`\n]*`", "", markdown)))


def math_report(page, panel: str, expected_total: int, timeout_s: float = 60) -> dict:
    """The report on the notebook panel (a CSS selector) once MathJax has typeset everything it will (the
    count reaches the expected total and holds for a second, or stops changing for five)."""
    deadline, last, steady_since = time.monotonic() + timeout_s, None, time.monotonic()
    while True:
        report = page.evaluate(MATH_REPORT_JS, panel)
        count = sum(c.get("math", 0) for c in report["cells"])
        now = time.monotonic()
        if count != last:
            last, steady_since = count, now
        steady = now - steady_since
        if (count >= expected_total and steady >= 1) or steady >= 5 or now > deadline:
            return report
        time.sleep(0.25)


def math_problems(report: dict, expected: list[int]) -> list[str]:
    cells = report["cells"]
    if len(cells) != len(expected):
        return [f"{len(cells)} markdown cells in the page, {len(expected)} in the notebook"]
    problems = [f"an output shows a MathJax error: {e}" for e in report["outputErrors"]]
    for index, (cell, want) in enumerate(zip(cells, expected, strict=True)):
        where = f"markdown cell {index} ({cell['head'][:60]!r})"
        if not cell["rendered"]:
            problems.append(f"{where} is not rendered")
            continue
        if cell["math"] != want:
            problems.append(f"{where}: MathJax typeset {cell['math']} formulas, the cell has {want}")
        problems += [f"{where}: MathJax error {e!r}" for e in cell["errors"]]
        problems += [f"{where}: undefined macro shown as {u!r}" for u in cell["undefined"]]
        problems += [f"{where}: raw '$' in the rendered text: {r!r}" for r in cell["raw"]]
    return problems


def test_the_formula_report_sees_each_planted_mistake(reader):
    """The probe: a clean cell passes; a MathJax error, an unbalanced brace, an undefined macro and a lone
    '$' are each named."""
    with read_notebook(reader, MATH_PROBE) as panel:
        report = math_report(reader, panel, expected_total=4, timeout_s=30)
        cells = dict(zip((name for name, _ in PROBE_CELLS), report["cells"], strict=True))
        assert cells["fine"]["math"] == 2 and not (cells["fine"]["errors"] or cells["fine"]["undefined"]
                                                   or cells["fine"]["raw"]), cells["fine"]
        assert cells["error"]["errors"], cells["error"]
        assert cells["unbalanced"]["raw"], cells["unbalanced"]
        assert cells["undefined"]["errors"] or cells["undefined"]["undefined"], cells["undefined"]
        assert cells["raw"]["raw"] and cells["raw"]["math"] == 0, cells["raw"]
        problems = math_problems(report, [expected_formulas(text) for _, text in PROBE_CELLS])
        names = [name for name, _ in PROBE_CELLS]
        flagged = {names[i] for i in range(len(names)) if any(p.startswith(f"markdown cell {i} ") for p in problems)}
        assert flagged == {"error", "unbalanced", "undefined", "raw"}, problems


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_formula_renders(executed, request, lab, assignment):
    """MathJax typesets every $...$ and $$...$$ of every markdown cell: no error node, no undefined macro,
    no '$' left in the rendered text (issue 13: a lost backslash once showed as 'oldsymbol')."""
    nb = json.loads((lab[2].parent / "notebooks" / f"{assignment}.ipynb").read_text())  # the notebook served
    expected = [expected_formulas("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "markdown"]
    if assignment in RUN_IN_LAB:  # its run page, outputs and all
        (page, _), opened = executed(assignment), contextlib.nullcontext(".jp-NotebookPanel")
    else:  # the reader page, asked for only here: a run page alone loads no second one
        page = request.getfixturevalue("reader")
        opened = read_notebook(page, assignment)
    with opened as panel:
        report = math_report(page, panel, sum(expected))
        problems = math_problems(report, expected)
        if problems:
            screenshot(page, f"FAILED-math-{assignment}")
    assert not problems, f"{assignment}: formulas that do not render:\n" + "\n".join(problems[:30])
    print(f"{assignment}: {sum(expected)} formulas in {len(expected)} markdown cells typeset by MathJax")


# ------------------------------------------------------------------ the geometry widget


def widget_png(image) -> bytes:
    """The bytes of the PNG an ipywidgets Image shows (its src is a blob: or data: URL)."""
    b64 = image.evaluate("""async img => {
        const bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
        let s = ''; for (const b of bytes) s += String.fromCharCode(b); return btoa(s);
    }""")
    import base64

    return base64.b64decode(b64)


def readout(widget) -> dict:
    """The widget's table of numbers: label -> value text."""
    rows = widget.locator(".widget-html table tr").all()
    values = {}
    for row in rows:
        cells = row.locator("td").all_inner_texts()
        if len(cells) == 2:
            values[cells[0].strip()] = cells[1].strip()
    return values


def wait_for_new_image(image, old_src: str, timeout_s: float = 20) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        src = image.get_attribute("src")
        if src and src != old_src:
            time.sleep(0.3)  # let a burst of updates (one per key press) settle
            return image.get_attribute("src")
        time.sleep(0.1)
    pytest.fail("the widget's picture did not change")


def png_size(png: bytes) -> tuple[int, int]:
    from PIL import Image

    return Image.open(io.BytesIO(png)).size


def region(png: bytes, left: float, right: float):
    """Pixels of the columns [left, right) (fractions of the width), below the figure's title."""
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    h, w, _ = img.shape
    return img[int(0.15 * h):, int(left * w):int(right * w)]


@pytest.mark.skipif(GEOMETRY not in ASSIGNMENTS, reason=f"{GEOMETRY} is not in this tree (or not selected)")
def test_geometry_widget_follows_bars_and_ignores_shift(executed):
    """Dragging a bar redraws every panel; moving the shift c redraws the input panel only.

    The widget (normlab.geometry.BarDragWidget) shows input | centred | LayerNorm panels in
    one PNG, left to right, when "show RMSNorm" is off. The shift c moves the input bars
    and the mean; the centred and LayerNorm panels (the right two thirds) stay the same
    pixel for pixel, and so do LayerNorm's readouts.
    """
    page, _ = executed(GEOMETRY)
    widget = page.locator(".jp-OutputArea-output", has=page.locator(".widget-label", has_text="shift c")).first
    assert widget.count(), "no output of 02_geometry holds the bar-drag widget (a slider labelled 'shift c')"
    bring_into_view(widget, "start", -150)  # the section heading above it too
    rms_box = widget.locator(".widget-checkbox", has_text="show RMSNorm").locator("input")
    if rms_box.is_checked():
        rms_box.click()
    image = widget.locator(".widget-image").first
    src = image.get_attribute("src") or ""
    time.sleep(0.5)
    screenshot(page, f"{GEOMETRY}-widget")
    before = widget_png(image)
    numbers = readout(widget)

    # A bar: focus the x1 slider's handle and press the up arrow (five steps of 0.1).
    x1 = widget.locator(".widget-vslider", has=page.locator(".widget-label", has_text="x1")).first
    handle = x1.locator(".noUi-handle").first
    handle.focus()
    for _ in range(5):
        page.keyboard.press("ArrowUp")
    src = wait_for_new_image(image, src)
    after_bar = widget_png(image)
    assert region(after_bar, 0.0, 0.3).tolist() != region(before, 0.0, 0.3).tolist(), "input panel did not move"
    assert region(after_bar, 0.7, 1.0).tolist() != region(before, 0.7, 1.0).tolist(), (
        "moving a bar did not change the LayerNorm panel")
    after_bar_numbers = readout(widget)
    assert after_bar_numbers != numbers, "the readouts did not follow the bar"

    # The shift c: focus its handle and press the right arrow (ten steps of 0.1).
    shift = widget.locator(".widget-hslider", has=page.locator(".widget-label", has_text="shift c")).first
    shift.locator(".noUi-handle").first.focus()
    for _ in range(10):
        page.keyboard.press("ArrowRight")
    wait_for_new_image(image, src)
    after_shift = widget_png(image)
    screenshot(page, f"{GEOMETRY}-widget-shifted")
    assert region(after_shift, 0.0, 0.3).tolist() != region(after_bar, 0.0, 0.3).tolist(), (
        "the input panel did not move with c")
    assert region(after_shift, 0.36, 1.0).tolist() == region(after_bar, 0.36, 1.0).tolist(), (
        "the centred or LayerNorm panel moved when only c changed")
    shifted_numbers = readout(widget)
    mean_label = next(k for k in shifted_numbers if k.startswith("μ"))
    assert shifted_numbers[mean_label] != after_bar_numbers[mean_label], "μ did not follow c"
    for label in after_bar_numbers:
        if label.startswith(("σ", "‖x̂‖", "d·σ")):
            assert shifted_numbers[label] == after_bar_numbers[label], f"{label} changed with c"

    # "show RMSNorm" adds a fourth panel (a wider picture) and its readouts.
    src = image.get_attribute("src")
    rms_box.click()
    wait_for_new_image(image, src)
    with_rms = widget_png(image)
    assert png_size(with_rms)[0] > png_size(after_shift)[0], "ticking 'show RMSNorm' did not add a panel"
    assert any("RMSNorm" in label for label in readout(widget)), "no RMSNorm readout after ticking the box"
    screenshot(page, f"{GEOMETRY}-widget-rms")
