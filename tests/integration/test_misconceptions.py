"""Precision and recall of the diagnoses, measured on generated mutants (tests/mutants/).

Every catalogued misconception is planted in at least 20 wrong implementations (alone and
together with another mistake); the exercise's real test cells (hidden tests included) run
on each, and the ids the first failing check names are scored against what was planted.
Correct implementations must pass and get no diagnosis at all.
"""
import functools

import pytest

from grader.catalogue import all_misconceptions, for_notebook
from tests.diagnosis_harness import diagnose
from tests.mutants import MODULES, load, score, table

PRECISION, RECALL = 0.95, 0.90
MIN_MUTANTS = 20
NOTEBOOK = {"bn_vs_ln": "01_bn_vs_ln", "geometry": "02_geometry", "backward": "03_backward",
            "rmsnorm": "04_rmsnorm", "placement": "05_placement", "welford": "06_welford", "common": ""}


@functools.lru_cache(maxsize=None)
def measured(module):
    mutants, corrects = load(module)
    return mutants, corrects, score(mutants, corrects, diagnose)


def _unreachable(module) -> dict:
    import importlib

    return dict(getattr(importlib.import_module(f"tests.mutants.{module}"), "UNREACHABLE", {}))


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES)
def test_every_misconception_is_planted_often_enough(module):
    mutants, _, _ = load(module), None, None
    planted = [mistake for item in mutants[0] for mistake in item.planted]
    ids = [m.id for m in for_notebook(NOTEBOOK[module])]
    unreachable = _unreachable(module)
    assert set(unreachable) <= set(ids), set(unreachable) - set(ids)
    short = {i: planted.count(i) for i in ids if i not in unreachable and planted.count(i) < MIN_MUTANTS}
    assert not short, f"fewer than {MIN_MUTANTS} mutants: {short}"
    unknown = set(planted) - set(all_misconceptions())
    assert not unknown, f"planted ids the catalogue does not know: {unknown}"


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES)
def test_diagnoses_are_precise_and_complete(module):
    mutants, corrects, result = measured(module)
    ids = [m.id for m in for_notebook(NOTEBOOK[module])]
    print(f"\n{module}: {len(mutants)} mutants, {len(corrects)} correct implementations")
    print(table(result, ids))
    print(f"precision {result.precision(ids):.3f}, recall {result.recall(ids):.3f}")
    assert not result.failed_correct, result.failed_correct
    assert not result.named_on_correct, result.named_on_correct
    assert not result.passed_mutants, result.passed_mutants
    assert result.precision(ids) >= PRECISION, result.false_alarms[:10]
    assert result.recall(ids) >= RECALL, result.misses[:10]


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES)
def test_every_catalogued_misconception_is_named_on_some_mutant(module):
    _, _, result = measured(module)
    ids = [m.id for m in for_notebook(NOTEBOOK[module])]
    never = [i for i in ids if i not in _unreachable(module) and result.tp[i] == 0]
    assert not never, f"catalogued, planted, but never named: {never}"


@pytest.mark.slow
def test_overall_precision_and_recall():
    totals = [measured(module)[2] for module in MODULES]
    tp = sum(sum(r.tp.values()) for r in totals)
    fp = sum(sum(r.fp.values()) for r in totals)
    fn = sum(sum(r.fn.values()) for r in totals)
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(f"\noverall: precision {precision:.3f}, recall {recall:.3f} ({tp} TP, {fp} FP, {fn} FN)")
    assert precision >= PRECISION and recall >= RECALL


@pytest.mark.parametrize("module", MODULES)
def test_one_mutant_per_misconception_is_named(module):
    """Quick tier: the first mutant of each planted id (alone) is diagnosed with that id."""
    mutants, _ = load(module)
    first = {}
    for item in mutants:
        if len(item.planted) == 1:
            first.setdefault(next(iter(item.planted)), item)
    missed = []
    for mistake, item in first.items():
        outcome = diagnose(item.notebook, item.exercise, item.function, namespace=item.namespace)
        if mistake not in outcome.ids:
            missed.append((item.label, outcome.ids))
    assert len(missed) <= max(1, len(first) // 10), missed
