"""The 03_backward checks accept correct variants and diagnose classic mistakes."""
import sys

import numpy as np
import pytest

from grader.checks import backward as checks
from grader.compare import CheckFailed
from tests.check_helpers import assert_diagnosis_named, assert_mistakes_named_exactly, table_cases
from tests.implementations import backward as impl


@pytest.mark.parametrize("jacobian", impl.CORRECT_JACOBIANS, ids=lambda f: f.__name__)
def test_correct_jacobians_pass(jacobian):
    checks.check_layer_norm_jacobian(jacobian)
    checks.check_layer_norm_jacobian(jacobian, d=9, eps=1.0, seed=3)
    checks.check_layer_norm_jacobian(jacobian, d=5, seed=4, scale=1e-3, offset=5.0)
    checks.check_jacobian_is_projection(jacobian, d=7)


@table_cases(impl.WRONG_JACOBIANS)
def test_wrong_jacobians_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_layer_norm_jacobian, function, expected, kwargs)


@table_cases(impl.MISTAKE_COMBINATIONS_JACOBIAN)
def test_jacobian_mistakes_are_all_named_and_only_those(function, expected, kwargs):
    # stricter than the forward checks' tests: a phrase inside a named one must not appear either
    assert_mistakes_named_exactly(checks.check_layer_norm_jacobian, function, expected, kwargs, impl.ALL_NAMED,
                                  allow_contained=False)


@pytest.mark.parametrize("name", ["no mean term", "no variance term", "no division by s", "x instead of x_hat"])
def test_projection_check_rejects(name):
    with pytest.raises(CheckFailed):
        checks.check_jacobian_is_projection(impl.WRONG_JACOBIANS[name][0])


@pytest.mark.parametrize("vjp", impl.CORRECT_VJPS, ids=lambda f: f.__name__)
def test_correct_vjps_pass(vjp):
    checks.check_layer_norm_vjp(vjp, impl.jacobian_entrywise)
    checks.check_layer_norm_vjp(vjp, d=33, eps=1.0, seed=2, scale=1e-3, offset=-3.0)
    checks.check_vjp_memory(vjp, d=2048)


@table_cases(impl.WRONG_VJPS)
def test_wrong_vjps_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_layer_norm_vjp, function, expected, kwargs)


def test_vjp_that_builds_the_jacobian_fails_the_memory_check():
    with pytest.raises(CheckFailed, match="built the Jacobian") as failure:
        checks.check_vjp_memory(impl.vjp_builds_jacobian, d=2048)
    assert "builds a (d, d) matrix" in str(failure.value)


def test_torch_vjp_that_builds_the_jacobian_fails_the_memory_check():
    """torch allocates outside tracemalloc's sight; the check counts every tensor torch creates."""
    for d in (2048, 4096):
        with pytest.raises(CheckFailed) as failure:
            checks.check_vjp_memory(impl.vjp_torch_builds_jacobian, d=d)
        text = str(failure.value)
        assert "builds a (d, d) matrix" in text and f"torch tensor of shape ({d}, {d})" in text, text


def test_vjp_memory_sees_torch_allocations():
    from grader.compare import measure_learner_memory

    x, g = np.ones(1024), np.ones(1024)
    _, report = measure_learner_memory(impl.vjp_torch_builds_jacobian, x, g, track_torch=True)
    assert report.torch_peak >= 1024 * 1024 * 8 and report.largest_shape == (1024, 1024)
    _, report = measure_learner_memory(impl.vjp_torch_vectors, x, g, track_torch=True)
    assert 0 < report.torch_peak < 64 * 1024 * 8


def test_vjp_disagreeing_with_jacobian_is_reported():
    with pytest.raises(CheckFailed, match="disagree"):
        checks.check_layer_norm_vjp(impl.vjp_means, impl.jacobian_eps_ignored, eps=1.0)


@pytest.mark.parametrize("backward", impl.CORRECT_BACKWARDS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(2, 3, 5), (7,), (4, 16), (2, 2, 3, 7)])
def test_correct_backwards_pass(backward, shape):
    checks.check_layer_norm_backward(backward, shape=shape)


@table_cases(impl.WRONG_BACKWARDS)
def test_wrong_backwards_are_diagnosed(function, expected, kwargs):
    assert_diagnosis_named(checks.check_layer_norm_backward, function, expected, kwargs)


def test_stub_raises_not_implemented():
    def stub(x, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        checks.check_layer_norm_jacobian(stub)


@pytest.mark.slow  # a grading sandbox importing torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the grading sandbox runs on Linux")
def test_torch_jacobian_is_seen_through_a_grading_sandbox():
    """Under grader grade the measurement is taken in the sandbox, around the real call: the learner's own process,
    so what it sees is evidence for the instructor (noted, and said in the output), not a failed check."""
    from grader.grading.sandbox.client import Sandbox
    from tests.implementations import define_in_sandbox

    with Sandbox(mode="auto") as box:
        builds = define_in_sandbox(box, impl.vjp_torch_builds_jacobian, "layer_norm_vjp")
        checks.check_vjp_memory(builds, d=2048)
        assert [e["check"] for e in box.evidence] == ["memory"], box.evidence
        assert "MiB at its peak" in box.evidence[0]["seen"], box.evidence
        box.evidence.clear()
        vectors = define_in_sandbox(box, impl.vjp_torch_vectors, "layer_norm_vjp")
        checks.check_vjp_memory(vectors, d=2048)
