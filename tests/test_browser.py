"""A real browser: JupyterLab runs every solved notebook, and the geometry widget answers a drag.

One JupyterLab server (its own port, token, HOME and Jupyter folders, serving a temporary
copy of solutions/) and one headless Chromium, driven by Playwright, serve every test here.
Playwright cannot download its own browser on these machines: Debian's /usr/bin/chromium
is launched instead (`tools/ensure-chromium` installs it). Screenshots land in
test-artifacts/screenshots/ (git-ignored).
"""
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from tests.conftest import ASSIGNMENTS, ROOT, subprocess_env

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
VIEWPORT = {"width": 1440, "height": 900}
RUN_TIMEOUT_S = 300  # one notebook, Run All Cells until the kernel is idle again
GEOMETRY = "02_geometry"

# JupyterLab user settings: every cell in the DOM (so the error search sees them all), and no
# news or update checks (they would try to reach the network).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}

# Outputs JupyterLab renders with the stderr MIME type: stderr streams and error tracebacks.
STDERR_OUTPUTS = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group (server and kernels), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def chromium_path():
    if not os.path.exists(CHROMIUM):
        message = f"{CHROMIUM} is missing: run tools/ensure-chromium (as root it installs Debian's chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium_path):
    """JupyterLab serving a copy of the solved notebooks; yields (base_url, token, log_path)."""
    base = tmp_path_factory.mktemp("lab")
    notebooks = base / "notebooks"
    notebooks.mkdir()
    for assignment in ASSIGNMENTS:
        shutil.copy2(ROOT / "solutions" / f"{assignment}.ipynb", notebooks / f"{assignment}.ipynb")
    env = subprocess_env()
    env.pop("MPLBACKEND", None)  # as for a learner: the kernel's inline backend draws the figures
    env.pop("NBGRADER_EXECUTION", None)
    for name in list(env):
        if name.startswith(("JUPYTER", "JPY_")) or name == "PYTHONPATH":
            del env[name]
    env.update(HOME=str(base / "home"), JUPYTER_CONFIG_DIR=str(base / "config"),
               JUPYTER_DATA_DIR=str(base / "data"), JUPYTER_RUNTIME_DIR=str(base / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(base / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"))
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
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
            + (["--allow-root"] if os.geteuid() == 0 else []),
            cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"JupyterLab exited:\n{log_path.read_text()[-4000:]}"
            try:
                with urllib.request.urlopen(f"{base_url}/api/status?token={token}", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"JupyterLab did not answer in 120 s:\n{log_path.read_text()[-4000:]}"
            time.sleep(0.5)
        yield base_url, token, log_path
    finally:
        stop(process)


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True)
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


def run_all_cells(page) -> float:
    """Run → Run All Cells from the menu bar; wait until every code cell has run; return seconds."""
    n_code = page.locator(".jp-Notebook .jp-CodeCell").count()
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt")
    began = time.monotonic()
    for attempt in range(3):
        # Select the first cell, so the notebook is JupyterLab's current widget and the
        # Run menu's items are enabled (on a freshly loaded page they may not be yet).
        page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.click()
        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        item = page.locator(".lm-Menu-item:not(.lm-mod-disabled)", has_text="Run All Cells").first
        try:
            item.click(timeout=10_000)
        except Exception:  # Playwright's TimeoutError: the item stayed disabled
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


@pytest.fixture(scope="module")
def executed(browser, lab):
    """assignment -> page with the solved notebook run to the end (each run once, on demand)."""
    pages, timings = {}, {}

    def get(assignment):
        if assignment not in pages:
            began = time.monotonic()
            page = open_notebook(browser, lab, assignment)
            print(f"{assignment}: opened in {time.monotonic() - began:.1f} s")
            timings[assignment] = run_all_cells(page)
            pages[assignment] = page
        return pages[assignment], timings[assignment]

    return get


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solved_notebook_runs_clean_in_jupyterlab(executed, assignment):
    """Run All Cells in JupyterLab: every cell runs, none shows a traceback, an error or a warning."""
    page, seconds = executed(assignment)
    print(f"{assignment}: Run All Cells took {seconds:.1f} s in the browser")
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
