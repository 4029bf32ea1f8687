"""progress(): one table per notebook, from the attempt log only, fast with a long log."""
from __future__ import annotations

import random
import time

from grader import attempts, catalogue, learner
from grader.checks.backward import check_jacobian_is_projection, check_layer_norm_jacobian
from grader.checks.rmsnorm import check_rms_norm
from grader.compare import CheckFailed
from grader.exercises import EXERCISES, for_notebook
from grader.learner import progress
from tests.implementations.rmsnorm import rms_eps_outside, rms_vectorised


def table(bundles, *args, namespace=None) -> dict[str, list[str]]:
    """Call progress() (from ``namespace`` if given); its plain-text rows by exercise."""
    before = len(bundles)
    if namespace is None:
        progress(*args)
    else:
        exec("progress(*args)", {"progress": progress, "args": args, **namespace})
    (bundle,) = bundles[before:]
    assert set(bundle) == {"text/markdown", "text/plain"}
    rows = {}
    for line in bundle["text/plain"].splitlines()[3:-1]:
        cells = [c for c in line.split("  ") if c.strip()]
        rows[cells[0].strip()] = [c.strip() for c in cells[1:]]
    bundle["rows"] = rows
    return bundle


def run(check, function):
    try:
        check(function)
    except (CheckFailed, NotImplementedError):
        pass


def rms_wrong(x, gamma, eps=1e-6):
    return rms_eps_outside(x, gamma, eps)


def not_written(x, gamma, eps=1e-6):
    raise NotImplementedError()


def test_symbols_follow_the_last_run_of_each_check(shown):
    out = table(shown, "04_rmsnorm")
    assert out["rows"] == {name: ["–", "–", "0", "–"] for name in ("rms_norm", "rms_norm_backward", "rms_norm_bf16")}

    run(check_rms_norm, not_written)
    assert table(shown, "04_rmsnorm")["rows"]["rms_norm"][:3] == ["–", "–", "0"]  # not implemented: not an attempt

    run(check_rms_norm, rms_wrong)
    row = table(shown, "04_rmsnorm")["rows"]["rms_norm"]
    failure_ids = attempts.records("rms_norm")[-1]["misconceptions"]
    names = [catalogue.get(i).name for i in failure_ids if catalogue.get(i)]
    assert row[0] == "✘" and row[2] == "1"
    assert row[1] == (names[0] if names else "see the message of check_rms_norm")

    run(check_rms_norm, rms_vectorised)
    out = table(shown, "04_rmsnorm")
    assert out["rows"]["rms_norm"] == ["✔", "–", "2", "–"]
    assert "| `rms_norm` | ✔ | – | 2 | – |" in out["text/markdown"]

    learner.hint("rms_norm")
    learner.hint("rms_norm")
    assert table(shown, "04_rmsnorm")["rows"]["rms_norm"][3] == "2 of 3"


def test_every_check_of_an_exercise_must_pass(shown):
    from tests.implementations.backward import jacobian_matrix_form  # a correct Jacobian

    run(check_layer_norm_jacobian, jacobian_matrix_form)
    assert table(shown, "03_backward")["rows"]["layer_norm_jacobian"][0] == "–"  # one of two checks run
    run(check_jacobian_is_projection, jacobian_matrix_form)
    assert table(shown, "03_backward")["rows"]["layer_norm_jacobian"][0] == "✔"

    def wrong(x, eps=1e-5):
        return 2.0 * jacobian_matrix_form(x, eps)

    run(check_jacobian_is_projection, wrong)
    assert table(shown, "03_backward")["rows"]["layer_norm_jacobian"][0] == "✘"


def test_the_notebook_comes_from_the_namespace_then_from_the_log(shown):
    def welford_mean_var(x):
        raise NotImplementedError()

    def welford_combine(a, b):
        raise NotImplementedError()

    out = table(shown, namespace={"welford_mean_var": welford_mean_var, "welford_combine": welford_combine})
    assert "Your progress in 06_welford" in out["text/plain"]
    assert list(out["rows"]) == [e.name for e in for_notebook("06_welford")]

    run(check_rms_norm, rms_wrong)  # nothing defined here: the latest check decides
    assert "in 04_rmsnorm" in table(shown, namespace={})["text/plain"]
    assert "in 04_rmsnorm" in table(shown, "04")["text/plain"]
    assert "in 04_rmsnorm" in table(shown, "rmsnorm")["text/plain"]


def test_without_any_clue_progress_asks_for_the_notebook(shown):
    before = len(shown)
    exec("progress()", {"progress": progress})
    (bundle,) = shown[before:]
    assert 'progress("04_rmsnorm")' in bundle["text/plain"]


def test_progress_runs_no_check(shown):
    seen = []
    from grader import compare

    compare.add_observer(seen.append)
    try:
        for notebook in ("01_bn_vs_ln", "02_geometry", "03_backward", "04_rmsnorm", "05_placement", "06_welford"):
            table(shown, notebook)
    finally:
        compare.remove_observer(seen.append)
    assert seen == []


def synthetic_log(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    names = sorted(EXERCISES)
    ids = [m.id for m in list(catalogue.all_misconceptions().values())[:20]] or []
    log = []
    for i in range(n):
        exercise = EXERCISES[rng.choice(names)]
        if rng.random() < 0.8:
            log.append({"exercise": exercise.name, "kind": "check", "check": rng.choice(exercise.all_checks),
                        "outcome": rng.choice(attempts.OUTCOMES), "misconceptions": rng.sample(ids, min(2, len(ids))),
                        "level": None, "time": 1.7e9 + i})
        else:
            log.append({"exercise": exercise.name, "kind": "hint", "check": None, "outcome": None,
                        "misconceptions": [], "level": rng.randint(1, 4), "time": 1.7e9 + i})
    return log


def test_progress_is_fast_with_five_thousand_records(shown):
    attempts._merge([attempts.validate(r) for r in synthetic_log(5000)])
    assert len(attempts.records()) == 5000
    timings = []
    for notebook in ("04_rmsnorm", None, "04_rmsnorm", None, "04_rmsnorm", None):
        began = time.perf_counter()
        out = table(shown, notebook) if notebook else table(shown, namespace={})
        timings.append(time.perf_counter() - began)
        assert out["rows"]
    print(f"progress() with 5000 records: {', '.join(f'{t * 1000:.1f} ms' for t in timings)}")
    assert max(timings) < 2.0 and min(timings) < 0.2  # "well under 2 s", even on a loaded machine


def test_the_checks_one_cell_runs_count_as_one_run(shown, monkeypatch):
    """A test cell calls its check several times (other shapes, eps values): one run of the cell is one run."""
    cell = iter(range(1, 100))
    current = {"count": next(cell)}
    monkeypatch.setattr(attempts, "execution_count", lambda: current["count"])
    for _ in range(3):  # three runs of a cell that calls the check four times
        for shape in ((4, 8), (2, 3, 8), (8,), (5, 8)):
            run(check_rms_norm, rms_wrong) if shape else None
        current["count"] = next(cell)
    row = table(shown, "04_rmsnorm")["rows"]["rms_norm"]
    assert row[2] == "3", row
    assert len([r for r in attempts.records("rms_norm") if r["kind"] == "check"]) == 12


def test_progress_shows_where_each_exercise_stands_on_the_ladder(shown):
    run(check_rms_norm, rms_wrong)
    learner.hint("rms_norm")
    assert table(shown, "04_rmsnorm")["rows"]["rms_norm"][3] == "1 of 3 (step 2 open)"
    learner.hint("rms_norm")
    assert table(shown, "04_rmsnorm")["rows"]["rms_norm"][3] == "2 of 3 (step 3 after a failed run since step 2)"
    run(check_rms_norm, rms_wrong)
    assert table(shown, "04_rmsnorm")["rows"]["rms_norm"][3] == "2 of 3 (step 3 open)"
