"""The measured tables of docs/benchmarks.md, written by the bench commands themselves.

Each bench owns one section of the page, between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
(``bench-widget``: ``python -m normlab.bench_widget``; ``bench-grade``: ``python -m grader bench-grade``).
``write_section`` replaces what lies between one pair and nothing else, so re-running a bench with
``--markdown docs/benchmarks.md`` updates its tables and leaves the page's prose alone. Standard library
only: ``normlab`` (the learner side) uses it as well as the grading server.
"""
from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

SECTIONS = ("bench-widget", "bench-grade")
ROOT = Path(__file__).resolve().parents[1]


def begin_marker(name: str) -> str:
    return f"<!-- {name}:begin (written by the bench command: edits here are lost) -->"


def end_marker(name: str) -> str:
    return f"<!-- {name}:end -->"


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with the lines between ``name``'s markers replaced by ``body``.

    Fails closed: a page without exactly one begin and one end marker, in that order, is an error, not a
    page with a new section appended somewhere.
    """
    begin, end = begin_marker(name), end_marker(name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"expected one {begin!r} and then one {end!r} in the page")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body.strip()}\n{end}{tail}"


def section(text: str, name: str) -> str:
    """What lies between ``name``'s markers (stripped)."""
    begin, end = begin_marker(name), end_marker(name)
    if begin not in text or end not in text:
        raise ValueError(f"no {name} section in the page")
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def check_section(path: Path, name: str) -> None:
    """Raises unless ``path`` can take ``name``'s section: a bench calls it before measuring, not after."""
    replace_section(Path(path).read_text(encoding="utf-8"), name, "")


def write_section(path: Path, name: str, body: str) -> None:
    path = Path(path)
    path.write_text(replace_section(path.read_text(encoding="utf-8"), name, body), encoding="utf-8")


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """A markdown table; ``right[i]`` right-aligns column i (numbers)."""
    if not len(header) == len(right) or any(len(row) != len(header) for row in rows):
        raise ValueError("every row needs one cell per column")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            found = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
    except OSError:
        return platform.processor() or platform.machine()
    return found.group(1).strip() if found else platform.machine()


def provenance(command: str) -> str:
    """Which command ran, when, at which commit and on what: the line each section starts with.

    The load average at the start says whether the machine was quiet; "-dirty" after the commit, that
    the working tree differed from it.
    """
    load = f", load average {os.getloadavg()[0]:.1f} at the start" if hasattr(os, "getloadavg") else ""
    commit = _git("describe", "--always", "--dirty") or "unknown commit"
    now = datetime.datetime.now(datetime.timezone.utc)
    return (f"Measured by `{command}` on {now:%Y-%m-%d %H:%M} UTC at {commit}, "
            f"{os.cpu_count()} cores ({_cpu_model()}){load}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}.")


def widget_section(results: dict[str, dict], *, dpi: int, when: str) -> str:
    """The bar-drag widget's latency: ``results`` maps a mode ("drag", "jump") to ``measure``'s dict.

    Each dict holds latencies in ms ("all", "bars", "a_c": sequences of floats), "panel_draws",
    "full_draws", "png_bytes" and "size_px" (width, height).
    """
    rows, notes = [], []
    for mode, res in results.items():
        for key, label in (("all", "all moves"), ("bars", "the six bar sliders"), ("a_c", "a, c and ε")):
            ms = sorted(float(v) for v in res[key])
            rows.append([mode, label, str(len(ms)), f"{_percentile(ms, 50):.1f} ms", f"{_percentile(ms, 95):.1f} ms",
                         f"{ms[-1]:.1f} ms"])
        notes.append(f"{mode}: {res['panel_draws']} of {len(res['all'])} moves redrew the panels (a y-limit changed), "
                     f"{res['full_draws']} the whole figure; the rest only blitted the bars")
    width, height = next(iter(results.values()))["size_px"]
    png = next(iter(results.values()))["png_bytes"]
    return "\n".join([
        when, "",
        f"`BarDragWidget` at dpi {dpi} ({width} × {height} px, a PNG of {png / 1024:.0f} KiB), from setting a slider's "
        "value to the Image widget holding the new PNG (target: a median of 16 ms or less, one 60 Hz frame):", "",
        table(["moves", "controls", "n", "median", "p95", "max"], rows, [False, False, True, True, True, True]), "",
        "; ".join(notes) + ".",
    ])


def _percentile(ordered: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile of an ascending sequence, without numpy."""
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _upper_median(values: Sequence[float]) -> float:
    """The bench's median (the upper one of an even count), so the page says what the terminal said."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def grade_section(rows: Sequence, *, learners: int, when: str, isolation: str, jobs: str, identical: tuple[int, int],
                  hostile_points: tuple[float, float], patch_seconds: dict[str, float] | None = None) -> str:
    """``make bench-grade``'s result: one line per assignment, then the class.

    ``rows`` are ``grader.grading.run.bench.Row``-like: assignment, plain, ours, per_submission, fixed,
    regrade, serial (None without ``--jobs-scaling``), plain_feedback, in seconds. ``identical`` is
    (honest submissions scored the same by both graders, honest submissions); ``hostile_points`` the
    points hostile submissions got from (plain nbgrader, ``grader grade``); ``patch_seconds`` the class
    time with each speed patch off ("all on" first), from ``--compare-patches``.
    """
    scaling = any(r.serial for r in rows)
    header = ["assignment", "plain autograde", "plain autograde + feedback", "`grader grade`", "ratio to autograde",
              "ratio to autograde + feedback", "per submission beyond the fixed cost, ours", "fixed cost", "re-grade"]
    header += ["`--jobs 1` / default"] if scaling else []
    body = []
    for r in rows:
        both = r.plain + r.plain_feedback
        line = [r.assignment, f"{r.plain:.1f} s", f"{both:.1f} s", f"{r.ours:.1f} s", f"{r.plain / r.ours:.1f}×",
                f"{both / r.ours:.1f}×", f"{r.per_submission:.2f} s", f"{r.fixed:.1f} s", f"{r.regrade:.1f} s"]
        body.append(line + ([f"{r.serial / r.ours:.2f}×"] if scaling else []))
    total = learners * len(rows)
    plain = sum(r.plain for r in rows)
    both = plain + sum(r.plain_feedback for r in rows)
    ours = sum(r.ours for r in rows)
    line = [f"all {total}", f"{plain:.1f} s ({plain / total:.2f} s each)", f"{both:.1f} s ({both / total:.2f} s each)",
            f"{ours:.1f} s ({ours / total:.2f} s each)", f"**{plain / ours:.1f}×**", f"**{both / ours:.1f}×**",
            f"{_upper_median([r.per_submission for r in rows]):.2f} s (median)",
            f"{_upper_median([r.fixed for r in rows]):.1f} s (median)", f"{sum(r.regrade for r in rows):.1f} s"]
    body.append(line + ([f"{sum(r.serial for r in rows) / ours:.2f}×"] if scaling else []))
    parts = [when, "",
             f"{learners} learners × {len(rows)} notebooks (a quarter each correct, partial, wrong and hostile), "
             f"isolation `{isolation}`, {jobs}:", "",
             table(header, body, [False] + [True] * (len(header) - 1)), "",
             f"{identical[0]}/{identical[1]} honest submissions scored identically; hostile submissions got "
             f"{hostile_points[0]:.0f} points from plain nbgrader and {hostile_points[1]:.0f} from `grader grade`."]
    if patch_seconds:
        base = patch_seconds["all on"]
        patches = [[f"`{name}`" if name != "all" else "all (`--public-apis-only`)", f"{value:.1f} s",
                    f"{value / base:.3f}×"] for name, value in patch_seconds.items() if name != "all on"]
        parts += ["", f"Each speed patch switched off alone (`--compare-patches`), against {base:.1f} s with every "
                  "patch on (above 1: what the patch saves of a class run):", "",
                  table(["switched off", "class time", "ratio to all on"], patches, [False, True, True])]
    return "\n".join(parts)
