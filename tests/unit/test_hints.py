"""The hint ladder: the exercises it knows are the notebooks' exercises, and it climbs in order.

Runs in this process: ``grader.attempts`` is told to behave as in a kernel and to hand its
displays to a list, so each test sees exactly what a learner would see, as mime bundles.
"""
from __future__ import annotations

import ast
import importlib
import re

import jupytext
import numpy as np
import pytest

from grader import attempts, catalogue, learner
from grader.checks.rmsnorm import check_rms_norm
from grader.compare import CheckFailed
from grader.course.build import HIDDEN_TESTS, script_to_notebook, solution_regions
from grader.exercises import EXERCISES, for_notebook
from grader.learner import hint
from tests.conftest import ASSIGNMENTS, ROOT
from tests.implementations.rmsnorm import rms_eps_outside, rms_vectorised


def visible(bundles) -> list[dict]:
    return [b for b in bundles if attempts.MIME not in b]


def ask(bundles, *args) -> dict:
    """One hint call; its single rich output."""
    before = len(visible(bundles))
    hint(*args)
    new = visible(bundles)[before:]
    assert len(new) == 1, new
    assert set(new[0]) == {"text/markdown", "text/plain"}
    return new[0]


def run(check, function):
    try:
        check(function)
    except CheckFailed as failure:
        return failure
    return None


# ------------------------------------------------------------------ the exercises are the notebooks'
def graded_exercises():
    """(notebook, grade_id, visible checks, hidden-only checks) for every graded solution cell of source/."""
    found = []
    for assignment in ASSIGNMENTS:
        cells = jupytext.read(ROOT / "source" / assignment / f"{assignment}.py").cells
        for index, cell in enumerate(cells):
            meta = cell.metadata.get("nbgrader", {})
            if not (cell.cell_type == "code" and meta.get("solution")):
                continue
            shown_checks, hidden_checks = [], []
            for test in cells[index + 1:]:
                test_meta = test.metadata.get("nbgrader", {})
                if test_meta.get("solution"):
                    break
                if test.cell_type != "code" or not test_meta.get("grade"):
                    continue
                public = HIDDEN_TESTS.sub("", test.source)
                for text, into in ((public, shown_checks), (test.source, hidden_checks)):
                    for node in ast.walk(ast.parse(text)):
                        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                                and node.func.id.startswith("check_") and node.func.id != "check_signature"):
                            assert isinstance(node.args[0], ast.Name) and node.args[0].id == meta["grade_id"], \
                                f"{node.func.id} in {test_meta['grade_id']} is not called on {meta['grade_id']}"
                            if node.func.id not in into:
                                into.append(node.func.id)
            found.append((assignment, meta["grade_id"], tuple(shown_checks),
                          tuple(c for c in hidden_checks if c not in shown_checks)))
    return found


def test_exercises_are_the_graded_solution_cells_of_source():
    derived = graded_exercises()
    assert len(derived) >= len(ASSIGNMENTS)
    assert [name for _, name, _, _ in derived] == [e.name for nb in ASSIGNMENTS for e in for_notebook(nb)]
    for notebook, name, shown_checks, hidden_checks in derived:
        exercise = EXERCISES[name]
        assert exercise.notebook == notebook
        assert exercise.checks == shown_checks, name
        assert exercise.hidden_checks == hidden_checks, name


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_check_named_exists_and_reports_to_the_log(name):
    exercise = EXERCISES[name]
    module = importlib.import_module(exercise.check_module)
    for check_name in exercise.all_checks:
        check = getattr(module, check_name, None)
        assert callable(check), f"{exercise.check_module}.{check_name} does not exist"
        assert hasattr(check, "__wrapped__"), f"{check_name} is not decorated with grader.compare.check"


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_hints_are_words_not_code(name):
    exercise = EXERCISES[name]
    for text in (exercise.concept, exercise.shape):
        assert len(text) > 80
        assert "`" not in text and "np." not in text and "torch." not in text and "def " not in text
        assert not re.search(r"\w\(\w*[,)=]|\w\[|\+=|\.\w+\(", text), text  # calls, indexing, methods


# ------------------------------------------------------------------ the ladder
def test_ladder_for_a_diagnosed_mistake(shown):
    """eps outside the square root: the idea, then the catalogue's hint for what the check named, then (after
    another failed run) the shape."""
    exercise = EXERCISES["rms_norm"]

    def rms_norm(x, gamma, eps=1e-6):
        return rms_eps_outside(x, gamma, eps)

    failure = run(check_rms_norm, rms_norm)
    assert failure is not None
    entries = [catalogue.get(i) for i in failure.misconceptions if catalogue.get(i) is not None]

    step1 = ask(shown, "rms_norm")
    assert "Hint 1 of 3 for rms_norm: the idea" in step1["text/plain"]
    assert exercise.concept in step1["text/markdown"] and exercise.concept in step1["text/plain"]
    assert 'hint("rms_norm")' in step1["text/plain"] and "step 2" in step1["text/plain"]

    step2 = ask(shown, rms_norm)  # the function itself works as well as its name
    assert "Hint 2 of 3" in step2["text/plain"] and "check_rms_norm" in step2["text/plain"]
    if entries:
        for entry in entries:
            assert entry.hint in step2["text/markdown"] and entry.name in step2["text/plain"]
    else:  # a catalogue still being written: the ladder says no classic mistake matched
        assert "did not match a classic mistake" in step2["text/plain"]
    assert "Step 3 (the shape of the code) opens after a failed run since you saw step 2" in step2["text/plain"]

    again = ask(shown, "rms_norm")  # no new try: the ladder stays
    assert "Hint 2 of 3" in again["text/plain"] and "opens after a failed run" in again["text/plain"]

    assert run(check_rms_norm, rms_norm) is not None
    step3 = ask(shown, "rms_norm")
    assert "Hint 3 of 3" in step3["text/plain"] and exercise.shape in step3["text/markdown"]
    assert exercise.concept not in step3["text/markdown"]

    hints = [r for r in attempts.records("rms_norm") if r["kind"] == "hint"]
    assert [r["level"] for r in hints] == [1, 2, 2, 3]
    assert hints[1]["misconceptions"] == [e.id for e in entries]


def test_step_two_shows_the_catalogue_entry_of_a_common_mistake(shown):
    def rms_norm(x, gamma, eps=1e-6):
        return rms_vectorised(x, gamma, eps).tolist()  # a list, not an array

    failure = run(check_rms_norm, rms_norm)
    assert "common.not_an_array" in failure.misconceptions
    entry = catalogue.get("common.not_an_array")
    ask(shown, "rms_norm")
    step2 = ask(shown, "rms_norm")
    assert entry.name in step2["text/plain"] and entry.hint in step2["text/plain"]
    assert entry.concept in step2["text/markdown"]


def test_without_a_run_the_ladder_stays_at_step_one_and_says_how_to_open_step_two(shown):
    outputs = [ask(shown, "welford_combine") for _ in range(4)]
    assert all("Hint 1 of 3 for welford_combine" in o["text/plain"] for o in outputs)
    assert "check_welford_combine(welford_combine)" in outputs[-1]["text/plain"]
    assert "Step 2 (what your checks said) opens once the checks have run" in outputs[-1]["text/plain"]
    asked = ask(shown, "welford_combine", 3)  # asking for a step by number does not skip the ladder either
    assert "Hint 1 of 3" in asked["text/plain"]
    assert {r["level"] for r in attempts.records("welford_combine")} == {1}


def test_step_two_after_a_passing_run_says_there_is_nothing_to_diagnose(shown):
    from grader.checks.welford import check_welford_combine
    from tests.diagnosis_harness import solution

    assert run(check_welford_combine, solution("06_welford", "welford_combine")) is None
    ask(shown, "welford_combine")
    step2 = ask(shown, "welford_combine")
    assert "Hint 2 of" in step2["text/plain"] and "there is no mistake to diagnose" in step2["text/plain"]
    assert "nothing left to unlock" in step2["text/plain"]
    assert "Hint 2 of" in ask(shown, "welford_combine")["text/plain"]  # a pass opens no step 3
    assert "Hint 1 of" in ask(shown, "welford_combine", 1)["text/plain"]  # revisiting an earlier step works


def test_a_check_function_or_an_unknown_name_resolves_or_explains(shown):
    assert "for rms_norm" in ask(shown, check_rms_norm)["text/plain"]
    message = ask(shown, "rms_nrom")["text/plain"]
    assert "'rms_nrom' is not an exercise" in message and '"rms_norm"' in message
    assert "needs the name of an exercise" in ask(shown)["text/plain"]
    assert not attempts.records("rms_nrom") and len(attempts.records()) == 1  # only the check_rms_norm hint


def register(notebook: str) -> dict[str, str]:
    regions = solution_regions(script_to_notebook(ROOT / "source" / notebook / f"{notebook}.py"))
    learner.register_solutions({name: learner.encode_solution(text) for name, text in regions.items()})
    return regions


def test_release_edition_stops_at_step_three_and_says_so(shown):
    def rms_norm(x, gamma, eps=1e-6):
        return rms_eps_outside(x, gamma, eps)

    for _ in range(5):
        run(check_rms_norm, rms_norm)
    heads = [ask(shown, "rms_norm")["text/plain"].split(" for")[0] for _ in range(3)]
    assert heads == ["Hint 1 of 3", "Hint 2 of 3", "Hint 2 of 3"]  # runs before step 2 do not open step 3
    run(check_rms_norm, rms_norm)
    outputs = [ask(shown, "rms_norm") for _ in range(3)]
    assert [o["text/plain"].split(" for")[0] for o in outputs] == ["Hint 3 of 3"] * 3
    assert "no solution sketches" in outputs[0]["text/plain"]
    assert "```" not in "".join(o["text/markdown"] for o in outputs)


def test_self_study_sketch_after_two_failed_runs(shown):
    regions = register("04_rmsnorm")

    def rms_norm(x, gamma, eps=1e-6):
        return rms_eps_outside(x, gamma, eps)

    run(check_rms_norm, rms_norm)
    steps = [ask(shown, "rms_norm"), ask(shown, "rms_norm")]
    run(check_rms_norm, rms_norm)
    steps += [ask(shown, "rms_norm"), ask(shown, "rms_norm")]
    assert [s["text/plain"].split(":")[0] for s in steps] == [
        "Hint 1 of 4 for rms_norm", "Hint 2 of 4 for rms_norm", "Hint 3 of 4 for rms_norm", "Hint 4 of 4 for rms_norm"]
    assert f"```python\n{regions['rms_norm'].rstrip()}\n```" in steps[3]["text/markdown"]
    for line in regions["rms_norm"].splitlines():
        assert line in steps[3]["text/plain"]
    assert "Hint 4 of 4" in ask(shown, "rms_norm")["text/plain"]  # it stays there


def test_self_study_sketch_needs_two_failed_runs_however_often_one_asks(shown):
    register("04_rmsnorm")
    exercise = EXERCISES["rms_norm_backward"]
    from grader.checks.rmsnorm import check_rms_norm_backward
    from tests.implementations.rmsnorm import rms_vectorised as forward

    def rms_norm_backward(dy, x, gamma, eps=1e-6):
        dx, dgamma = solution_backward(dy, x, gamma, eps)
        return 2.0 * dx, dgamma

    from tests.diagnosis_harness import solution

    solution_backward = solution("04_rmsnorm", "rms_norm_backward")
    assert run(check_rms_norm_backward, rms_norm_backward) is not None
    ask(shown, "rms_norm_backward")
    ask(shown, "rms_norm_backward")
    assert run(check_rms_norm_backward, rms_norm_backward) is not None
    assert "Hint 3 of 4" in ask(shown, "rms_norm_backward")["text/plain"]
    # two failed runs are there, but the sketch also waits for step 3 to have been seen: it has; so it opens
    sketch = ask(shown, "rms_norm_backward")
    assert "Hint 4 of 4" in sketch["text/plain"] and "```python" in sketch["text/markdown"]
    assert forward is not None and exercise.shape


def test_one_failed_run_never_opens_the_sketch(shown):
    register("04_rmsnorm")

    def rms_norm(x, gamma, eps=1e-6):
        return rms_eps_outside(x, gamma, eps)

    run(check_rms_norm, rms_norm)
    texts = [ask(shown, "rms_norm")["text/plain"] for _ in range(6)]
    assert [t.split(":")[0] for t in texts] == ["Hint 1 of 4 for rms_norm"] + ["Hint 2 of 4 for rms_norm"] * 5
    assert "so far 1" not in texts[-1]  # step 3 is the closed one here, and it says so
    assert "opens after a failed run since you saw step 2" in texts[-1]


def test_not_implemented_runs_do_not_open_step_two(shown):
    register("04_rmsnorm")

    def rms_norm(x, gamma, eps=1e-6):
        raise NotImplementedError()

    for _ in range(4):
        with pytest.raises(NotImplementedError):
            check_rms_norm(rms_norm)
    texts = [ask(shown, "rms_norm")["text/plain"] for _ in range(4)]
    assert all("Hint 1 of 4" in t for t in texts) and "opens once the checks have run" in texts[3]


def test_outside_a_kernel_hint_prints_text_and_records_nothing(monkeypatch, capsys):
    attempts._testing(live=False)
    monkeypatch.setattr(learner, "_plain_hints", {})
    monkeypatch.setattr(learner, "_plain_checks", {})
    try:
        hint("rms_norm")
        run(check_rms_norm, lambda x, gamma, eps=1e-6: rms_eps_outside(x, gamma, eps))
        hint("rms_norm")
        out = capsys.readouterr()
        assert "Hint 1 of 3 for rms_norm" in out.out and "Hint 2 of 3 for rms_norm" in out.out
        assert out.err == "" and attempts.records() == []
    finally:
        attempts._stop_testing()


def test_hint_does_not_run_checks(shown, monkeypatch):
    seen = []
    from grader import compare

    compare.add_observer(seen.append)
    try:
        for _ in range(4):
            ask(shown, "layernorm")
        learner.progress("01_bn_vs_ln")
    finally:
        compare.remove_observer(seen.append)
    assert seen == []


def test_rms_norm_of_the_solution_passes_with_the_correct_implementation(shown):
    """A sanity check of the fixture: a correct rms_norm passes, and the log says so."""
    assert run(check_rms_norm, rms_vectorised) is None
    (record,) = attempts.records("rms_norm")
    assert record["outcome"] == "passed" and record["check"] == "check_rms_norm"
    assert np.isfinite(record["time"])
