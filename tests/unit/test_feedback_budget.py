"""Feedback's boundaries, in-process: only the grader's pages stay in feedback/ (``feedback_pages.sweep``,
``clean_folder``), a page's CPU budget stops Python and the kernel stops what Python cannot
(``feedback_pages.Budget``), code highlighting is linear (``highlight_cache``), and a notebook's outputs are
bounded in all (``output_budget``). The integration test is tests/integration/test_budgets.py."""
import os
import re
import signal
import time
from pathlib import Path

import pytest

from grader.grading.feedback import highlight_cache, output_budget
from grader.grading.feedback import pages as feedback_pages
from grader.grading.feedback.pages import KEPT_FILES, Budget, OverBudget, clean_folder, sweep
from grader.grading.run.course_setup import load_config
from tests.conftest import ROOT

HOSTILE = "<script>alert('learner')</script>"
# every name a learner's file could have in feedback/ that a browser or release_feedback might serve
LEARNER_NAMES = ["evil.html", "evil.htm", "pic.svg", "run.js", "page.xhtml", "LOUD.HTML", "Mixed.Html", "noext",
                 ".hidden.html", "03_backward.ipynb", "03_backward_files/x.svg", "sub/deeper/page.html",
                 "sub/evil.htm", "timestamp.txt.html"]


def fill(folder: Path, outside: Path) -> None:
    """A feedback folder with the grader's page, the kept files, and every kind of learner file and link."""
    folder.mkdir(parents=True)
    (folder / "03_backward.html").write_text("<p>the grader's page</p>")
    (folder / "timestamp.txt").write_text("2024-01-01 00:00:00.000000 UTC\n")
    (folder / "submission_secret.txt").write_text("ab" * 64)
    for name in LEARNER_NAMES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(HOSTILE)
    (folder / "link.html").symlink_to(outside / "target.html")
    (folder / "folder_link").symlink_to(outside)
    (folder / "sub" / "dangling.html").symlink_to(outside / "missing.html")


@pytest.fixture
def course(tmp_path):
    root = tmp_path / "course"
    (root / "submitted" / "ann" / "03_backward").mkdir(parents=True)
    (root / "submitted" / "ann" / "03_backward" / "evil.html").write_text(HOSTILE)
    (root / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.html").write_text("keep me")
    return root, outside


def test_sweep_leaves_only_the_graders_pages(course):
    root, outside = course
    for student in ("ann", "bob"):
        fill(root / "feedback" / student / "03_backward", outside)
    (root / "feedback" / "cat").mkdir()
    (root / "feedback" / "cat" / "03_backward").symlink_to(root / "submitted" / "ann" / "03_backward")
    (root / "feedback" / "other_assignment").mkdir()
    (root / "feedback" / "other_assignment" / "x.html").write_text(HOSTILE)  # not a learner's folder of this one
    removed = sweep(load_config(root), root, "03_backward", ["03_backward"])
    assert removed
    for student in ("ann", "bob"):
        left = sorted(p.name for p in (root / "feedback" / student / "03_backward").iterdir())
        assert left == sorted(["03_backward.html", *KEPT_FILES])
    assert not os.path.lexists(root / "feedback" / "cat" / "03_backward")  # the link went, not its target
    assert (root / "submitted" / "ann" / "03_backward" / "evil.html").read_text() == HOSTILE
    assert (outside / "target.html").read_text() == "keep me"
    assert (root / "feedback" / "other_assignment" / "x.html").exists()


def test_sweep_refuses_a_feedback_directory_that_holds_the_class(course):
    root, outside = course
    config = load_config(root)
    config.CourseDirectory.feedback_directory = "submitted"  # an instructor's mistake: nothing may be deleted
    assert sweep(config, root, "03_backward", ["03_backward"]) == []
    assert (root / "submitted" / "ann" / "03_backward" / "evil.html").exists()
    (root / "feedback").symlink_to(root / "submitted")
    config.CourseDirectory.feedback_directory = "feedback"  # a link to it, the same
    assert sweep(config, root, "03_backward", ["03_backward"]) == []
    assert (root / "submitted" / "ann" / "03_backward" / "evil.html").exists()


def test_clean_folder_keeps_pages_of_the_notebooks_only(tmp_path):
    fill(tmp_path / "fb", tmp_path)
    clean_folder(tmp_path / "fb", ["03_backward"])
    assert sorted(p.name for p in (tmp_path / "fb").iterdir()) == sorted(["03_backward.html", *KEPT_FILES])


def test_plain_page_escapes_everything():
    page = feedback_pages.plain_page("nb<script>", "why <b>", [HOSTILE],
                                     (1.0, 2.0, [("t<i>", 1.0, 2.0)], [("c", HOSTILE)]))
    assert "<script" not in page and "<i>" not in page and "&lt;script&gt;" in page
    assert "1 / 2" in page


def _spin_python():
    while True:
        pass


@pytest.mark.parametrize("work", [_spin_python, lambda: re.match(r"(a+)+b", "a" * 40)],
                         ids=["python", "regex"])
def test_budget_stops_python_and_regexes(work):
    started = time.process_time()
    with pytest.raises(OverBudget):
        with Budget(0.5, None):
            work()
    assert time.process_time() - started < 5
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)


@pytest.mark.slow  # a real kernel killed by its budget (~4 s)
def test_budget_kernel_kills_what_python_cannot_stop():
    pid = os.fork()
    if pid == 0:  # a worker whose Python never sees the timer: the kernel's CPU limit ends it
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
        with Budget(0.5, None, grace=1):
            while True:
                pass
    started = time.monotonic()
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU
    assert time.monotonic() - started < 60


def test_budget_memory_becomes_over_budget_in_the_converter():
    with pytest.raises(MemoryError):
        with Budget(30, 256 * 2**20):
            bytearray(1024 * 2**20)
    bytearray(300 * 2**20)  # restored afterwards


def test_highlighting_long_lines_is_linear(monkeypatch):
    fresh = highlight_cache.MEMO
    monkeypatch.setattr(highlight_cache, "MEMO", type(fresh)(fresh.max_entries, fresh.max_kept_chars,
                                                             fresh.max_total_chars))
    highlighter = highlight_cache.highlighter_class()(pygments_lexer="ipython3")
    chain = "a" + ".a" * 60_000  # 120 kB: minutes for pygments' IPython lexer (quadratic in a line's length)
    started = time.process_time()
    for index in range(4):
        page = highlighter(chain + f"\n# {index}", "ipython3")
    assert time.process_time() - started < 5
    assert page.startswith('<div class=" highlight hl-ipython3"><pre><span></span>a.a.a')
    normal = "import numpy as np\nx = np.ones(3) < 2\n"
    assert '<span class="n">np</span>' in highlighter(normal, "ipython3")  # ordinary cells keep their colours
    highlight_cache.new_page(10)  # a page's budget spent: plain, and not memoised for the next page
    assert "&lt;" in highlighter("y = 1 < 2 # other", "ipython3") and 'class="o"' not in highlighter(
        "y = 1 < 2 # other", "ipython3")
    highlight_cache.new_page()
    assert 'class="o"' in highlighter("y = 1 < 2 # other", "ipython3")
    highlight_cache.new_page(None)


def test_output_budget_cuts_outputs_but_keeps_types():
    big = {"output_type": "stream", "name": "stdout", "text": "x" * 100_000}
    html = {"output_type": "display_data", "metadata": {}, "data": {"text/html": "<b>a</b>" * 10_000,
                                                                     "text/plain": "<HTML>"}}
    error = {"output_type": "error", "ename": "E", "evalue": "v" * 50_000, "traceback": ["t" * 50_000] * 10}
    result = {"cells": {str(i): [dict(big), dict(html), dict(error)] for i in range(40)}, "notes": []}
    bounded, note = output_budget.bound_outputs(result, 400_000)
    assert note and result["cells"]["39"][0]["text"] == "x" * 100_000  # the original is unchanged
    sizes = sum(output_budget._size(o) for outputs in bounded["cells"].values() for o in outputs)
    assert sizes < 400_000 + 120 * 1000
    for outputs in bounded["cells"].values():
        assert [o["output_type"] for o in outputs] == ["stream", "display_data", "error"]
    assert "text/html" not in bounded["cells"]["39"][1]["data"]
    assert output_budget.bound_outputs({"cells": {"0": [big]}}, 400_000) == ({"cells": {"0": [big]}}, None)


def _killed_by_its_budget(root: str) -> None:
    from grader.grading.run import feedback_work
    marker = feedback_work.feedback_marker(root, "03_backward", os.getpid())
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text('{"student": "ann", "started": 0}')
    os.kill(os.getpid(), signal.SIGXCPU)


def test_the_coordinator_names_the_learner_whose_worker_its_budget_killed(tmp_path):
    """A worker the kernel killed (SIGXCPU) is traced to its learner through its marker; a worker the broken
    pool terminated is not."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from types import SimpleNamespace

    from grader.grading.run.feedback_work import FeedbackWork

    pool = ProcessPoolExecutor(max_workers=2)
    try:
        with pytest.raises(BrokenProcessPool):
            pool.submit(_killed_by_its_budget, str(tmp_path)).result(timeout=60)
        for process in pool._processes.values():
            process.join(10)
        work = SimpleNamespace(root=tmp_path, assignment="03_backward", pool=pool)
        assert set(FeedbackWork.over_budget_workers(work).values()) == {"ann"}
    finally:
        pool.shutdown(wait=False)
