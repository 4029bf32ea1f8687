"""The learner's loop: ``hint("rms_norm")`` and ``progress()``, built on the attempt log.

``hint`` climbs a ladder, one step per call, per exercise:

1. the idea (``grader.exercises``: the concept, in words);
2. what your checks said: the catalogue's hint (``grader.catalogue``) for the mistake(s) your
   last failed check of that exercise named;
3. the shape of the code, in words;
4. only in the self-study edition (``notebooks/``, whose hidden first cells register the
   sketches with ``register_solutions``): a solution sketch, once you have run that
   exercise's checks 3 times, or when you ask again after being told to wait.

``progress()`` shows one table for the notebook: per exercise ✔ (every check last passed),
✘ (a check last failed) or – (never run, or not written yet), the last diagnosis, how many
times the checks ran, and the highest hint step seen. It reads the attempt log only and
never runs a check.

Importing this module registers the observer that feeds the log (``grader.attempts``).
"""
from __future__ import annotations

import base64
import sys
import zlib

from grader import attempts
from grader.compare import add_observer
from grader.exercises import EXERCISES, NOTEBOOKS, Exercise, for_notebook, of_check

SKETCH_AFTER_RUNS = 3
TITLES = {1: "the idea", 2: "what your checks said", 3: "the shape of the code", 4: "a solution sketch"}
SYMBOLS = {"passed": "✔", "failed": "✘", "none": "–"}

_solutions: dict[str, str] = {}      # exercise -> zlib + base64 of its solution region
_plain_hints: dict[str, list] = {}   # hint records outside a kernel, where the log keeps nothing


# ------------------------------------------------------------------ the observer
def _observe(event: dict) -> None:
    """``grader.compare`` calls this after every outermost check."""
    exercise = of_check(event.get("check")) or EXERCISES.get(event.get("subject"))
    if exercise is None:
        return
    attempts.record(exercise.name, "check", check=event.get("check"), outcome=event.get("outcome"),
                    misconceptions=list(event.get("misconceptions") or ()))


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
class _State:
    """What the log says about one exercise."""

    def __init__(self, exercise: Exercise, log: list[dict]):
        mine = [r for r in log if r["exercise"] == exercise.name]
        self.checks = [r for r in mine if r["kind"] == "check"]
        hints = [r for r in mine if r["kind"] == "hint"]
        self.runs = sum(1 for r in self.checks if r["outcome"] != "not_implemented")
        self.top = max((r["level"] for r in hints), default=0)
        self.at_three = sum(1 for r in hints if r["level"] == 3)
        self.last_failed = next((r for r in reversed(self.checks) if r["outcome"] in ("failed", "error")), None)
        self.last = self.checks[-1] if self.checks else None


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
    """The step to show, and why it is not the one asked for (or None)."""
    top = state.top
    if isinstance(requested, int) and not isinstance(requested, bool):
        want = min(max(requested, 1), top + 1, 4)
    else:
        want = min(top + 1, 4)
    if want < 4:
        return want, None
    if exercise.name not in _solutions:
        return 3, "edition"
    if state.runs >= SKETCH_AFTER_RUNS or top >= 4 or state.at_three >= 2:
        return 4, None
    return 3, "wait"


def hint(name_or_function=None, step=None) -> None:
    """The next hint for one exercise: ``hint("rms_norm")`` or ``hint(rms_norm)``.

    Each call climbs one step: the idea, what your checks said, the shape of the code, and
    (in the self-study edition) a solution sketch. ``hint("rms_norm", 2)`` shows step 2
    again, e.g. after a new failed check.
    """
    namespace = sys._getframe(1).f_globals
    exercise = _resolve(name_or_function)
    if exercise is None:
        _unknown(name_or_function, namespace)
        return
    state = _State(exercise, attempts.records(exercise.name) + _plain_hints.get(exercise.name, []))
    level, why = _next_step(exercise, state, step)
    total = 4 if exercise.name in _solutions else 3
    name = exercise.name
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
    if why == "edition" and (step is None or step >= 4):
        notes.append("This is the last hint in this edition: the graded notebooks have no solution sketches. "
                     "Compare your code with the derivation in the notebook, one quantity at a time.")
    elif why == "wait":
        left = SKETCH_AFTER_RUNS - state.runs
        notes.append(f"A solution sketch is kept for after you have tried: you have run the checks of {name} "
                     f"{state.runs} time(s). Run them {left} more time(s), or call {_code(name)} once more to "
                     "see the sketch now.")
    elif max(state.top, level) < 3:
        upcoming = max(state.top, level) + 1
        notes.append(f"Call {_code(name)} again for step {upcoming}: {TITLES[upcoming]}.")
    elif level < 3:
        notes.append(f"Call {_code(name)} again to go on up the ladder.")
    elif level == 3 and total == 4:
        notes.append(f"Call {_code(name)} again for step 4: a solution sketch"
                     + (f" (after {SKETCH_AFTER_RUNS} runs of the checks, or when you ask twice)."
                        if state.runs < SKETCH_AFTER_RUNS else "."))
    elif level == 3:
        notes.append("This is the last hint in this edition.")
    title = f"Hint {level} of {total} for {name}: {TITLES[level]}"
    markdown = f"**{title}**\n\n{body_md}" + "".join(f"\n\n*{n.replace(_code(name), '`' + _code(name) + '`')}*"
                                                     for n in notes)
    text = f"{title}\n\n{body_text}" + "".join(f"\n\n{n}" for n in notes)
    _emit(markdown, text)
    if attempts.record(name, "hint", level=level, misconceptions=shown_ids) is None:
        _plain_hints.setdefault(name, []).append({"exercise": name, "kind": "hint", "check": None, "outcome": None,
                                                  "misconceptions": shown_ids, "level": level, "time": 0.0})


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
        mine = by_exercise.get(exercise.name, [])
        last: dict[str, dict] = {}
        runs, top = 0, 0
        for r in mine:
            if r["kind"] == "check":
                last[r["check"]] = r
                runs += r["outcome"] != "not_implemented"
            else:
                top = max(top, r["level"])
        top = max([top] + [r["level"] for r in _plain_hints.get(exercise.name, [])])
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
        total = 4 if exercise.name in _solutions else 3
        rows.append({"exercise": exercise.name, "status": status, "diagnosis": diagnosis, "attempts": runs,
                     "hint": f"{top} of {total}" if top else "–"})
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
        message = f"progress() could not tell which notebook this is: name it, e.g. progress(\"04_rmsnorm\") ({listed})."
        _emit(message.replace('progress("04_rmsnorm")', '`progress("04_rmsnorm")`'), message)
        return
    rows = _rows(chosen, log)
    header = ("exercise", "status", "last diagnosis", "check runs", "hint step")
    cells = [(r["exercise"], SYMBOLS[r["status"]], r["diagnosis"] or "–", str(r["attempts"]), r["hint"]) for r in rows]
    md = [f"**Your progress in {chosen}**", "", "| " + " | ".join(header) + " |", "|---|:-:|---|--:|--:|"]
    md += ["| " + " | ".join([f"`{c[0]}`", *(v.replace("|", "/") for v in c[1:])]) + " |" for c in cells]
    md += ["", "✔ every check passed at its last run · ✘ a check failed at its last run · – not run yet "
           "(or not written yet). Stuck? `hint(\"name\")`."]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    text = [f"Your progress in {chosen}", line(header), line(["-" * w for w in widths])] + [line(c) for c in cells]
    text += ["✔ passed at the last run · ✘ failed at the last run · – not run yet. Stuck? hint(\"name\")."]
    _emit("\n".join(md), "\n".join(text))
