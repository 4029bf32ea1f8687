"""Generated wrong implementations with known mistakes, and the score of the diagnoses on them.

One module per notebook (named like its check module) defines ``MUTANTS`` and ``CORRECT``;
``common`` wraps correct implementations of every notebook into the mistakes any exercise
can make. A mutant plants one or more catalogued mistakes (``planted``, ids); running the
exercise's real test cells on it (tests/diagnosis_harness.py) gives the ids the first
failing check named. Scoring per id:

* a named id that was planted is a true positive, one that was not is a false positive;
* a planted id that was not named is a false negative (a mutant that passes every test
  misses all its planted ids, and is a verdict error as well);
* a correct implementation must pass every test and get no id at all.
"""
from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass, field

MODULES = ["bn_vs_ln", "geometry", "backward", "rmsnorm", "placement", "welford", "common"]


@dataclass
class Mutant:
    notebook: str                 # "04_rmsnorm"
    exercise: str                 # "rms_norm": the name the function is bound to
    planted: frozenset            # catalogue ids of the mistakes it makes
    function: object
    label: str                    # unique and readable: "eps_outside/loop/eps=1e-3"
    namespace: dict = field(default_factory=dict)  # extra names for the test cells


@dataclass
class Correct:
    notebook: str
    exercise: str
    function: object
    label: str
    namespace: dict = field(default_factory=dict)


def mutant(notebook, exercise, planted, function, label, **namespace) -> Mutant:
    planted = frozenset([planted] if isinstance(planted, str) else planted)
    return Mutant(notebook, exercise, planted, function, label, namespace)


def load(module: str) -> tuple[list[Mutant], list[Correct]]:
    found = importlib.import_module(f"tests.mutants.{module}")
    return list(found.MUTANTS), list(found.CORRECT)


@dataclass
class Score:
    tp: Counter = field(default_factory=Counter)
    fp: Counter = field(default_factory=Counter)
    fn: Counter = field(default_factory=Counter)
    passed_mutants: list = field(default_factory=list)     # verdict errors: a wrong answer passed
    failed_correct: list = field(default_factory=list)     # verdict errors: a right answer failed
    named_on_correct: list = field(default_factory=list)   # a diagnosis on a correct implementation
    misses: list = field(default_factory=list)             # (label, planted, named)
    false_alarms: list = field(default_factory=list)       # (label, planted, named)

    @staticmethod
    def ratio(good: int, bad: int) -> float:
        return good / (good + bad) if good + bad else 1.0

    def precision(self, ids=None) -> float:
        ids = set(self.tp) | set(self.fp) if ids is None else set(ids)
        return self.ratio(sum(self.tp[i] for i in ids), sum(self.fp[i] for i in ids))

    def recall(self, ids=None) -> float:
        ids = set(self.tp) | set(self.fn) if ids is None else set(ids)
        return self.ratio(sum(self.tp[i] for i in ids), sum(self.fn[i] for i in ids))


def score(mutants, corrects, diagnose) -> Score:
    """Run every mutant and correct implementation through ``diagnose(notebook, exercise, function, namespace=)``."""
    result = Score()
    for item in mutants:
        outcome = diagnose(item.notebook, item.exercise, item.function, namespace=item.namespace)
        named = set(outcome.ids)
        if outcome.passed:
            result.passed_mutants.append(item.label)
        for mistake in named:
            (result.tp if mistake in item.planted else result.fp)[mistake] += 1
        for mistake in item.planted - named:
            result.fn[mistake] += 1
        if item.planted - named:
            result.misses.append((item.label, sorted(item.planted), sorted(named), outcome.message[:300]))
        if named - item.planted:
            result.false_alarms.append((item.label, sorted(item.planted), sorted(named), outcome.message[:300]))
    for item in corrects:
        outcome = diagnose(item.notebook, item.exercise, item.function, namespace=item.namespace)
        if not outcome.passed:
            result.failed_correct.append((item.label, outcome.test, outcome.message[:300]))
        if outcome.ids:
            result.named_on_correct.append((item.label, outcome.ids))
            for mistake in outcome.ids:
                result.fp[mistake] += 1
    return result


def table(result: Score, ids) -> str:
    """A readable per-id table: id, TP, FP, FN, precision, recall."""
    lines = [f"{'id':44s} {'TP':>4s} {'FP':>4s} {'FN':>4s} {'P':>6s} {'R':>6s}"]
    for mistake in sorted(ids):
        lines.append(f"{mistake:44s} {result.tp[mistake]:4d} {result.fp[mistake]:4d} {result.fn[mistake]:4d} "
                     f"{result.precision([mistake]):6.3f} {result.recall([mistake]):6.3f}")
    return "\n".join(lines)
