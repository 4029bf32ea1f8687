"""The learner's loop: ``hint("rms_norm")`` and ``progress()``, built on the attempt log.

``hint`` climbs a ladder, per exercise, one step per call, and each step is earned by trying:

1. the idea (``grader.exercises``: the concept, in words): always open;
2. what your checks said: the catalogue's hint (``grader.catalogue``) for the mistake(s) your
   last failed check of that exercise named. Opens once the exercise's checks have run on a
   written function;
3. the shape of the code, in words. Opens after a failed run of the checks since step 2 was
   first shown (use step 2, try again, and fail again);
4. only in the self-study edition (``notebooks/``, whose hidden first cells register the
   sketches with ``register_solutions``): a solution sketch, after step 3 and at least
   ``SKETCH_AFTER_FAILED_RUNS`` failed runs of that exercise's checks.

Asking again never climbs by itself: a call whose next step is still closed shows the highest
open step again and says what opens the next one. A *run* is one execution of a cell: the
several checks a test cell calls count once (``grader.attempts``: a record's ``run``).

``progress()`` shows one table for the notebook: per exercise ✔ (every check last passed),
✘ (a check last failed) or – (never run, or not written yet), the last diagnosis, how many
times the checks ran, and where it stands on the hint ladder (the step seen, and what opens
the next). It reads the attempt log only and never runs a check.

Importing this module registers the observer that feeds the log (``grader.attempts``).
"""
from __future__ import annotations

import base64
import itertools
import sys
import zlib

from grader import attempts
from grader.compare import add_observer
from grader.exercises import EXERCISES, NOTEBOOKS, Exercise, for_notebook, of_check

SKETCH_AFTER_FAILED_RUNS = 2
KEEP_PLAIN = 200                     # check records kept per exercise outside a kernel
TITLES = {1: "the idea", 2: "what your checks said", 3: "the shape of the code", 4: "a solution sketch"}
SYMBOLS = {"passed": "✔", "failed": "✘", "none": "–"}

_solutions: dict[str, str] = {}      # exercise -> zlib + base64 of its solution region
_plain_hints: dict[str, list] = {}   # hint records outside a kernel, where the log keeps nothing
_plain_checks: dict[str, list] = {}  # check records outside a kernel (this process only), for the ladder
_plain_clock = itertools.count(1)    # their order (a plain process keeps no times)


# ------------------------------------------------------------------ the observer
def _observe(event: dict) -> None:
    """``grader.compare`` calls this after every outermost check."""
    exercise = of_check(event.get("check")) or EXERCISES.get(event.get("subject"))
    if exercise is None:
        return
    misconceptions = list(event.get("misconceptions") or ())
    if attempts.record(exercise.name, "check", check=event.get("check"), outcome=event.get("outcome"),
                       misconceptions=misconceptions) is None:
        kept = _plain_checks.setdefault(exercise.name, [])
        kept.append({"exercise": exercise.name, "kind": "check", "check": event.get("check"),
                     "outcome": event.get("outcome"), "misconceptions": misconceptions, "level": None,
                     "time": float(next(_plain_clock)), "run": None})
        del kept[:-KEEP_PLAIN]


add_observer(_observe)


# ------------------------------------------------------------------ the self-study edition
def register_solutions(encoded: dict) -> None:
    """Called by the self-study edition's hidden cell: exercise -> zlib + base64 of its solution."""
    if isinstance(encoded, dict):
        _solutions.update({k: v for k, v in encoded.items() if isinstance(k, str) and isinstance(v, str)})


def encode_solution(text: str) -> str:
    """How ``grader.course.build`` stores a solution region in the self-study edition."""
    return base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def _sketch(name: str) -> str | None:
    try:
        return zlib.decompress(base64.b64decode(_solutions[name])).decode("utf-8")
    except Exception:  # noqa: BLE001 - absent, or not what build.py wrote
        return None


# ------------------------------------------------------------------ output
def _emit(markdown: str, text: str) -> None:
    """Rich Markdown in a kernel (plain text as the fallback), plain text on stdout elsewhere."""
    if attempts.live():
        attempts.publish({"text/markdown": markdown, "text/plain": text})
    else:
        print(text)


def _code(name: str) -> str:
    return f'hint("{name}")'


# ------------------------------------------------------------------ the ladder
def runs_of(checks: list[dict]) -> list[dict]:
    """Check records grouped into runs: consecutive records of one cell execution (same ``run``) are one run.

    Each run: {"outcome": "failed" (a check failed or raised), "passed", or "not_implemented" (nothing
    written yet), "time": its last record's time}.
    """
    found: list[dict] = []
    previous = object()
    for r in checks:
        key = r.get("run")
        if key is None or key != previous or not found:
            found.append({"outcomes": [], "time": r["time"]})
        previous = key
        found[-1]["outcomes"].append(r["outcome"])
        found[-1]["time"] = r["time"]
    for run in found:
        outcomes = run.pop("outcomes")
        run["outcome"] = ("failed" if any(o in ("failed", "error") for o in outcomes) else
                          "not_implemented" if all(o == "not_implemented" for o in outcomes) else "passed")
    return found


class _State:
    """What the log says about one exercise: its runs, and where it stands on the ladder."""

    def __init__(self, exercise: Exercise, log: list[dict]):
        mine = [r for r in log if r["exercise"] == exercise.name]
        self.checks = [r for r in mine if r["kind"] == "check"]
        hints = [r for r in mine if r["kind"] == "hint"]
        runs = runs_of(self.checks)
        self.runs = sum(1 for r in runs if r["outcome"] != "not_implemented")
        self.failed_runs = [r for r in runs if r["outcome"] == "failed"]
        self.top = max((r["level"] for r in hints), default=0)
        step_two = min((r["time"] for r in hints if r["level"] >= 2), default=None)
        self.failed_since_two = (0 if step_two is None else
                                 sum(1 for r in self.failed_runs if r["time"] > step_two))
        self.last_failed = next((r for r in reversed(self.checks) if r["outcome"] in ("failed", "error")), None)
        self.last = self.checks[-1] if self.checks else None
        self.passing = bool(runs) and runs[-1]["outcome"] == "passed"
        self.sketches = exercise.name in _solutions

    @property
    def total(self) -> int:
        return 4 if self.sketches else 3

    def open(self, level: int) -> bool:
        """Whether step ``level`` has been earned."""
        if level <= 1:
            return True
        if level == 2:
            return self.runs >= 1
        if level == 3:
            return self.top >= 2 and self.failed_since_two >= 1
        return self.sketches and self.top >= 3 and len(self.failed_runs) >= SKETCH_AFTER_FAILED_RUNS

    def highest_open(self) -> int:
        """The highest step seen (or step 1), and the next one once it is open."""
        level = max(self.top, 1)
        if level < self.total and self.open(level + 1):
            level += 1
        return level

    def unlock(self, level: int, name: str, first_check: str) -> str:
        """What opens step ``level``, in one sentence."""
        run_it = f"{first_check}({name})"
        if level == 2:
            return (f"Step 2 ({TITLES[2]}) opens once the checks have run on your own code: write {name}, run "
                    f"{run_it} (the test cell below the exercise), then call {_code(name)} again.")
        if level == 3:
            if self.passing:
                return f"Your last run of the checks of {name} passed: there is nothing left to unlock."
            return (f"Step 3 ({TITLES[3]}) opens after a failed run since you saw step 2: change your code with "
                    f"step 2 in mind, run {run_it} again, and if it still fails call {_code(name)} again.")
        left = max(SKETCH_AFTER_FAILED_RUNS - len(self.failed_runs), 1)
        if self.passing:
            return f"Your last run of the checks of {name} passed: there is nothing left to unlock."
        return (f"The solution sketch opens after step 3 and {SKETCH_AFTER_FAILED_RUNS} failed runs of the checks "
                f"of {name} (so far {len(self.failed_runs)}): write your version from step 3, run {run_it} "
                f"({left} more failed run(s) needed), then call {_code(name)} again.")

    def ladder(self) -> str:
        """Where the exercise stands: the step seen, and what opens the next one (for progress())."""
        if not self.top:
            return "–"
        seen = f"{self.top} of {self.total}"
        nxt = self.top + 1
        if nxt > self.total:
            return seen
        if self.open(nxt):
            return f"{seen} (step {nxt} open)"
        need = {2: "run the checks", 3: "a failed run since step 2",
                4: f"{SKETCH_AFTER_FAILED_RUNS} failed runs"}[nxt]
        if self.passing and nxt >= 3:
            return seen
        return f"{seen} (step {nxt} after {need})"


def _resolve(name_or_function) -> Exercise | None:
    name = name_or_function
    if not isinstance(name, str):
        name = getattr(name_or_function, "__name__", None)
    if not isinstance(name, str):
        return None
    return EXERCISES.get(name.strip()) or of_check(name.strip())


def _unknown(what, namespace) -> None:
    notebook = _infer_notebook(namespace)
    names = [e.name for e in (for_notebook(notebook) if notebook else EXERCISES.values())]
    listed = ", ".join(f'"{n}"' for n in names)
    shown = repr(what) if isinstance(what, str) else getattr(what, "__name__", type(what).__name__)
    head = "hint() needs the name of an exercise" if what is None else f"{shown} is not an exercise of this course"
    _emit(f"**{head}.** Try one of: {listed}, e.g. `{_code(names[0])}`.",
          f"{head}. Try one of: {listed}, e.g. {_code(names[0])}.")


def _entry(mistake_id: str):
    """The catalogue's entry for an id, or None (unknown id, or a catalogue that cannot load)."""
    try:
        from grader import catalogue

        return catalogue.get(mistake_id)
    except Exception:  # noqa: BLE001 - a catalogue being edited must not break the hints
        return None


def _diagnosis(exercise: Exercise, state: _State) -> tuple[str, str, list]:
    """Step 2: markdown, text, and the misconception ids shown."""
    first_check = exercise.checks[0]
    run_it = f"`{first_check}({exercise.name})` (the test cell below the exercise)"
    failed = state.last_failed
    if failed is None:
        if state.last is not None and state.last["outcome"] == "passed":
            text = (f"No check of {exercise.name} has failed: there is no mistake to diagnose. "
                    "If you still feel unsure, the next step describes the shape of the code.")
        else:
            text = (f"No check of {exercise.name} has failed yet, so there is no diagnosis to show. "
                    f"Write your function, run {run_it}, then ask again with hint(\"{exercise.name}\", 2).")
        return text, text.replace("`", ""), []
    entries = [e for e in map(_entry, failed["misconceptions"]) if e is not None]
    head = f"Your last failed check, `{failed['check']}`,"
    if not entries:
        body = (f"{head} did not match a classic mistake. Read its message again: it says what it expected, "
                "what came back and where they differ. Try the smallest input it names by hand.")
        return body, body.replace("`", ""), []
    lines_md = [f"{head} pointed at:"]
    lines_text = [f"{head} pointed at:".replace("`", "")]
    for entry in entries:
        lines_md.append(f"- **{entry.name}.** {entry.hint}")
        lines_text.append(f"  - {entry.name}. {entry.hint}")
        lines_md.append(f"  *The idea:* {entry.concept}")
        lines_text.append(f"    The idea: {entry.concept}")
    if state.last is not failed and state.last is not None and state.last["outcome"] == "passed":
        lines_md.append(f"\n(`{state.last['check']}` has passed since.)")
        lines_text.append(f"({state.last['check']} has passed since.)")
    return "\n".join(lines_md), "\n".join(lines_text), [e.id for e in entries]


def _next_step(exercise: Exercise, state: _State, requested) -> tuple[int, str | None]:
    """The step to show, and the step that is still closed (or None)."""
    reachable = state.highest_open()
    if isinstance(requested, int) and not isinstance(requested, bool):
        want = min(max(requested, 1), state.total)
    else:
        want = min(state.top + 1, state.total)
    if want <= reachable:
        return want, None
    return reachable, want


def hint(name_or_function=None, step=None) -> None:
    """The next hint for one exercise: ``hint("rms_norm")`` or ``hint(rms_norm)``.

    Each call climbs one step when that step is earned: the idea; what your checks said (once
    they have run); the shape of the code (after a failed run since step 2); and, in the
    self-study edition, a solution sketch (after two failed runs). Otherwise it shows the
    highest open step again and says what opens the next. ``hint("rms_norm", 2)`` shows step 2
    again, e.g. after a new failed check.
    """
    namespace = sys._getframe(1).f_globals
    exercise = _resolve(name_or_function)
    if exercise is None:
        _unknown(name_or_function, namespace)
        return
    name = exercise.name
    log = sorted(attempts.records(name) + _plain_hints.get(name, []) + _plain_checks.get(name, []),
                 key=lambda r: r["time"])
    state = _State(exercise, log)
    level, closed = _next_step(exercise, state, step)
    total = state.total
    shown_ids: list = []
    if level == 1:
        body_md = body_text = exercise.concept
    elif level == 2:
        body_md, body_text, shown_ids = _diagnosis(exercise, state)
    elif level == 3:
        body_md = exercise.shape
        body_text = "\n".join("  " + line for line in exercise.shape.splitlines())
    else:
        sketch = _sketch(name) or "(the sketch could not be read)"
        intro = (f"The course's solution of the body of {name}. Read it, close it, then write your own "
                 "version from memory and run the checks again.")
        body_md = f"{intro}\n\n```python\n{sketch.rstrip()}\n```"
        body_text = intro + "\n\n" + "\n".join("    " + line for line in sketch.rstrip().splitlines())
    notes = []
    if level > state.top:
        state.top = level
        if level == 2:
            state.failed_since_two = 0  # step 2 is seen now: only runs after it count
    nxt = state.top + 1
    if closed is not None:
        notes.append(state.unlock(closed, name, exercise.checks[0]))
    elif nxt <= total:
        notes.append(f"Call {_code(name)} again for step {nxt}: {TITLES[nxt]}." if state.open(nxt)
                     else state.unlock(nxt, name, exercise.checks[0]))
    elif total == 3:
        notes.append("This is the last hint in this edition: the graded notebooks have no solution sketches. "
                     "Compare your code with the derivation in the notebook, one quantity at a time.")
    notes = [n for n in notes if n]
    title = f"Hint {level} of {total} for {name}: {TITLES[level]}"
    markdown = f"**{title}**\n\n{body_md}" + "".join(f"\n\n*{n.replace(_code(name), '`' + _code(name) + '`')}*"
                                                     for n in notes)
    text = f"{title}\n\n{body_text}" + "".join(f"\n\n{n}" for n in notes)
    _emit(markdown, text)
    if attempts.record(name, "hint", level=level, misconceptions=shown_ids) is None:
        _plain_hints.setdefault(name, []).append({"exercise": name, "kind": "hint", "check": None, "outcome": None,
                                                  "misconceptions": shown_ids, "level": level,
                                                  "time": float(next(_plain_clock)), "run": None})


# ------------------------------------------------------------------ progress
def _infer_notebook(namespace, log: list[dict] | None = None) -> str | None:
    """The notebook whose exercises are defined in ``namespace``; else the one of the latest check."""
    counts: dict[str, int] = {}
    try:
        for name, exercise in EXERCISES.items():
            if callable(namespace.get(name)):
                counts[exercise.notebook] = counts.get(exercise.notebook, 0) + 1
    except Exception:  # noqa: BLE001 - an odd namespace
        counts = {}
    best = max(counts.values(), default=0)
    candidates = [nb for nb, n in counts.items() if n == best and n > 0]
    if len(candidates) == 1:
        return candidates[0]
    log = attempts.records() if log is None else log
    for r in reversed(log):
        notebook = EXERCISES[r["exercise"]].notebook
        if not candidates or notebook in candidates:
            return notebook
    return candidates[0] if candidates else None


def _resolve_notebook(notebook) -> str | None:
    if not isinstance(notebook, str):
        return None
    key = notebook.strip().removesuffix(".ipynb").rsplit("/", 1)[-1]
    for known in NOTEBOOKS:
        if key == known or key == known[:2] or key == known[3:]:
            return known
    return None


def _rows(notebook: str, log: list[dict]) -> list[dict]:
    by_exercise: dict[str, list[dict]] = {}
    for r in log:
        by_exercise.setdefault(r["exercise"], []).append(r)
    rows = []
    for exercise in for_notebook(notebook):
        mine = sorted(by_exercise.get(exercise.name, []) + _plain_hints.get(exercise.name, [])
                      + _plain_checks.get(exercise.name, []), key=lambda r: r["time"])
        last: dict[str, dict] = {}
        for r in mine:
            if r["kind"] == "check":
                last[r["check"]] = r
        state = _State(exercise, mine)
        failing = [r for r in last.values() if r["outcome"] in ("failed", "error")]
        if failing:
            status = "failed"
        elif last and all(last.get(c, {}).get("outcome") == "passed" for c in exercise.checks) \
                and all(r["outcome"] == "passed" for r in last.values()):
            status = "passed"
        else:
            status = "none"
        diagnosis = ""
        if failing:
            latest = max(failing, key=lambda r: r["time"])
            names = [e.name for e in map(_entry, latest["misconceptions"]) if e is not None]
            diagnosis = names[0] if names else f"see the message of {latest['check']}"
        rows.append({"exercise": exercise.name, "status": status, "diagnosis": diagnosis, "attempts": state.runs,
                     "hint": state.ladder()})
    return rows


def progress(notebook: str | None = None) -> None:
    """Where you stand in this notebook: one row per exercise, from the checks you have run.

    ``progress("04_rmsnorm")`` names the notebook; by default it is the one whose exercises
    are defined here, or the one of your latest check.
    """
    namespace = sys._getframe(1).f_globals
    log = attempts.records()
    chosen = _resolve_notebook(notebook) if notebook is not None else _infer_notebook(namespace, log)
    if chosen is None:
        listed = ", ".join(f'"{n}"' for n in NOTEBOOKS)
        message = (f"progress() could not tell which notebook this is: name it, e.g. progress(\"04_rmsnorm\") "
                   f"({listed}).")
        _emit(message.replace('progress("04_rmsnorm")', '`progress("04_rmsnorm")`'), message)
        return
    rows = _rows(chosen, log)
    header = ("exercise", "status", "last diagnosis", "check runs", "hint step")
    cells = [(r["exercise"], SYMBOLS[r["status"]], r["diagnosis"] or "–", str(r["attempts"]), r["hint"]) for r in rows]
    md = [f"**Your progress in {chosen}**", "", "| " + " | ".join(header) + " |", "|---|:-:|---|--:|--:|"]
    md += ["| " + " | ".join([f"`{c[0]}`", *(v.replace("|", "/") for v in c[1:])]) + " |" for c in cells]
    md += ["", "✔ every check passed at its last run · ✘ a check failed at its last run · – not run yet "
           "(or not written yet). A check run is one run of a test cell. Stuck? `hint(\"name\")`: each hint "
           "step opens as you try (step 2 after a run, step 3 after a failed run since step 2)."]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()  # noqa: E731 - a one-line row formatter
    text = [f"Your progress in {chosen}", line(header), line(["-" * w for w in widths])] + [line(c) for c in cells]
    text += ["✔ passed at the last run · ✘ failed at the last run · – not run yet. Stuck? hint(\"name\")."]
    _emit("\n".join(md), "\n".join(text))
