"""The class report as data: what the .json holds, and what the .html and .csv are drawn from.

Takes what ``reading`` found and returns plain dicts and lists: pass rates, misconceptions and their
pairs, attempt figures, flags. Every group smaller than ``MIN_GROUP`` is suppressed unless ``identify``.
"""
from __future__ import annotations

import itertools
from collections import Counter

from grader.grading.report.statistics import MIN_GROUP, SUPPRESSED, group, proportion, quartiles

MAX_PAIRS = 100  # rows of the co-occurrence table


def analyse(assignment: str, results_by_student: dict, skipped_results: Counter, logs: dict | None,
            skipped_logs: Counter, logs_problem: str | None, exercises: list[str], test_exercise: dict,
            identify: bool = False) -> dict:
    """The report as data (what the .json holds; the .html and .csv are drawn from it)."""
    from grader import catalogue

    students = sorted(results_by_student)
    n = len(students)
    tests, learner_ids, id_tests = _tally(results_by_student, students)
    counts = Counter(mid for ids in learner_ids.values() for mid in ids)
    pairs = _pair_rows(learner_ids, counts, n, identify)
    document = {
        "assignment": assignment,
        "learners": n,
        "identified": identify,
        "min_group": MIN_GROUP,
        "skipped_results": dict(sorted(skipped_results.items())),
        "tests": _test_rows(tests, test_exercise, exercises, small_class=n < MIN_GROUP and not identify),
        "misconceptions": _misconception_rows(counts, id_tests, n, identify),
        "misconceptions_not_seen": [_named(m.id) for m in catalogue.for_notebook(assignment) if m.id not in counts],
        "pairs": pairs[:MAX_PAIRS],
        "pairs_not_shown": len(pairs[MAX_PAIRS:]),
        "attempts": _attempt_rows(logs, exercises, identify),
        "attempt_learners": _attempt_learners(logs, identify),
        "attempts_problem": logs_problem,
        "skipped_notebooks": dict(sorted(skipped_logs.items())),
        # what the grader saw but could not prove: named per learner (the instructor decides; no points hang on it)
        "flags": _flags(results_by_student, students),
    }
    if identify:
        document["by_learner"] = _by_learner(results_by_student, students, learner_ids)
    return document


def _tally(results_by_student: dict, students: list[str]) -> tuple[dict, dict, dict]:
    """(notebook, test) -> Counter of learners and passes; student -> the ids diagnosed in their failed
    tests; id -> Counter of the tests that diagnosed it."""
    from grader.grading.run.results import PASSED

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
    return tests, learner_ids, id_tests


def _test_rows(tests: dict, test_exercise: dict, exercises: list[str], small_class: bool) -> list[dict]:
    """The pass rate of each test cell, in the order of the notebook's exercises."""
    rows = []
    for (notebook, test), tally in sorted(tests.items(), key=lambda item: _test_order(item[0], test_exercise,
                                                                                     exercises)):
        row = {"notebook": notebook, "test": test, "exercise": test_exercise.get(test, ""),
               "learners": tally["learners"]}
        if small_class:
            row.update(passed=SUPPRESSED, percent=None, ci_low=None, ci_high=None)
        else:
            row.update(passed=tally["passed"], **proportion(tally["passed"], tally["learners"]))
        rows.append(row)
    return rows


def _test_order(key: tuple[str, str], test_exercise: dict, exercises: list[str]):
    notebook, test = key
    exercise = test_exercise.get(test)
    return notebook, exercises.index(exercise) if exercise in exercises else len(exercises), test


def _named(mid: str) -> dict:
    from grader import catalogue

    entry = catalogue.get(mid)
    if entry is None:
        return {"id": mid, "name": mid, "concept": "", "note": "", "catalogued": False}
    return {"id": mid, "name": entry.name, "concept": entry.concept, "note": entry.note, "catalogued": True}


def _misconception_rows(counts: Counter, id_tests: dict, n: int, identify: bool) -> list[dict]:
    """Each diagnosed misconception, most frequent first (ties in catalogue order), with the tests that found it."""
    from grader import catalogue

    order = {mid: i for i, mid in enumerate(catalogue.all_misconceptions())}
    ranked = sorted(counts.items(), key=lambda item: (-item[1], order.get(item[0], len(order)), item[0]))
    return [{**_named(mid), "learners": n, **group(count, n, identify),
             "tests": [t for t, _ in id_tests[mid].most_common(5)]} for mid, count in ranked]


def _pair_rows(learner_ids: dict, counts: Counter, n: int, identify: bool) -> list[dict]:
    """Every pair of misconceptions diagnosed in one learner, most frequent first, with its lift
    P(a and b) / (P(a) P(b)) when the pair is not suppressed."""
    pair_counts = Counter(pair for ids in learner_ids.values() for pair in itertools.combinations(sorted(ids), 2))
    pairs = []
    for (a, b), count in sorted(pair_counts.items(), key=lambda item: (-item[1], item[0])):
        row = {"a": a, "b": b, "name_a": _named(a)["name"], "name_b": _named(b)["name"], "learners": n,
               **group(count, n, identify), "lift": None}
        if row["count"] != SUPPRESSED:
            row["lift"] = n * count / (counts[a] * counts[b])
        pairs.append(row)
    return pairs


def _attempt_rows(logs: dict | None, exercises: list[str], identify: bool) -> list[dict]:
    """Per exercise, over the learners whose log mentions it: check runs and highest hint level (quartiles)."""
    rows = []
    for exercise in exercises if logs is not None else []:
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
        rows.append(row)
    return rows


def _attempt_learners(logs: dict | None, identify: bool):
    """How many learners have a log: None without logs at all, suppressed when 1 to MIN_GROUP - 1."""
    if logs is None:
        return None
    return len(logs) if identify or len(logs) >= MIN_GROUP or not logs else SUPPRESSED


def _flags(results_by_student: dict, students: list[str]) -> list[dict]:
    return [{"learner": student, "notebook": notebook, "test": flag["test"], "check": flag["check"],
             "seen": flag["seen"]}
            for student in students for notebook, result in sorted(results_by_student[student].items())
            for flag in result.get("flags", [])]


def _by_learner(results_by_student: dict, students: list[str], learner_ids: dict) -> dict:
    """student -> the misconceptions diagnosed and the tests failed (only with --identify)."""
    from grader.grading.run.results import PASSED

    return {s: {"misconceptions": sorted(learner_ids[s]),
                "failed": sorted(t for r in results_by_student[s].values()
                                 for t, e in r["tests"].items() if e["status"] != PASSED)}
            for s in students}
