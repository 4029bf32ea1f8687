"""Gradescope's and PrairieLearn's results.json, from the per-test data of one graded notebook.

Per-test scores (never the maxima), hidden tests' output only after publishing, the instructor-only
entry, a failure of the grader as a visible zero; PrairieLearn's 0..1 score and gradable flag.
"""
import json

from grader.grading.export import gradescope, prairielearn
from grader.grading.export.autograder import Graded, TestOutcome


def graded(readable=True) -> Graded:
    return Graded("04_rmsnorm", tests=[
        TestOutcome("test_rms_norm", 2.0, 2.0, "passed", "passed", False),
        TestOutcome("test_rms_norm_backward", 0.0, 3.0, "failed",
                    "CheckFailed: dgamma is off\nLikely mistake: dgamma not summed [rms.dgamma_axes]", True),
        TestOutcome("test_rms_norm_bf16", 0.0, 2.0, "not_run", "not run: the cell timed out", True)],
        notes=["04_rmsnorm: a note for the learner"], instructor_notes=["isolation degraded to basic: ..."],
        readable=readable, isolation="basic", seconds=12.2)


def test_gradescope_results_per_test():
    data = json.loads(json.dumps(gradescope.results_json(graded())))
    assert data["score"] == 2.0 and data["execution_time"] == 13
    tests = {t["name"]: t for t in data["tests"]}
    assert [t["score"] for t in data["tests"][:3]] == [2.0, 0.0, 0.0]
    assert [t["max_score"] for t in data["tests"][:3]] == [2.0, 3.0, 2.0]
    assert [t["status"] for t in data["tests"][:3]] == ["passed", "failed", "failed"]
    assert tests["test_rms_norm"]["visibility"] == "visible"
    assert tests["test_rms_norm_backward"]["visibility"] == "after_published"
    assert "dgamma not summed" in tests["test_rms_norm_backward"]["output"]
    instructor = tests[gradescope.INSTRUCTOR_TEST]
    assert instructor["visibility"] == "hidden" and instructor["max_score"] == 0
    assert "isolation: basic" in instructor["output"] and "degraded" in instructor["output"]
    assert "degraded" not in data["output"] and data["stdout_visibility"] == "hidden"


def test_gradescope_failure_is_a_visible_zero():
    data = gradescope.failed_json(7.0, "Traceback: boom", 3.2)
    assert data["score"] == 0.0
    failed = data["tests"][0]
    assert failed["name"] == "grading failed" and failed["visibility"] == "visible"
    assert failed["score"] == 0.0 and failed["max_score"] == 7.0
    assert data["tests"][1]["visibility"] == "hidden" and "boom" in data["tests"][1]["output"]


def test_prairielearn_results():
    data = prairielearn.results_json(graded())
    assert data["gradable"] is True and abs(data["score"] - 2 / 7) < 1e-12
    assert [(t["points"], t["max_points"]) for t in data["tests"]] == [(2.0, 2.0), (0.0, 3.0), (0.0, 2.0)]
    assert "dgamma" in data["tests"][1]["message"]
    unreadable = prairielearn.results_json(graded(readable=False))
    assert unreadable["gradable"] is False and "could not be read" in unreadable["message"]
    assert prairielearn.failed_json("")["score"] == 0.0
