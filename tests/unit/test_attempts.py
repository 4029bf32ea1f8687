"""The attempt log: what it records and displays, what it reads back, and that it survives a restart."""
from __future__ import annotations

import json
import math
import os
import sys
import time

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader import attempts, learner
from grader.attempts import MIME, read_attempts
from grader.checks.rmsnorm import check_rms_norm
from grader.compare import CheckFailed
from tests.conftest import ROOT, subprocess_env
from tests.implementations.rmsnorm import rms_eps_outside, rms_vectorised


def payloads(bundles) -> list[dict]:
    return [b[MIME] for b in bundles if MIME in b]


def rms_wrong(x, gamma, eps=1e-6):
    return rms_eps_outside(x, gamma, eps)


def fail_once(function=rms_wrong):
    with pytest.raises(CheckFailed):
        check_rms_norm(function)


def as_notebook(bundles) -> nbformat.NotebookNode:
    """A notebook whose one cell holds the displayed attempt outputs, as Jupyter saves them."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("check_rms_norm(rms_norm)")
    cell.outputs = [nbformat.v4.new_output("display_data", data=b) for b in bundles if MIME in b]
    nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


# ------------------------------------------------------------------ recording
def test_a_check_records_and_displays_an_invisible_output(shown):
    fail_once()
    (bundle,) = shown
    assert bundle["text/plain"] == "" and set(bundle) == {MIME, "text/plain"}
    payload = bundle[MIME]
    assert payload["version"] == 1
    (record,) = payload["records"]
    assert set(record) <= {"exercise", "kind", "check", "outcome", "misconceptions", "level", "time", "run"}
    assert record["exercise"] == "rms_norm" and record["kind"] == "check" and record["check"] == "check_rms_norm"
    assert record["outcome"] == "failed" and record["level"] is None
    assert abs(record["time"] - time.time()) < 60
    json.dumps(payload)  # plain JSON


def test_each_output_carries_every_record_of_its_exercise_capped(shown):
    fail_once()
    check_rms_norm(rms_vectorised)
    learner.hint("rms_norm")
    learner.hint("layernorm")
    by_exercise = [[r["exercise"] for r in p["records"]] for p in payloads(shown)]
    assert by_exercise == [["rms_norm"], ["rms_norm"] * 2, ["rms_norm"] * 3, ["layernorm"]]
    for _ in range(attempts.KEEP + 20):
        attempts.record("rms_norm", "hint", level=1)
    last = payloads(shown)[-1]["records"]
    assert len(last) == attempts.KEEP and last[-1] == attempts.records("rms_norm")[-1]
    assert len(attempts.records("rms_norm")) == attempts.KEEP + 23  # the kernel keeps them all


def test_times_are_distinct_so_records_never_collapse(shown):
    for _ in range(50):
        attempts.record("layernorm", "check", check="check_layernorm", outcome="passed")
    times = [r["time"] for r in attempts.records()]
    assert len(set(times)) == 50 and times == sorted(times)


def test_invalid_records_are_refused(shown):
    assert attempts.record("no_such_exercise", "check", check="check_x", outcome="passed") is None
    assert attempts.record("rms_norm", "check", check="check_rms_norm", outcome="maybe") is None
    assert attempts.record("rms_norm", "hint", level=7) is None
    assert attempts.record("rms_norm", "check", check="check_rms_norm", outcome="failed",
                           misconceptions=["Not An Id"]) is None
    assert shown == [] and attempts.records() == []


def test_outside_a_kernel_nothing_is_recorded_or_displayed():
    displayed = []
    attempts._testing(live=False, display=displayed.append)
    try:
        fail_once()
        assert attempts.record("rms_norm", "hint", level=1) is None
        assert displayed == [] and attempts.records() == []
    finally:
        attempts._stop_testing()


def test_plain_process_detection_imports_nothing():
    """No IPython in sys.modules: not a kernel, and the log does not import IPython to find out."""
    import subprocess

    code = ("import sys; import grader.learner, grader.attempts as a; "
            "print(a.live(), 'IPython' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env=subprocess_env(), timeout=120)
    assert result.stdout.split() == ["False", "False"], result.stdout + result.stderr
    assert result.stderr == ""


# ------------------------------------------------------------------ reading back
def test_read_attempts_reads_what_was_displayed_and_dedupes(shown):
    fail_once()
    learner.hint("rms_norm")
    learner.hint("layernorm")
    nb = as_notebook(shown)
    assert read_attempts(nb) == attempts.records()
    text = nbformat.writes(nb)
    assert read_attempts(text) == attempts.records() == read_attempts(text.encode())
    assert read_attempts(json.loads(text)) == attempts.records()
    doubled = as_notebook(shown + shown)
    assert read_attempts(doubled) == attempts.records()


def test_a_payload_stored_as_json_text_is_read_too(shown):
    fail_once()
    nb = as_notebook(shown)
    nb.cells[0].outputs[0]["data"][MIME] = json.dumps(nb.cells[0].outputs[0]["data"][MIME])
    assert read_attempts(nb) == attempts.records()


def test_first_use_in_a_kernel_reads_the_saved_notebook(shown, tmp_path, monkeypatch):
    fail_once()
    learner.hint("rms_norm")
    saved = attempts.records()
    path = tmp_path / "04_rmsnorm.ipynb"
    nbformat.write(as_notebook(shown), path)
    attempts.clear()  # a new kernel: nothing in memory, not yet loaded
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    assert attempts.records() == saved
    attempts.record("rms_norm", "hint", level=2)
    assert len(attempts.records()) == len(saved) + 1 and attempts.records()[-1]["time"] > saved[-1]["time"]


def test_a_missing_or_huge_notebook_is_ignored(shown, tmp_path, monkeypatch):
    attempts.clear()
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "gone.ipynb"))
    assert attempts.records() == []
    attempts.clear()
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * 10)
    monkeypatch.setattr(attempts, "MAX_NOTEBOOK_BYTES", 5)
    monkeypatch.setenv("JPY_SESSION_NAME", str(big))
    assert attempts.records() == []


GOOD = {"exercise": "rms_norm", "kind": "check", "check": "check_rms_norm", "outcome": "failed",
        "misconceptions": ["common.not_an_array"], "level": None, "time": 1.7e9}


def wrap(records, version=1) -> dict:
    return {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {MIME: {"version": version, "records": records}}}]}]}


@pytest.mark.parametrize("change", [
    {"exercise": "nope"}, {"exercise": 3}, {"kind": "peek"}, {"check": None}, {"check": "rm -rf"},
    {"check": "check_" + "x" * 200}, {"outcome": None}, {"outcome": "passed!"}, {"level": 2},
    {"misconceptions": "common.not_an_array"}, {"misconceptions": ["common.not_an_array"] * 33},
    {"misconceptions": ["COMMON"]}, {"misconceptions": [7]}, {"time": float("nan")}, {"time": float("inf")},
    {"time": -1.0}, {"time": 1e12}, {"time": True}, {"time": "1.7e9"},
])
def test_every_field_is_validated(change):
    assert read_attempts(wrap([GOOD])) == [GOOD]
    assert read_attempts(wrap([{**GOOD, **change}])) == []


def test_hint_records_are_validated():
    hint = {**GOOD, "kind": "hint", "check": None, "outcome": None, "level": 3}
    assert read_attempts(wrap([hint])) == [hint]
    for change in ({"level": None}, {"level": 0}, {"level": 5}, {"level": True}, {"level": 2.0},
                   {"check": "check_rms_norm"}, {"outcome": "passed"}):
        assert read_attempts(wrap([{**hint, **change}])) == []
    assert read_attempts(wrap([GOOD], version=2)) == [] and read_attempts(wrap([GOOD], version=True)) == []


def test_work_is_bounded():
    """Bounded in CPU time, this process's own (a busy machine stretches wall time, not this): walking all
    10^8 outputs would take minutes of CPU; the bounds are several times what the reader needs."""
    many = [{**GOOD, "time": 1.7e9 + i} for i in range(200_000)]
    began = time.process_time()
    found = read_attempts(wrap(many))
    assert time.process_time() - began < 3.0
    assert [r["time"] for r in found] == [1.7e9 + i for i in range(200_000 - attempts.KEEP, 200_000)]
    output = {"output_type": "display_data", "data": {MIME: {"version": 1, "records": [GOOD]}}}
    wide = {"cells": [{"outputs": [output] * 10_000}] * 10_000}  # 10^8 outputs, by reference
    began = time.process_time()
    assert read_attempts(wide) == [GOOD]
    assert time.process_time() - began < 6.0


# ------------------------------------------------------------------ hostile structures
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
json_like = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=30)
fields = st.fixed_dictionaries({}, optional={
    "exercise": st.one_of(st.sampled_from(["rms_norm", "layernorm", "x"]), json_like),
    "kind": st.one_of(st.sampled_from(["check", "hint"]), json_like),
    "check": st.one_of(st.sampled_from(["check_rms_norm", None]), json_like),
    "outcome": st.one_of(st.sampled_from(list(attempts.OUTCOMES) + [None]), json_like),
    "misconceptions": st.one_of(st.lists(st.sampled_from(["common.not_an_array", "x", ""]), max_size=3), json_like),
    "level": st.one_of(st.integers(-2, 6), st.none(), json_like),
    "time": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), json_like),
})
records = st.lists(st.one_of(fields, json_like), max_size=6)
outputs = st.lists(st.one_of(
    st.fixed_dictionaries({"output_type": st.sampled_from(["display_data", "execute_result", "stream", "error"]),
                           "data": st.one_of(st.fixed_dictionaries({MIME: st.one_of(
                               st.fixed_dictionaries({"version": st.one_of(st.just(1), json_like),
                                                      "records": st.one_of(records, json_like)}),
                               records.map(lambda r: json.dumps({"version": 1, "records": r}, default=str)),
                               json_like)}), json_like)}),
    json_like), max_size=4)
notebooks = st.one_of(
    st.fixed_dictionaries({"cells": st.one_of(st.lists(st.one_of(st.fixed_dictionaries({"outputs": outputs}),
                                                                 json_like), max_size=4), json_like)}),
    json_like, st.binary(max_size=200), st.text(max_size=200))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notebooks)
def test_read_attempts_never_raises_and_returns_only_valid_records(nb):
    found = read_attempts(nb)
    assert isinstance(found, list)
    for record in found:
        assert attempts.validate(record) == record
    assert len({(r["exercise"], r["kind"], r["check"], r["time"]) for r in found}) == len(found)
    assert [r["time"] for r in found] == sorted(r["time"] for r in found)
    assert all(math.isfinite(r["time"]) for r in found)


@given(st.binary(max_size=2000))
@settings(max_examples=100, deadline=None)
def test_any_bytes_are_read_without_raising(data):
    assert read_attempts(data) == [] or all(attempts.validate(r) for r in read_attempts(data))


class Hostile(dict):
    def get(self, *args):
        raise RuntimeError("no")

    def __getitem__(self, key):
        raise RuntimeError("no")


def test_objects_that_raise_are_skipped():
    good = wrap([GOOD])
    cells = good["cells"]
    assert read_attempts({"cells": [Hostile(), *cells, {"outputs": [Hostile()]}]}) == [GOOD]
    assert read_attempts({"cells": [{"outputs": [{"output_type": "display_data",
                                                 "data": {MIME: {"version": 1, "records": [Hostile(), GOOD]}}}]}]}) \
        == [GOOD]
    assert read_attempts(Hostile()) == [] and read_attempts(object()) == [] and read_attempts(None) == []
    deep = "[" * 100_000 + "]" * 100_000
    assert read_attempts(deep) == [] and read_attempts('{"cells": ' + deep + "}") == []
    assert read_attempts('{"cells": [{"outputs": [{"output_type": "display_data", "data": {"%s": "%s"}}]}]}'
                         % (MIME, deep.replace('"', ""))) == []


# ------------------------------------------------------------------ a real kernel, restarted
def execute(nb, env: dict, workdir):
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=300, startup_timeout=120, allow_errors=True, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    client.execute(env=env, cwd=str(workdir))
    return nb


@pytest.mark.slow  # two real kernels
def test_attempts_survive_a_kernel_restart(tmp_path):
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    first = nbformat.v4.new_notebook()
    first.cells = [
        nbformat.v4.new_code_cell("from grader.learner import hint, progress\n"
                                  "from grader.checks.rmsnorm import check_rms_norm\nimport numpy as np"),
        nbformat.v4.new_code_cell("def rms_norm(x, gamma, eps=1e-6):\n    return (gamma * x / np.sqrt(np.mean(x * x)"
                                  " + eps)).tolist()"),
        nbformat.v4.new_code_cell("check_rms_norm(rms_norm)"),
        nbformat.v4.new_code_cell('hint("rms_norm")'),
    ]
    path = tmp_path / "04_rmsnorm.ipynb"
    execute(first, env, tmp_path)
    assert first.cells[2].outputs[-1].output_type == "error"
    nbformat.write(first, path)
    saved = read_attempts(nbformat.read(path, as_version=4))
    assert [(r["kind"], r["outcome"], r["level"]) for r in saved] == [("check", "failed", None), ("hint", None, 1)]
    assert "common.not_an_array" in saved[0]["misconceptions"]

    env["JPY_SESSION_NAME"] = str(path)
    second = nbformat.v4.new_notebook()
    second.cells = [
        nbformat.v4.new_code_cell("from grader.learner import hint, progress"),
        nbformat.v4.new_code_cell('progress("04_rmsnorm")'),
        nbformat.v4.new_code_cell('hint("rms_norm")'),
        nbformat.v4.new_code_cell("from grader import attempts\nprint(len(attempts.records()))"),
    ]
    execute(second, env, tmp_path)
    table = second.cells[1].outputs[0].data["text/plain"]
    row = next(line for line in table.splitlines() if line.startswith("rms_norm "))
    assert row.split()[:2] == ["rms_norm", "✘"] and " 1 " in row and "1 of 3" in row
    assert "Hint 2 of 3 for rms_norm" in second.cells[2].outputs[0].data["text/plain"]  # the ladder went on
    assert second.cells[3].outputs[-1].text.strip() == "3"
    for cell in first.cells + second.cells:
        assert not [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"], cell.outputs
