"""docs/benchmarks.md's measured tables come from the bench commands (grader.benchmarks_markdown), not a hand.

The writers are tested on given results, without running a benchmark; the page is tested for its markers.
"""
import re

import numpy as np
import pytest

from grader import benchmarks_markdown as bm
from grader.grading.run.bench import Row
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "benchmarks.md"
# Tables typed from a tool that writes no markdown: section name -> the tool. Every other table is written.
TYPED = {"gradescope": "tools/bench-gradescope"}


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every table row (header and separator excluded)."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def widget_result(ms_bars, ms_ac, panel_draws=3, full_draws=1):
    bars, a_c = np.array(ms_bars, float), np.array(ms_ac, float)
    return {"all": np.concatenate([bars, a_c]), "bars": bars, "a_c": a_c, "panel_draws": panel_draws,
            "full_draws": full_draws, "png_bytes": 30 * 1024, "size_px": (1014, 240)}


def test_widget_section_is_the_table_of_the_given_latencies():
    bars, a_c = [10.0, 12.0, 14.0, 40.0], [20.0, 30.0]
    text = bm.widget_section({"drag": widget_result(bars, a_c)}, dpi=80, when="Measured by `x` on a day.")
    assert text.startswith("Measured by `x` on a day.")
    assert "dpi 80 (1014 × 240 px, a PNG of 30 KiB)" in text
    everything = bars + a_c
    expected = {
        "all moves": everything, "the six bar sliders": bars, "a, c and ε": a_c}
    rows = table_rows(text)
    assert [r[1] for r in rows] == list(expected)
    for (mode, _label, n, median, p95, top), ms in zip(rows, expected.values(), strict=True):
        assert mode == "drag" and n == str(len(ms))
        assert median == f"{np.median(ms):.1f} ms"  # numpy's own percentile, to the digit printed
        assert p95 == f"{np.percentile(ms, 95):.1f} ms"
        assert top == f"{max(ms):.1f} ms"
    assert "3 of 6 moves redrew the panels" in text and "1 the whole figure" in text


def test_widget_section_has_one_block_of_rows_per_mode():
    results = {"drag": widget_result([10, 11], [12]), "jump": widget_result([50, 60], [70])}
    rows = table_rows(bm.widget_section(results, dpi=80, when="w"))
    assert [r[0] for r in rows] == ["drag"] * 3 + ["jump"] * 3
    assert rows[3][3] == "60.0 ms"  # jump, all moves: the median of 50, 60, 70


def grade_rows(serial=None):
    return [Row("01_bn_vs_ln", plain=200.0, ours=20.0, per_submission=0.3, fixed=5.0, regrade=8.0,
                serial=serial, plain_feedback=20.0),
            Row("03_backward", plain=100.0, ours=25.0, per_submission=0.5, fixed=4.0, regrade=6.0,
                serial=serial, plain_feedback=10.0)]


def test_grade_section_is_the_table_of_the_given_rows():
    text = bm.grade_section(grade_rows(), learners=10, when="Measured by `y`.", isolation="userns",
                            jobs="`--jobs 2`", identical=(14, 16), hostile_points=(30, 0))
    assert text.startswith("Measured by `y`.")
    assert "10 learners × 2 notebooks" in text and "isolation `userns`, `--jobs 2`" in text
    rows = table_rows(text)
    assert rows[0] == ["01_bn_vs_ln", "200.0 s", "220.0 s", "20.0 s", "10.0×", "11.0×", "0.30 s", "5.0 s", "8.0 s"]
    assert rows[1] == ["03_backward", "100.0 s", "110.0 s", "25.0 s", "4.0×", "4.4×", "0.50 s", "4.0 s", "6.0 s"]
    # the class: sums, per submission over 20 submissions, ratios of the sums (not of the rows' ratios), and
    # the bench's own median (the upper one of two)
    assert rows[2] == ["all 20", "300.0 s (15.00 s each)", "330.0 s (16.50 s each)", "45.0 s (2.25 s each)",
                       "**6.7×**", "**7.3×**", "0.50 s (median)", "5.0 s (median)", "14.0 s"]
    assert "14/16 honest submissions scored identically" in text
    assert "30 points from plain nbgrader and 0 from `grader grade`" in text
    assert "jobs 1" not in text and "switched off" not in text


def test_grade_section_adds_the_jobs_column_and_the_patch_table_when_measured():
    text = bm.grade_section(grade_rows(serial=30.0), learners=10, when="w", isolation="user", jobs="j",
                            identical=(16, 16), hostile_points=(30, 0),
                            patch_seconds={"all on": 45.0, "soup": 54.0, "all": 90.0})
    rows = table_rows(text.split("switched off alone")[0])
    assert [r[-1] for r in rows] == ["1.50×", "1.20×", "1.33×"]  # serial / ours, and 60 / 45 for the class
    patches = table_rows(text.split("switched off alone")[1])
    assert patches == [["`soup`", "54.0 s", "1.200×"], ["all (`--public-apis-only`)", "90.0 s", "2.000×"]]


PAGE_TEXT = "intro\n{b}\nold table\n{e}\nafter\n"


def page(name):
    return PAGE_TEXT.format(b=bm.begin_marker(name), e=bm.end_marker(name))


def test_replace_section_changes_only_what_lies_between_the_markers():
    text = page("bench-widget")
    new = bm.replace_section(text, "bench-widget", "| a |\n|---|\n| 1 |\n")
    begin, end = bm.begin_marker("bench-widget"), bm.end_marker("bench-widget")
    assert new == f"intro\n{begin}\n| a |\n|---|\n| 1 |\n{end}\nafter\n"
    assert bm.replace_section(new, "bench-widget", "| a |\n|---|\n| 1 |") == new  # idempotent
    assert bm.section(new, "bench-widget") == "| a |\n|---|\n| 1 |"


@pytest.mark.parametrize("text", [
    "no markers at all\n",
    page("bench-grade"),  # another section's markers
    page("bench-widget") + page("bench-widget"),  # twice
    f"{bm.end_marker('bench-widget')}\nx\n{bm.begin_marker('bench-widget')}\n",  # the wrong way round
])
def test_replace_section_refuses_a_page_without_one_pair_of_markers(text):
    with pytest.raises(ValueError, match="bench-widget"):
        bm.replace_section(text, "bench-widget", "body")


def test_the_widget_bench_refuses_a_page_without_markers_before_measuring(tmp_path, monkeypatch):
    from normlab import bench_widget

    def measure(*args, **kwargs):
        raise AssertionError("measured before checking the page")

    monkeypatch.setattr(bench_widget, "measure", measure)
    target = tmp_path / "page.md"
    target.write_text("a page without markers\n")
    with pytest.raises(ValueError, match="bench-widget"):
        bench_widget.main(["--markdown", str(target)])
    assert target.read_text() == "a page without markers\n"


def test_the_widget_bench_writes_its_section(tmp_path, monkeypatch):
    from normlab import bench_widget

    monkeypatch.setattr(bench_widget, "measure", lambda n, mode, dpi, show_rms: widget_result([10, 20], [30]))
    target = tmp_path / "page.md"
    target.write_text(page("bench-widget"))
    bench_widget.main(["--mode", "both", "--markdown", str(target)])
    written = bm.section(target.read_text(), "bench-widget")
    assert written.startswith("Measured by `python -m normlab.bench_widget --mode both --markdown ")
    assert [r[0] for r in table_rows(written)] == ["drag"] * 3 + ["jump"] * 3
    assert target.read_text().startswith("intro\n") and target.read_text().endswith("\nafter\n")


def test_the_grading_bench_refuses_a_page_without_markers_before_building_a_class(tmp_path, monkeypatch):
    from grader.grading.run import bench

    def course_root():
        raise AssertionError("started building the class before checking the page")

    monkeypatch.setattr(bench, "course_root", course_root)
    target = tmp_path / "page.md"
    target.write_text(page("bench-widget"))
    with pytest.raises(ValueError, match="bench-grade"):
        bench.main(["--markdown", str(target)])


def test_every_measured_table_of_the_page_lies_between_markers_a_writer_owns():
    text = PAGE.read_text(encoding="utf-8")
    for name in bm.SECTIONS:
        body = bm.section(text, name)  # each section present, exactly once (replace_section checks)
        bm.replace_section(text, name, body)
        assert body.startswith("Measured by `"), f"{name}: not what the writer writes"
        assert table_rows(body), f"{name}: no table"
    outside = text
    for name in bm.SECTIONS:
        outside = outside.replace(bm.section(text, name), "")
    for name, tool in TYPED.items():
        typed = re.search(rf"<!-- {name}:typed from {re.escape(tool)}.*?<!-- {name}:end -->", outside, re.S)
        assert typed, f"the {name} table is not marked as typed from {tool}"
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", typed.group(0)), f"the {name} table is not dated"
        outside = outside.replace(typed.group(0), "")
    assert not [line for line in outside.splitlines() if line.startswith("|")], \
        "a table in docs/benchmarks.md outside the sections the bench commands write"
