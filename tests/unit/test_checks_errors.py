"""An exception raised by the learner's code inside any check becomes a diagnosis, never a raw traceback.

The check names the call (the function, its arguments' shapes and dtypes), the exception and
its message, the learner's line that raised it, and the likely cause; a function that handles
only 2-D or 3-D inputs is told that it must accept any shape (..., d). The unwritten exercise
(``raise NotImplementedError()``) still stops with NotImplementedError.
"""
import numpy as np
import pytest

from grader.checks import backward, bn_vs_ln, geometry, placement, rmsnorm, welford
from grader.compare import CheckFailed, LearnerError
from tests.implementations import backward as backward_impl
from tests.implementations import bn_vs_ln as bn_vs_ln_impl
from tests.implementations import rmsnorm as rmsnorm_impl

# Every public check of every assignment, with the arguments that follow the learner's function.
CHECKS = {
    "check_layernorm": (bn_vs_ln.check_layernorm, ()),
    "check_batch_norm": (bn_vs_ln.check_batch_norm, ()),
    "check_leaks_future": (bn_vs_ln.check_leaks_future, ()),
    "check_complement_projection": (geometry.check_complement_projection, ()),
    "check_invariance_gap": (geometry.check_invariance_gap, ()),
    "check_layer_norm_jacobian": (backward.check_layer_norm_jacobian, ()),
    "check_jacobian_is_projection": (backward.check_jacobian_is_projection, ()),
    "check_layer_norm_vjp": (backward.check_layer_norm_vjp, ()),
    "check_vjp_memory": (backward.check_vjp_memory, ()),
    "check_layer_norm_backward": (backward.check_layer_norm_backward, ()),
    "check_rms_norm": (rmsnorm.check_rms_norm, ()),
    "check_rms_norm_backward": (rmsnorm.check_rms_norm_backward, ()),
    "check_residual_sublayer": (placement.check_residual_sublayer, ()),
    "check_residual_sublayer_rejects": (placement.check_residual_sublayer_rejects, ()),
    "check_welford_mean_var": (welford.check_welford_mean_var, ()),
    "check_welford_one_pass": (welford.check_welford_one_pass, ()),
    "check_welford_combine": (welford.check_welford_combine, ()),
}


def raises_runtime_error(*args, **kwargs):
    raise RuntimeError("boom 42")


def raises_key_error(*args, **kwargs):
    table = {}
    return table["missing"]


def divides_by_zero(*args, **kwargs):
    return 1 / 0


@pytest.mark.parametrize("name", list(CHECKS))
def test_an_exception_in_learner_code_becomes_a_diagnosis(name):
    check, args = CHECKS[name]
    with pytest.raises(CheckFailed) as failure:
        check(raises_runtime_error, *args)
    text = str(failure.value)
    assert "RuntimeError" in text and "boom 42" in text, text
    assert "Traceback" not in text and "File \"" not in text, text
    if name != "check_residual_sublayer_rejects":  # there the exception itself is the answer being judged
        assert isinstance(failure.value, LearnerError), text
        assert 'raise RuntimeError("boom 42")' in text, text  # the learner's own line
        assert "Likely cause" in text, text


@pytest.mark.parametrize("name", list(CHECKS))
@pytest.mark.parametrize("function, kind", [(raises_key_error, "KeyError"), (divides_by_zero, "ZeroDivisionError")])
def test_other_exceptions_are_named_too(name, function, kind):
    check, args = CHECKS[name]
    with pytest.raises(CheckFailed) as failure:
        check(function, *args)
    assert kind in str(failure.value), str(failure.value)


@pytest.mark.parametrize("name", list(CHECKS))
def test_the_unwritten_exercise_still_says_not_implemented(name):
    check, args = CHECKS[name]

    def stub(*_args, **_kwargs):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        check(stub, *args)


def test_the_call_is_described_with_shapes_and_dtypes():
    with pytest.raises(LearnerError) as failure:
        bn_vs_ln.check_layernorm(bn_vs_ln_impl.ln_unpacks_three_axes)
    text = str(failure.value)
    assert "layernorm(" in text and "x: float64 array of shape (4,)" in text, text
    assert failure.value.error_type == "ValueError" and "unpack" in failure.value.error_message


SHAPE_LIMITED = {
    **{f"layernorm: {k}": (bn_vs_ln.check_layernorm, v) for k, v in bn_vs_ln_impl.SHAPE_LIMITED_LAYERNORMS.items()},
    **{f"batch_norm: {k}": (bn_vs_ln.check_batch_norm, v) for k, v in bn_vs_ln_impl.SHAPE_LIMITED_BATCH_NORMS.items()},
    **{f"rms_norm: {k}": (rmsnorm.check_rms_norm, v) for k, v in rmsnorm_impl.SHAPE_LIMITED_FORWARDS.items()},
    **{f"rms_norm_backward: {k}": (rmsnorm.check_rms_norm_backward, v)
       for k, v in rmsnorm_impl.SHAPE_LIMITED_BACKWARDS.items()},
    **{f"layer_norm_backward: {k}": (backward.check_layer_norm_backward, v)
       for k, v in backward_impl.SHAPE_LIMITED_BACKWARDS.items()},
}


@pytest.mark.parametrize("name", list(SHAPE_LIMITED))
def test_functions_for_a_fixed_number_of_axes_are_told_any_shape(name):
    check, (function, diagnoses, kwargs) = SHAPE_LIMITED[name]
    with pytest.raises(CheckFailed) as failure:
        check(function, **kwargs)
    text = str(failure.value)
    for diagnosis in diagnoses:
        assert diagnosis in text, (diagnosis, text)
    assert "Traceback" not in text


def test_a_learner_exception_whose_message_cannot_be_read_is_still_diagnosed():
    class Unreadable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    def function(*args, **kwargs):
        raise Unreadable()

    with pytest.raises(LearnerError, match="Unreadable"):
        rmsnorm.check_rms_norm(function)


def test_a_huge_exception_message_is_capped():
    def function(*args, **kwargs):
        raise ValueError("\n".join("line %d " % i + "x" * 100 for i in range(10000)))

    with pytest.raises(LearnerError) as failure:
        backward.check_layer_norm_backward(function)
    assert len(str(failure.value)) < 3000


def test_a_recursion_error_is_explained():
    def function(x, g, eps=1e-5):
        return function(x, g, eps)

    with pytest.raises(LearnerError, match="calls itself"):
        backward.check_layer_norm_vjp(function)


@pytest.fixture(scope="module")
def sandbox():
    client = pytest.importorskip("grader.grading.sandbox.client")
    with client.Sandbox(mode="auto") as box:
        yield box


@pytest.mark.slow  # a grading sandbox
def test_the_diagnosis_survives_a_grading_sandbox(sandbox):
    """Under `grader grade` the exception comes back as text (AxisError renamed): the same diagnosis."""
    from tests.implementations import define_in_sandbox

    proxy = define_in_sandbox(sandbox, bn_vs_ln_impl.ln_axis_one, "layernorm")
    with pytest.raises(LearnerError) as failure:
        bn_vs_ln.check_layernorm(proxy)
    text = str(failure.value)
    assert "raised AxisError: axis 1 is out of bounds" in text and "any shape (..., d)" in text, text
    assert "mu = x.mean(axis=1, keepdims=True)" in text, text
    assert "x: float64 array of shape (4,)" in text, text


@pytest.mark.slow  # a grading sandbox
def test_not_implemented_survives_a_grading_sandbox(sandbox):
    sandbox.run_cell("def rms_norm(x, gamma, eps=1e-6):\n    raise NotImplementedError()\n")
    with pytest.raises(NotImplementedError):
        rmsnorm.check_rms_norm(sandbox.lookup("rms_norm"))


@pytest.mark.slow  # a grading sandbox
def test_a_failing_one_pass_call_in_a_grading_sandbox_is_diagnosed(sandbox):
    sandbox.run_cell("def welford_mean_var(x):\n    n, mean = len(x), float(x[0])\n    return mean, 1.0 / (n - n)\n")
    with pytest.raises(LearnerError) as failure:
        welford.check_welford_one_pass(sandbox.lookup("welford_mean_var"))
    text = str(failure.value)
    assert "raised ZeroDivisionError" in text and "return mean, 1.0 / (n - n)" in text, text
    assert "x: a read-once stream of 20000 values" in text, text


def test_library_frames_are_told_from_the_learners_own():
    """The learner's line is the deepest frame outside the standard library, site-packages and grader/: a
    notebook cell's file (ipykernel's, IPython's or a script's) is the learner's, whatever the folder."""
    import os
    import sysconfig

    import grader.numerics
    from grader.compare import _is_library_file

    for library in [os.__file__, np.__file__, grader.numerics.__file__, "<frozen importlib._bootstrap>", ""]:
        assert _is_library_file(library), library
    stdlib = sysconfig.get_paths()["stdlib"]
    for learners in ["/tmp/ipykernel_4242/3212371231.py", "<ipython-input-3-abc>", "/home/me/course/03_backward.py",
                     stdlib + "-but-not-inside/cell.py", os.path.dirname(grader.numerics.__file__) + "_copy/cell.py"]:
        assert not _is_library_file(learners), learners
