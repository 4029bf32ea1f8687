"""``python -m grader report ASSIGNMENT``: what a class got wrong, from its last grading.

Reads, never writes, two things the grading left behind:

- the validated results of the last ``grader grade`` run
  (``build/grading/<assignment>/results/<student>/<notebook>.json``, checked as the record
  phase checks them, ``grader.grading.run.results``): which tests each learner passed, and the catalogue
  ids (``grader.catalogue``) of the diagnoses of the ones they failed;
- the attempt log inside each submitted notebook (``submitted/<student>/<assignment>/``,
  read through the same guarded reader as the intake, then ``grader.attempts``): how often
  learners ran each exercise's checks and how far up its hint ladder they went.

and writes ``build/reports/<assignment>.html`` (self-contained: no script, no external
resource, every text escaped, two plots as PNG data URIs), ``.csv`` (cells that a
spreadsheet would run as a formula neutralised) and ``.json``:

- the pass rate of each test cell;
- the prevalence of each misconception among the learners (count, %, Wilson score 95 %
  interval), with its teaching note;
- which mistakes occur together (pairs: count, and lift = P(a and b) / (P(a) P(b)));
- per exercise, the check runs and the highest hint level of the learners who used them
  (median and quartiles).

Privacy by default: no learner id appears in any output, and a group of fewer than
``MIN_GROUP`` learners (a misconception's count, a pair, an exercise's attempt figures, the
pass rates of a class that small) is shown as "< 5", with no exact count, percentage,
interval or lift. ``--identify`` shows exact figures and, per learner, what was diagnosed.
Anything unreadable, malformed or hostile is skipped and counted, never fatal.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import itertools
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

MIN_GROUP = 5  # smaller groups are shown as "< 5" unless --identify
SUPPRESSED = f"< {MIN_GROUP}"
Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal distribution
MAX_PAIRS = 100  # rows of the co-occurrence table
MAX_PLOTTED = 30  # bars per plot
MAX_LEVEL = 1000  # a hint level above this is not a level
MAX_RECORDS = 100_000  # attempt records taken from one notebook
ATTEMPT_MIME = b"application/vnd.lncourse.attempt+json"  # grader.attempts' output type: no log without it


# ------------------------------------------------------------------ statistics
def wilson(count: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion ``count / n`` (Newcombe 1998, method 3).

    (0.0, 1.0) when ``n`` is 0 (nothing is known).
    """
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= count <= n:
        raise ValueError(f"count {count} outside 0..{n}")
    p = count / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    low = 0.0 if count == 0 else max(0.0, centre - half)  # exactly 0 and 1 at the ends, not rounding noise
    high = 1.0 if count == n else min(1.0, centre + half)
    return low, high


def quartiles(values: list[float]) -> dict:
    """Median and quartiles (linear interpolation between order statistics, numpy's default)."""
    import numpy as np

    q1, median, q3 = (float(v) for v in np.percentile(np.asarray(values, dtype=float), [25, 50, 75]))
    return {"q1": q1, "median": median, "q3": q3}


# ------------------------------------------------------------------ reading the grading
SKIP_REASONS = [  # (words of grader.grading.run.results.load's message, the category counted)
    ("no result was produced", "not a regular file"),
    ("too large", "too large"),
    ("unreadable", "unreadable"),
    ("malformed", "malformed"),
    ("does not belong", "for another learner, notebook or assignment"),
]


def _skip_category(problem: str) -> str:
    return next((category for words, category in SKIP_REASONS if words in problem), "invalid")


def read_results(results_dir: Path, assignment: str) -> tuple[dict, Counter]:
    """student -> {notebook: result} of every valid result, and the skipped ones counted by reason.

    Validated like the record phase (``grader.grading.run.results.load``: schema, the learner, notebook and
    assignment the result says it is for); a symlinked folder or file is never followed.
    """
    from grader.grading.run import results
    found: dict[str, dict[str, dict]] = {}
    skipped: Counter = Counter()
    try:
        entries = sorted(os.scandir(results_dir), key=lambda e: e.name)
    except OSError:
        return found, skipped
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            skipped["not a folder of results"] += 1
            continue
        try:
            files = sorted(os.scandir(entry.path), key=lambda e: e.name)
        except OSError:
            skipped["unreadable"] += 1
            continue
        for file in files:
            if not file.name.endswith(".json"):
                continue  # results.write's temporary files
            notebook = file.name[: -len(".json")]
            result, problem = results.load(Path(file.path), {"assignment": assignment, "student": entry.name,
                                                              "notebook": notebook})
            if result is None:
                skipped[_skip_category(problem or "")] += 1
            else:
                found.setdefault(entry.name, {})[notebook] = result
    return found, skipped


def exercises_of(root: Path, assignment: str) -> tuple[list[str], dict[str, str]]:
    """The assignment's exercises (solution cells' grade_ids, in order) and test -> exercise,
    from the instructor's notebooks (source/, else release/)."""
    import nbformat

    exercises: list[str] = []
    test_exercise: dict[str, str] = {}
    for folder in (root / "source" / assignment, root / "release" / assignment):
        paths = sorted(folder.glob("*.ipynb"))
        if not paths:
            continue
        for path in paths:
            try:
                nb = nbformat.read(path, as_version=4)
            except Exception:  # noqa: BLE001 - an instructor's notebook that does not read: no exercise names
                continue
            current = None
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader", {})
                if not isinstance(meta, dict) or not isinstance(meta.get("grade_id"), str):
                    continue
                if meta.get("solution"):
                    current = meta["grade_id"]
                    if current not in exercises:
                        exercises.append(current)
                elif meta.get("grade") and cell.cell_type == "code" and current:
                    test_exercise[meta["grade_id"]] = current
        break
    return exercises, test_exercise


# ------------------------------------------------------------------ reading the attempt logs
def read_attempt_logs(root: Path, assignment: str, students: list[str], notebooks: list[str],
                      exercises: list[str]) -> tuple[dict | None, Counter, str | None]:
    """student -> [valid, deduplicated attempt records] of the learners whose submitted
    notebooks hold any, the notebooks skipped counted by reason, and why there are no
    logs at all (``grader.attempts`` missing) or None.

    Each notebook is read as the intake reads it: never through a link, only a regular file,
    at most ``intake.MAX_NOTEBOOK_BYTES``, UTF-8 JSON nested at most ``intake.MAX_JSON_DEPTH``
    deep. Only records of this assignment's exercises are kept.
    """
    try:
        from grader.attempts import read_attempts
    except ImportError as error:
        return None, Counter(), f"the attempt logs could not be read: grader.attempts is not available ({error})"
    from grader.grading.run import intake
    known = set(exercises)
    logs: dict[str, list[dict]] = {}
    skipped: Counter = Counter()
    for student in students:
        try:
            folder = intake.open_submission(root, student, assignment)
        except intake.Missing:
            skipped["no submitted folder"] += 1
            continue
        except (intake.Unreadable, OSError):
            skipped["submitted folder unreadable"] += 1
            continue
        records: dict[tuple, dict] = {}
        try:
            for notebook in notebooks:
                try:
                    raw = intake.read_regular(folder, f"{notebook}.ipynb", intake.MAX_NOTEBOOK_BYTES)
                    if ATTEMPT_MIME not in raw:
                        continue  # no attempt log: not worth parsing
                    document = load_json(raw)
                except intake.Missing:
                    skipped["no submitted notebook"] += 1
                    continue
                except (intake.Unreadable, OSError):
                    skipped["notebook not a readable regular file"] += 1
                    continue
                except intake.Rejected:
                    skipped["notebook not valid JSON"] += 1
                    continue
                try:
                    found = read_attempts(document)
                except Exception:  # noqa: BLE001 - read_attempts should never raise; if it does, skip
                    skipped["attempt log unreadable"] += 1
                    continue
                bad = 0
                for record in list(found)[:MAX_RECORDS] if isinstance(found, list) else []:
                    clean = _valid_record(record, known)
                    if clean is None:
                        bad += 1
                    else:
                        records.setdefault((clean["exercise"], clean["kind"], clean["check"], clean["time"]), clean)
                if bad:
                    skipped["attempt records malformed"] += bad
        finally:
            os.close(folder)
        if records:
            logs[student] = list(records.values())
    return logs, skipped, None


def load_json(raw: bytes):
    """The JSON value of a learner's notebook, with the intake's bounds (UTF-8, at most
    ``intake.MAX_JSON_VALUES`` values, nested at most as deep as the interpreter allows, no
    huge integers, no NaN); raises ``intake.Rejected``. Lighter than ``intake.parse_json``: the
    report uses only validated records, so strings need no repair."""
    from grader.grading.run import intake
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise intake.Rejected("is not UTF-8 text") from None
    if sum(text.count(c) for c in ",[{") > intake.MAX_JSON_VALUES:
        raise intake.Rejected("holds too many JSON values")
    try:
        return json.loads(text, parse_int=intake.json_int, parse_float=intake.json_float,
                          parse_constant=lambda _: None)
    except (RecursionError, ValueError):
        raise intake.Rejected("is not valid JSON") from None


def _valid_record(record, exercises: set[str]) -> dict | None:
    """The fields the report uses, or None for a record that is not one of this assignment's."""
    if not isinstance(record, dict):
        return None
    exercise, kind, check = record.get("exercise"), record.get("kind"), record.get("check")
    when, level = record.get("time"), record.get("level")
    if type(exercise) is not str or exercise not in exercises or kind not in ("check", "hint"):
        return None
    if check is not None and (type(check) is not str or len(check) > 200):
        return None
    if type(when) not in (int, float) or not math.isfinite(when):
        return None
    if level is not None and (type(level) is not int or not 0 <= level <= MAX_LEVEL):
        return None
    return {"exercise": exercise, "kind": kind, "check": check, "time": float(when), "level": level}


# ------------------------------------------------------------------ the analysis
def _named(mid: str) -> dict:
    from grader import catalogue

    entry = catalogue.get(mid)
    if entry is None:
        return {"id": mid, "name": mid, "concept": "", "note": "", "catalogued": False}
    return {"id": mid, "name": entry.name, "concept": entry.concept, "note": entry.note, "catalogued": True}


def _group(count: int, n: int, identify: bool) -> dict:
    """A count of learners out of n, suppressed below MIN_GROUP unless identify."""
    if count < MIN_GROUP and not identify:
        return {"count": SUPPRESSED, "percent": None, "ci_low": None, "ci_high": None}
    low, high = wilson(count, n)
    return {"count": count, "percent": 100 * count / n if n else None, "ci_low": 100 * low, "ci_high": 100 * high}


def analyse(assignment: str, results_by_student: dict, skipped_results: Counter, logs: dict | None,
            skipped_logs: Counter, logs_problem: str | None, exercises: list[str], test_exercise: dict,
            identify: bool = False) -> dict:
    """The report as data (what the .json holds; the .html and .csv are drawn from it)."""
    from grader import catalogue
    from grader.grading.run.results import PASSED

    students = sorted(results_by_student)
    n = len(students)
    small_class = n < MIN_GROUP and not identify
    # -- tests
    tests: dict[tuple[str, str], Counter] = {}
    learner_ids: dict[str, set] = {}
    id_tests: dict[str, Counter] = {}
    for student in students:
        learner_ids[student] = set()
        for notebook, result in sorted(results_by_student[student].items()):
            for test, entry in result["tests"].items():
                tally = tests.setdefault((notebook, test), Counter())
                tally["learners"] += 1
                tally["passed"] += entry["status"] == PASSED
                if entry["status"] != PASSED:
                    for mid in entry.get("misconceptions", []):
                        learner_ids[student].add(mid)
                        id_tests.setdefault(mid, Counter())[test] += 1
    test_rows = []
    for (notebook, test), tally in sorted(tests.items(), key=lambda item: _test_order(item[0], test_exercise,
                                                                                     exercises)):
        row = {"notebook": notebook, "test": test, "exercise": test_exercise.get(test, ""),
               "learners": tally["learners"]}
        if small_class:
            row.update(passed=SUPPRESSED, percent=None, ci_low=None, ci_high=None)
        else:
            low, high = wilson(tally["passed"], tally["learners"])
            row.update(passed=tally["passed"], percent=100 * tally["passed"] / tally["learners"],
                       ci_low=100 * low, ci_high=100 * high)
        test_rows.append(row)
    # -- misconceptions
    counts = Counter(mid for ids in learner_ids.values() for mid in ids)
    order = {mid: i for i, mid in enumerate(catalogue.all_misconceptions())}
    misconceptions = []
    for mid, count in sorted(counts.items(), key=lambda item: (-item[1], order.get(item[0], len(order)), item[0])):
        row = {**_named(mid), "learners": n, **_group(count, n, identify),
               "tests": [t for t, _ in id_tests[mid].most_common(5)]}
        misconceptions.append(row)
    seen = set(counts)
    unseen = [_named(m.id) for m in catalogue.for_notebook(assignment) if m.id not in seen]
    # -- pairs
    pair_counts = Counter(pair for ids in learner_ids.values() for pair in itertools.combinations(sorted(ids), 2))
    pairs = []
    for (a, b), count in sorted(pair_counts.items(), key=lambda item: (-item[1], item[0])):
        row = {"a": a, "b": b, "name_a": _named(a)["name"], "name_b": _named(b)["name"], "learners": n,
               **_group(count, n, identify), "lift": None}
        if row["count"] != SUPPRESSED:
            row["lift"] = n * count / (counts[a] * counts[b])
        pairs.append(row)
    pairs_shown = pairs[:MAX_PAIRS]
    # -- attempt logs
    attempts = []
    if logs is not None:
        for exercise in exercises:
            used = [records for records in logs.values() if any(r["exercise"] == exercise for r in records)]
            checks = [sum(r["kind"] == "check" for r in records if r["exercise"] == exercise) for records in used]
            hints = [max([r["level"] for r in records if r["exercise"] == exercise and r["kind"] == "hint"
                          and r["level"] is not None], default=0) for records in used]
            row = {"exercise": exercise, "learners": len(used)}
            if not used:
                row.update(checks=None, hints=None)
            elif len(used) < MIN_GROUP and not identify:
                row.update(learners=SUPPRESSED, checks=None, hints=None)
            else:
                row.update(checks=quartiles(checks), hints=quartiles(hints))
            attempts.append(row)
    document = {
        "assignment": assignment,
        "learners": n,
        "identified": identify,
        "min_group": MIN_GROUP,
        "skipped_results": dict(sorted(skipped_results.items())),
        "tests": test_rows,
        "misconceptions": misconceptions,
        "misconceptions_not_seen": unseen,
        "pairs": pairs_shown,
        "pairs_not_shown": len(pairs) - len(pairs_shown),
        "attempts": attempts,
        "attempt_learners": None if logs is None else (len(logs) if identify or len(logs) >= MIN_GROUP or not logs
                                                       else SUPPRESSED),
        "attempts_problem": logs_problem,
        "skipped_notebooks": dict(sorted(skipped_logs.items())),
    }
    # what the grader saw but could not prove: named per learner (the instructor decides; no points hang on it)
    document["flags"] = [{"learner": student, "notebook": notebook, "test": flag["test"], "check": flag["check"],
                          "seen": flag["seen"]}
                         for student in students for notebook, result in sorted(results_by_student[student].items())
                         for flag in result.get("flags", [])]
    if identify:
        document["by_learner"] = {s: {"misconceptions": sorted(learner_ids[s]),
                                      "failed": sorted(t for r in results_by_student[s].values()
                                                       for t, e in r["tests"].items() if e["status"] != PASSED)}
                                  for s in students}
    return document


def _test_order(key: tuple[str, str], test_exercise: dict, exercises: list[str]):
    notebook, test = key
    exercise = test_exercise.get(test)
    return notebook, exercises.index(exercise) if exercise in exercises else len(exercises), test


# ------------------------------------------------------------------ plots
def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plots(document: dict) -> dict[str, str | None]:
    """PNG data URIs: prevalence of each misconception with its interval; pass rate per test."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    out: dict[str, str | None] = {"prevalence": None, "pass_rate": None}
    with matplotlib.rc_context({"text.parse_math": False, "font.size": 9, "svg.hashsalt": "report"}):
        rows = [r for r in document["misconceptions"] if r["percent"] is not None][:MAX_PLOTTED]
        if rows:
            figure, axes = plt.subplots(figsize=(8, 0.8 + 0.32 * len(rows)))
            labels = [_short(f"{r['name']} [{r['id']}]") if r["catalogued"] else r["id"] for r in rows]
            values = [r["percent"] for r in rows]
            errors = [[v - r["ci_low"] for v, r in zip(values, rows, strict=True)],
                      [r["ci_high"] - v for v, r in zip(values, rows, strict=True)]]
            axes.barh(range(len(rows)), values, xerr=errors, color="#c0504d", ecolor="#333333", capsize=3)
            axes.set_yticks(range(len(rows)), labels)
            axes.invert_yaxis()
            axes.set_xlabel("% of learners (bars: Wilson 95 % interval)")
            axes.set_xlim(0, min(100, max(r["ci_high"] for r in rows) * 1.1 + 1))
            axes.grid(axis="x", alpha=0.3)
            out["prevalence"] = _png(figure)
            plt.close(figure)
        rows = [r for r in document["tests"] if r["percent"] is not None][:MAX_PLOTTED]
        if rows:
            figure, axes = plt.subplots(figsize=(8, 0.8 + 0.32 * len(rows)))
            values = [r["percent"] for r in rows]
            errors = [[v - r["ci_low"] for v, r in zip(values, rows, strict=True)],
                      [r["ci_high"] - v for v, r in zip(values, rows, strict=True)]]
            axes.barh(range(len(rows)), values, xerr=errors, color="#4f81bd", ecolor="#333333", capsize=3)
            axes.set_yticks(range(len(rows)), [_short(r["test"]) for r in rows])
            axes.invert_yaxis()
            axes.set_xlim(0, 100)
            axes.set_xlabel("% of learners who passed (bars: Wilson 95 % interval)")
            axes.grid(axis="x", alpha=0.3)
            out["pass_rate"] = _png(figure)
            plt.close(figure)
    return out


# ------------------------------------------------------------------ writing
def e(value) -> str:
    """Any value as escaped HTML text."""
    return html.escape("" if value is None else str(value), quote=True)


def _pct(value) -> str:
    return "" if value is None else f"{value:.1f} %"


def _interval(row: dict) -> str:
    return "" if row.get("ci_low") is None else f"{row['ci_low']:.1f} – {row['ci_high']:.1f} %"


def _spread(stats: dict | None) -> str:
    if not stats:
        return ""
    return f"{stats['median']:g} ({stats['q1']:g} – {stats['q3']:g})"


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 70em;
       padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; vertical-align: top; text-align: left; }
th { background: #f3f3f3; } td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
code { background: #f5f5f5; padding: 0 0.2em; } .note { color: #444; font-size: 0.92em; }
.muted { color: #777; } img { max-width: 100%; }
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def render_html(document: dict, images: dict) -> str:
    d = document
    n = d["learners"]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>Class report: {e(d['assignment'])}</title><style>{STYLE}</style></head><body>",
        f"<h1>Class report: <code>{e(d['assignment'])}</code></h1>",
        f"<p>{e(n)} learner(s) with a valid result from the last grading.",
    ]
    skipped = sum(d["skipped_results"].values())
    if skipped:
        reasons = ", ".join(f"{e(k)}: {e(v)}" for k, v in d["skipped_results"].items())
        parts.append(f" {e(skipped)} result file(s) skipped ({reasons}).")
    parts.append("</p>")
    if not d["identified"]:
        parts.append(f'<p class="note">Privacy: no learner is named, and any group of fewer than {MIN_GROUP} learners '
                     f"is shown as “{e(SUPPRESSED)}” (no count, percentage, interval or lift). "
                     "<code>--identify</code> shows exact figures and names.</p>")
    # tests
    parts.append("<h2>Pass rate per test</h2>")
    if images.get("pass_rate"):
        parts.append(f'<p><img alt="Pass rate per test cell" src="{e(images["pass_rate"])}"></p>')
    parts.append("<table><tr><th>test</th><th>exercise</th><th>notebook</th><th>passed</th><th>of</th>"
                 "<th>pass rate</th><th>95 % interval</th></tr>")
    for row in d["tests"]:
        parts.append(f"<tr><td><code>{e(row['test'])}</code></td><td>{e(row['exercise'])}</td>"
                     f"<td>{e(row['notebook'])}</td><td class=\"num\">{e(row['passed'])}</td>"
                     f"<td class=\"num\">{e(row['learners'])}</td><td class=\"num\">{e(_pct(row['percent']))}</td>"
                     f"<td class=\"num\">{e(_interval(row))}</td></tr>")
    parts.append("</table>")
    # misconceptions
    parts.append("<h2>Misconceptions</h2>")
    parts.append("<p>Each failed test names the mistakes its diagnosis recognised; a learner counts once per "
                 "misconception, whichever tests found it.</p>")
    if images.get("prevalence"):
        parts.append(f'<p><img alt="Prevalence of each misconception with its 95 % interval" '
                     f'src="{e(images["prevalence"])}"></p>')
    if d["misconceptions"]:
        parts.append("<table><tr><th>misconception</th><th>learners</th><th>%</th><th>95 % interval</th>"
                     "<th>found by</th><th>teaching note</th></tr>")
        for row in d["misconceptions"]:
            code = f"<code>{e(row['id'])}</code>"
            name = f"{e(row['name'])}<br>{code}" if row["catalogued"] else code
            concept = f'<br><span class="muted">{e(row["concept"])}</span>' if row["concept"] else ""
            parts.append(f"<tr><td>{name}</td><td class=\"num\">{e(row['count'])}</td>"
                         f"<td class=\"num\">{e(_pct(row['percent']))}</td><td class=\"num\">{e(_interval(row))}</td>"
                         f"<td>{'<br>'.join(f'<code>{e(t)}</code>' for t in row['tests'])}</td>"
                         f"<td class=\"note\">{e(row['note'])}{concept}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>No diagnosis named a misconception.</p>")
    if d["misconceptions_not_seen"]:
        parts.append("<p class=\"note\">Catalogued for this notebook but not diagnosed in anyone: "
                     + ", ".join(f"{e(m['name'])} (<code>{e(m['id'])}</code>)" for m in d["misconceptions_not_seen"])
                     + ".</p>")
    # pairs
    parts.append("<h2>Mistakes that occur together</h2>")
    if d["pairs"]:
        parts.append("<p>Lift = P(both) / (P(first) × P(second)): above 1, the two occur together more often than "
                     "they would by chance.</p>")
        parts.append("<table><tr><th>first</th><th>second</th><th>learners with both</th><th>lift</th></tr>")
        for row in d["pairs"]:
            lift = "" if row["lift"] is None else f"{row['lift']:.2f}"
            parts.append(f"<tr><td>{e(row['name_a'])}<br><code>{e(row['a'])}</code></td>"
                         f"<td>{e(row['name_b'])}<br><code>{e(row['b'])}</code></td>"
                         f"<td class=\"num\">{e(row['count'])}</td><td class=\"num\">{e(lift)}</td></tr>")
        parts.append("</table>")
        if d["pairs_not_shown"]:
            parts.append(f"<p class=\"muted\">{e(d['pairs_not_shown'])} rarer pair(s) not shown.</p>")
    else:
        parts.append("<p>No learner had two misconceptions diagnosed.</p>")
    # attempts
    parts.append("<h2>Working with the checks (attempt logs)</h2>")
    if d["attempts_problem"]:
        parts.append(f"<p>{e(d['attempts_problem'])}</p>")
    else:
        parts.append(f"<p>From the attempt logs in the submitted notebooks ({e(d['attempt_learners'])} learner(s) with "
                     "a log): per exercise, over the learners who ran its checks or asked for its hints, the check "
                     "runs and the highest hint level, as median (first – third quartile).</p>")
        parts.append("<table><tr><th>exercise</th><th>learners</th><th>check runs</th><th>highest hint level</th></tr>")
        for row in d["attempts"]:
            parts.append(f"<tr><td><code>{e(row['exercise'])}</code></td><td class=\"num\">{e(row['learners'])}</td>"
                         f"<td class=\"num\">{e(_spread(row['checks']))}</td>"
                         f"<td class=\"num\">{e(_spread(row['hints']))}</td></tr>")
        parts.append("</table>")
        skipped = sum(d["skipped_notebooks"].values())
        if skipped:
            parts.append("<p class=\"muted\">Skipped: " + ", ".join(f"{e(k)}: {e(v)}"
                                                                      for k, v in d["skipped_notebooks"].items())
                         + ".</p>")
    parts.append("<h2>Flags: seen, not proven</h2>")
    if d.get("flags"):
        parts.append("<p>What the grader saw while it called these learners' functions, but cannot prove: it was "
                     "reported by, or measured in, the learner's own process, which the learner's code controls. "
                     "No points depend on it; look at the notebook and decide (docs/instructors.md, "
                     "<i>What the grader proves</i>).</p>")
        parts.append("<table><tr><th>learner</th><th>notebook</th><th>test</th><th>check</th><th>seen</th></tr>")
        for row in d["flags"]:
            parts.append(f"<tr><td>{e(row['learner'])}</td><td>{e(row['notebook'])}</td>"
                         f"<td><code>{e(row['test'])}</code></td><td>{e(row['check'])}</td>"
                         f"<td class=\"note\">{e(row['seen'])}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>None: no library norm was seen called by a graded function, and no memory measurement "
                     "went over its budget.</p>")
    if d.get("by_learner") is not None:
        parts.append("<h2>Per learner</h2><table><tr><th>learner</th><th>misconceptions</th><th>failed tests</th></tr>")
        for student, row in d["by_learner"].items():
            ids = "<br>".join(f"<code>{e(m)}</code>" for m in row["misconceptions"])
            failed = "<br>".join(f"<code>{e(t)}</code>" for t in row["failed"])
            parts.append(f"<tr><td>{e(student)}</td><td>{ids}</td><td>{failed}</td></tr>")
        parts.append("</table>")
    parts.append("<h2>Method</h2><p class=\"note\">Intervals are Wilson score 95 % intervals (Newcombe 1998). "
                 "Only results that pass the record phase's validation are counted; learners are those with at least "
                 "one valid result. Made by <code>python -m grader report</code>.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


CSV_COLUMNS = ["section", "notebook", "id", "name", "count", "learners", "percent", "ci_low", "ci_high", "lift",
               "median", "q1", "q3", "note"]


def neutralise(value) -> str:
    """A CSV cell a spreadsheet will not run: text starting with = + - @ (or a tab or return) gets a "'"."""
    text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def render_csv(document: dict) -> str:
    d = document
    rows = []
    for row in d["tests"]:
        rows.append({"section": "test", "notebook": row["notebook"], "id": row["test"], "name": row["exercise"],
                     "count": row["passed"], "learners": row["learners"], "percent": row["percent"],
                     "ci_low": row["ci_low"], "ci_high": row["ci_high"]})
    for row in d["misconceptions"]:
        rows.append({"section": "misconception", "id": row["id"], "name": row["name"], "count": row["count"],
                     "learners": row["learners"], "percent": row["percent"], "ci_low": row["ci_low"],
                     "ci_high": row["ci_high"], "note": row["note"]})
    for row in d["pairs"]:
        rows.append({"section": "pair", "id": f"{row['a']} & {row['b']}", "name": f"{row['name_a']} & {row['name_b']}",
                     "count": row["count"], "learners": row["learners"], "lift": row["lift"]})
    for row in d["attempts"]:
        for kind in ("checks", "hints"):
            stats = row[kind] or {}
            rows.append({"section": f"attempts_{kind}", "id": row["exercise"], "learners": row["learners"],
                         "median": stats.get("median"), "q1": stats.get("q1"), "q3": stats.get("q3")})
    for reason, count in d["skipped_results"].items():
        rows.append({"section": "skipped_result", "id": reason, "count": count})
    for reason, count in d["skipped_notebooks"].items():
        rows.append({"section": "skipped_notebook", "id": reason, "count": count})
    for student, row in (d.get("by_learner") or {}).items():
        rows.append({"section": "learner", "id": student, "name": " ".join(row["misconceptions"]),
                     "note": " ".join(row["failed"])})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow([neutralise(row.get(column)) for column in CSV_COLUMNS])
    return buffer.getvalue()


def _write(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def build_report(root: Path, assignment: str, identify: bool = False, out: Path | None = None) -> dict:
    """Read the last grading of ``assignment`` and write the three files; returns the document
    plus where it went (``"files"``) and how long it took (``"seconds"``)."""
    from grader.grading.run.intake import expected_notebooks

    started = time.monotonic()
    results_by_student, skipped_results = read_results(root / "build" / "grading" / assignment / "results", assignment)
    exercises, test_exercise = exercises_of(root, assignment)
    notebooks = sorted({nb for per in results_by_student.values() for nb in per}
                       | set(expected_notebooks(root, assignment)))
    logs, skipped_logs, problem = read_attempt_logs(root, assignment, sorted(results_by_student), notebooks, exercises)
    document = analyse(assignment, results_by_student, skipped_results, logs, skipped_logs, problem, exercises,
                       test_exercise, identify)
    images = plots(document)
    out = Path(out or root / "build" / "reports")
    out.mkdir(parents=True, exist_ok=True)
    files = {suffix: out / f"{assignment}.{suffix}" for suffix in ("html", "csv", "json")}
    _write(files["json"], json.dumps(document, indent=1, ensure_ascii=True, allow_nan=False) + "\n")
    _write(files["csv"], render_csv(document))
    _write(files["html"], render_html(document, images))
    return {**document, "files": {k: str(v) for k, v in files.items()}, "seconds": time.monotonic() - started}


def is_plain_assignment(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and name.isprintable()


def report(assignment: str, root: Path | None = None, identify: bool = False, out: Path | None = None) -> int:
    """``python -m grader report``: 0 when written, 1 when there is nothing to report on."""
    from grader.grading.run.terminal import printable

    if root is None:
        from grader.course import course_root

        root = course_root()
    root = Path(root).resolve()
    if not is_plain_assignment(assignment):
        print(f"not an assignment id: {printable(assignment, 100)}", file=sys.stderr)
        return 1
    results_dir = root / "build" / "grading" / assignment / "results"
    if not results_dir.is_dir() or results_dir.is_symlink():
        print(f"no grading results under {printable(str(results_dir), 300)}: run `python -m grader grade "
              f"{printable(assignment, 100)}` first", file=sys.stderr)
        return 1
    made = build_report(root, assignment, identify=identify, out=out)
    skipped = sum(made["skipped_results"].values())
    print(f"report on {printable(assignment, 100)}: {made['learners']} learner(s)"
          + (f", {skipped} result file(s) skipped" if skipped else "")
          + (f"; attempt logs: {made['attempts_problem']}" if made["attempts_problem"] else "")
          + f" ({made['seconds']:.1f} s)")
    for path in made["files"].values():
        print(f"  {printable(path, 300)}")
    if made["learners"] == 0:
        print("no valid result was found: the report is empty", file=sys.stderr)
    return 0
