"""How long a notebook takes a first-time learner: an estimate from counts and stated rates.

Nobody has timed learners on these notebooks, so the time each notebook states is computed, not
guessed, and the notebook says so. From the percent script (what the learner reads, cell by cell):

* words of prose in the markdown cells (reveals and interview answers included: a learner opens
  them), read at ``WORDS_PER_MINUTE``; LaTeX commands are not words, their arguments are;
* learner actions: code cells to run (each read and its output looked at), graded exercises
  (a first attempt, the checks, one fix), derivation steps (``return ...  # your expression``),
  predictions (``**Predict`` prompts after the introduction, or ``guess_... = ...`` cells if there are
  more of those) and widgets
  (cells that build one), each at its rate in ``RATES``;
* the measured time the solved notebook (``solutions/``) takes to run from top to bottom, recorded
  by ``tools/read-through-estimate --measure`` in ``tools/read-through-timings.json``.

Sections whose heading says "optional" are counted apart. Totals are rounded to ``ROUND_TO`` minutes.
The notebook's own "**Time.**" paragraph is written by ``time_paragraph`` and not counted.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

WORDS_PER_MINUTE = 150      # careful reading of technical prose with formulas
RATES = {                   # minutes per learner action
    "code_cells": 0.5,      # read the code, run it, look at what it prints or draws
    "exercises": 10.0,      # a graded exercise: a first attempt, run the checks, one fix
    "derivations": 5.0,     # a derivation step: an expression on paper, then in code, checked
    "predictions": 2.0,     # commit to a guess, then compare
    "widgets": 5.0,         # an experiment with a widget, guided by questions
}
ROUND_TO = 5
TIMINGS = "tools/read-through-timings.json"
TIME_PARAGRAPH = re.compile(r"^\*\*Time\.\*\*", re.M)

_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
_HEADING = re.compile(r"^(#{2,3})\s+(.*)$", re.M)
_PREDICT = re.compile(r"\*\*Predict\b|^#{2,4}\s+Predict\b", re.M)  # after the first "## " heading
_GUESS = re.compile(r"^guess_\w+\s*=", re.M)
_DERIVATION = re.compile(r"^\s*return \.\.\.", re.M)
_WIDGET = re.compile(r"\b\w*[Ww]idget\w*\(")


@dataclass
class Counts:
    words: int = 0
    code_cells: int = 0
    exercises: int = 0
    derivations: int = 0
    predictions: int = 0
    widgets: int = 0
    guesses: int = 0  # guess_... cells; predictions is the larger of these and the prompts

    def minutes(self) -> float:
        actions = sum(getattr(self, name) * rate for name, rate in RATES.items())
        return self.words / WORDS_PER_MINUTE + actions


@dataclass
class Estimate:
    assignment: str
    main: Counts = field(default_factory=Counts)
    optional: Counts = field(default_factory=Counts)
    run_seconds: float = 0.0

    @property
    def minutes(self) -> int:
        """The whole notebook without its optional sections, computation included, rounded."""
        return _rounded(self.main.minutes() + self.run_seconds / 60)

    @property
    def optional_minutes(self) -> int:
        return _rounded(self.optional.minutes()) if self.optional.minutes() else 0


def _rounded(minutes: float) -> int:
    return max(ROUND_TO, int(ROUND_TO * round(minutes / ROUND_TO)))


def words(markdown: str) -> int:
    """Words a learner reads in a markdown cell: LaTeX commands dropped, HTML tags dropped."""
    text = re.sub(r"<[^>]+>", " ", markdown)
    return len(_WORD.findall(_LATEX_COMMAND.sub(" ", text)))


def _optional_heading(title: str) -> bool:
    return "optional" in title.lower()


def count(cells) -> tuple[Counts, Counts]:
    """(main, optional) counts of a notebook's cells (``nbformat`` cells of the percent script)."""
    main, optional = Counts(), Counts()
    in_optional, optional_level = False, 0
    prompts = {id(main): 0, id(optional): 0}
    in_intro = True  # before the first section: the intro explains "Predict, then run" and asks nothing
    for cell in cells:
        text = cell.source
        if cell.cell_type == "markdown":
            in_intro = in_intro and not re.search(r"^## ", text, re.M)
            for level, title in _HEADING.findall(text):
                if in_optional and len(level) <= optional_level:
                    in_optional = False
                if not in_optional and _optional_heading(title):
                    in_optional, optional_level = True, len(level)
        target = optional if in_optional else main
        if cell.cell_type == "markdown":
            kept = "\n\n".join(p for p in re.split(r"\n\s*\n", text) if not TIME_PARAGRAPH.match(p.strip()))
            target.words += words(kept)
            prompts[id(target)] += 0 if in_intro else len(_PREDICT.findall(text))
            continue
        nbgrader = cell.metadata.get("nbgrader", {})
        target.code_cells += 1
        target.exercises += bool(nbgrader.get("solution") and nbgrader.get("grade_id"))
        target.derivations += bool(_DERIVATION.search(text))
        target.guesses += len(_GUESS.findall(text))
        target.widgets += bool(_WIDGET.search(text))
    for counts in (main, optional):
        counts.predictions = max(prompts[id(counts)], counts.guesses)
    return main, optional


def recorded_seconds(root: Path, assignment: str) -> float:
    path = root / TIMINGS
    if not path.exists():
        return 0.0
    return float(json.loads(path.read_text()).get(assignment, {}).get("seconds", 0.0))


def estimate(root: Path, assignment: str) -> Estimate:
    import jupytext

    nb = jupytext.read(root / "source" / assignment / f"{assignment}.py")
    main, optional = count(nb.cells)
    return Estimate(assignment, main, optional, recorded_seconds(root, assignment))


def time_paragraph(found: Estimate) -> str:
    """The notebook's "**Time.**" paragraph, as markdown lines without the leading '# '."""
    c = found.main
    rounded_words = int(100 * round(c.words / 100))
    optional = (f", and about {found.optional_minutes} more for the optional part"
                if found.optional_minutes else "")
    return (f"**Time.** About {found.minutes} minutes{optional}. This is an estimate, not a timing of learners: "
            f"`tools/read-through-estimate` counts about {rounded_words:,} words of prose (read at "
            f"{WORDS_PER_MINUTE} words a minute), {c.code_cells} code cells to run (half a minute each), "
            f"{c.exercises} graded exercises (10 minutes each), {c.derivations} derivation steps (5 each), "
            f"{c.predictions} predictions (2 each) and {c.widgets} widgets (5 each), and adds the "
            f"{round(found.run_seconds)} s the solved notebook took to run on the course's test machine.")


PARAGRAPH_NUMBERS = re.compile(
    r"About (?P<minutes>\d+) minutes(?:, and about (?P<optional>\d+) more for the optional part)?\..*?"
    r"counts about (?P<words>[\d,]+) words .*?, (?P<code_cells>\d+) code cells .*?, (?P<exercises>\d+) graded "
    r"exercises .*?, (?P<derivations>\d+) derivation steps .*?, (?P<predictions>\d+) predictions .*? and "
    r"(?P<widgets>\d+) widgets .*?adds the (?P<seconds>\d+) s", re.S)


def stated(script_text: str) -> dict | None:
    """The numbers of the "**Time.**" paragraph of a percent script, or None when it has none."""
    lines = script_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# **Time.**"):
            paragraph = []
            for following in lines[i:]:
                if not following.startswith("# ") or not following[2:].strip():
                    break
                paragraph.append(following[2:])
            found = PARAGRAPH_NUMBERS.search(" ".join(paragraph))
            if found is None:
                return None
            return {key: int(value.replace(",", "")) if value else 0 for key, value in found.groupdict().items()}
    return None


def write_paragraph(script: Path, found: Estimate, width: int = 110) -> bool:
    """Replace the "**Time.**" paragraph of a percent script with the estimate's; True if it changed."""
    import textwrap

    text = script.read_text()
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("# **Time.**")), None)
    if start is None:
        raise ValueError(f"{script} has no '# **Time.**' paragraph to update")
    end = start
    while end < len(lines) and lines[end].startswith("# ") and lines[end][2:].strip():
        end += 1
    new = "".join(f"# {line}\n" for line in textwrap.wrap(time_paragraph(found), width=width,
                                                         break_on_hyphens=False))
    updated = "".join(lines[:start]) + new + "".join(lines[end:])
    if updated != text:
        script.write_text(updated)
        return True
    return False
