"""Precision and recall of the diagnoses, measured on generated mutants (tests/mutants/).

Every catalogued misconception is planted in at least 20 wrong implementations (alone and
together with another mistake); the exercise's real test cells (hidden tests included) run
on each, and the ids the first failing check names are scored against what was planted.
Correct implementations must pass and get no diagnosis at all. The self-study edition
(notebooks/, its visible checks then its extra-checks cells) must give each of them the verdict
and the ids of the graded version. Each mutant's graded diagnosis is computed once per test
process for both (``diagnose_once``).
"""
import functools

import pytest

from grader.catalogue import all_misconceptions, for_notebook
from grader.compare import CheckFailed
from grader.course.build import EXTRA_CHECKS_PREFIX
from tests.conftest import ASSIGNMENTS, ROOT
from tests.diagnosis_harness import diagnose_once
from tests.integration.test_build import checks_in_order, editions, learner_namespace, run_cell, solved_exercises
from tests.mutants import MODULES, load, score, table

PRECISION, RECALL = 0.95, 0.90
MIN_MUTANTS = 20
NOTEBOOK = {"bn_vs_ln": "01_bn_vs_ln", "geometry": "02_geometry", "backward": "03_backward",
            "rmsnorm": "04_rmsnorm", "placement": "05_placement", "welford": "06_welford", "common": ""}
MUTANT_MODULE = {notebook: module for module, notebook in NOTEBOOK.items() if notebook}


@functools.lru_cache(maxsize=None)
def measured(module):
    mutants, corrects = load(module)
    return mutants, corrects, score(mutants, corrects, diagnose_once)


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
        outcome = diagnose_once(item.notebook, item.exercise, item.function, namespace=item.namespace)
        if mistake not in outcome.ids:
            missed.append((item.label, outcome.ids))
    assert len(missed) <= max(1, len(first) // 10), missed


@pytest.mark.slow  # every mutant of a notebook through its self-study checks, 3-40 s each
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_extra_checks_diagnose_every_mutant_as_the_graded_version_does(assignment):
    """On every generated mutant and correct variant (tests/mutants/), visible checks then extra checks give
    the verdict and the misconception ids of the source's test cells, hidden tests included. The committed
    editions: test_build checks that they are what `make build` makes of source/."""
    _, _, self_study = editions(ROOT, assignment)
    base = learner_namespace(self_study, solved_exercises(ROOT, assignment))  # the other exercises solved
    order = checks_in_order(self_study)
    mutants, corrects = load(MUTANT_MODULE[assignment])
    only_extra = 0
    for item in mutants + corrects:
        expected = diagnose_once(assignment, item.exercise, item.function, namespace=item.namespace)
        namespace = {**base, item.exercise: item.function, **item.namespace}
        got, caught_by = None, None
        for exercise, cell_id, text in order:
            if exercise != item.exercise:
                continue
            if not cell_id.startswith(EXTRA_CHECKS_PREFIX):
                scope = dict(namespace)  # a test cell and its extra checks share one scope, as in a kernel
            _, error = run_cell(text, cell_id, scope)
            if error is not None:
                got, caught_by = error, cell_id
                break
        if expected.passed:
            assert got is None, f"{item.label}: passes the graded tests but fails {caught_by}: {got!r}"
            continue
        assert got is not None, f"{item.label}: fails {expected.test} when graded, passes every self-study check"
        assert caught_by.removeprefix(EXTRA_CHECKS_PREFIX) == expected.test, (item.label, caught_by, expected.test)
        ids = tuple(got.misconceptions) if isinstance(got, CheckFailed) else ()
        assert ids == expected.ids, f"{item.label}: {caught_by} names {ids}, the graded version {expected.ids}"
        only_extra += caught_by.startswith(EXTRA_CHECKS_PREFIX)
    print(f"{assignment}: {len(mutants)} mutants, {only_extra} of them caught by the extra checks only")
