"""Diagnoses as data: ids travel with the text, with CheckFailed, and to the observers."""
import contextlib
import io

import numpy as np
import pytest

from grader import compare
from grader.compare import CheckFailed, LearnerError, check, fail, ids_of, tag


def test_a_tagged_text_is_a_str_that_keeps_its_ids():
    text = tag("eps is outside the square root", "rms.eps_outside_sqrt")
    assert text == "eps is outside the square root" and isinstance(text, str)
    assert text.ids == ("rms.eps_outside_sqrt",)
    assert tag(text, "common.wrong_shape", "rms.eps_outside_sqrt").ids == ("rms.eps_outside_sqrt", "common.wrong_shape")
    assert ids_of(text, "plain", tag("x", "a.b")) == ("rms.eps_outside_sqrt", "a.b")
    assert ids_of(f"{text}") == ()  # an f-string makes a plain str: collect ids before formatting


def test_fail_carries_the_ids_of_its_message_and_its_arguments():
    with pytest.raises(CheckFailed) as failure:
        fail(tag("two things", "a.one"), "a.two")
    assert failure.value.misconceptions == ("a.one", "a.two")


def test_assert_close_takes_the_ids_of_the_likely_cause():
    with pytest.raises(CheckFailed) as failure:
        compare.assert_close(np.ones(3), np.zeros(3) + 2, "f(x)", "oracle", 1e-9, tag("a cause", "a.cause"))
    assert failure.value.misconceptions == ("a.cause",)
    with pytest.raises(CheckFailed) as failure:
        compare.assert_close(np.ones(3), np.zeros(3) + 2, "f(x)", "oracle", 1e-9, None)
    assert failure.value.misconceptions == ()


@pytest.mark.parametrize("body, expected", [
    (lambda x: x.tolist(), "common.not_an_array"),
    (lambda x: None, "common.returned_none"),
    (lambda x: x[None], "common.wrong_shape"),
    (lambda x: x.astype(np.float32), "common.wrong_dtype"),
    (lambda x: x / 0.0, "common.non_finite"),
])
def test_strict_array_names_what_came_back(body, expected):
    x = np.arange(1.0, 4.0)
    with pytest.raises(CheckFailed) as failure, np.errstate(all="ignore"):
        compare.strict_array(body(x), "f(x)", x.shape)
    assert failure.value.misconceptions == (expected,)


def _raises(error):
    def learner(x):
        raise error
    return learner


@pytest.mark.parametrize("function, expected", [
    (lambda x: x.reshape(2, 2, 2)[:, :, 5], "common.fixed_rank"),
    (lambda x: x + np.ones(x.shape[-1] + 1), "common.broadcast_mismatch"),
    (lambda x: x @ np.ones((x.shape[-1] + 1, 2)), "common.matmul_axes"),
    (lambda x: x.dim(), "common.torch_method_on_array"),
    (lambda x: x * x.size(-1), "common.torch_method_on_array"),
    (lambda x: 1 / 0, "common.zero_division"),
    (lambda x: undefined_name_here, "common.undefined_name"),  # noqa: F821 - the undefined name is the point
    (lambda x, scale: x, "common.signature_changed"),  # the call itself does not bind: the signature changed
    # raised inside the learner's code (the signature binds): never blamed on the signature
    (_raises(TypeError("f() got an unexpected keyword argument 'eps'")), "common.learner_raised"),
    (lambda x: x.mean(dim=-1), "common.torch_method_on_array"),
    (_raises(ValueError("not done")), "common.learner_raised"),
    (lambda x: np.empty((2**40, 2**40)), "common.memory_blowup"),
])
def test_the_learners_exceptions_carry_common_ids(function, expected):
    with pytest.raises(LearnerError) as failure:
        compare.call_learner(function, np.arange(8.0), what="f(x)")
    assert failure.value.misconceptions == (expected,), str(failure.value)


def test_with_cause_replaces_the_ids_only_when_the_new_cause_has_some():
    with pytest.raises(LearnerError) as failure:
        compare.call_learner(lambda x: 1 / 0, np.arange(3.0), what="f(x)")
    assert failure.value.with_cause("plain words").misconceptions == ("common.zero_division",)
    assert failure.value.with_cause(tag("refined", "a.refined")).misconceptions == ("a.refined",)


def test_modifying_an_input_is_named():
    def learner(x):
        x -= 1.0
        return x
    with pytest.raises(CheckFailed) as failure:
        compare.call_learner(learner, np.arange(3.0), what="f(x)")
    assert failure.value.misconceptions == ("common.modified_input",)


@check
def check_inner(function):
    function()


@check
def check_outer(function):
    check_inner(function)
    check_inner(function)


def test_observers_hear_each_outermost_check_once_with_its_verdict():
    events = []
    compare.add_observer(events.append)
    try:
        check_outer(lambda: None)
        with pytest.raises(CheckFailed) as failure:
            check_outer(lambda: fail("wrong", "a.wrong"))
        with pytest.raises(NotImplementedError):
            check_inner(lambda: (_ for _ in ()).throw(NotImplementedError()))
    finally:
        compare.remove_observer(events.append)
    assert [(e["check"], e["outcome"]) for e in events] == [
        ("check_outer", "passed"), ("check_outer", "failed"), ("check_inner", "not_implemented")]
    assert events[1]["misconceptions"] == ("a.wrong",) and events[1]["subject"] == "<lambda>"
    assert failure.value.check == "check_inner"  # the innermost check that found it


def test_an_observer_that_raises_changes_nothing_and_writes_nothing():
    def broken(event):
        raise RuntimeError("observer bug")

    compare.add_observer(broken)
    stderr, stdout = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
            check_outer(lambda: None)
            with pytest.raises(CheckFailed):
                check_outer(lambda: fail("wrong", "a.wrong"))
    finally:
        compare.remove_observer(broken)
    assert stderr.getvalue() == "" and stdout.getvalue() == ""


def test_the_traceback_ipython_shows_is_the_diagnosis_alone():
    with pytest.raises(CheckFailed) as failure:
        check_outer(lambda: fail("rms_norm(x) is wrong.\nLikely cause: eps.", "a.b"))
    lines = failure.value._render_traceback_()
    assert "CheckFailed in check_inner" in lines[0] and "rms_norm(x) is wrong." in lines[0]
    assert lines[1:] == ["Likely cause: eps."]
    assert not any("grader/" in line or "File " in line for line in lines)


def test_an_unwritten_exercise_is_a_to_do_not_a_crash():
    """The stub's NotImplementedError becomes one short line that names the exercise, without any frame."""
    from grader.checks.rmsnorm import check_rms_norm

    def rms_norm(x, gamma, eps=1e-6):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError) as raised:
        check_rms_norm(rms_norm)
    assert isinstance(raised.value, compare.NotWrittenYet)
    (line,) = raised.value._render_traceback_()
    assert "rms_norm is not written yet" in line and "raise NotImplementedError" in line and "File" not in line
    assert raised.value.__suppress_context__


def test_an_error_inside_the_learners_code_names_its_line_not_the_signature():
    from grader.checks.rmsnorm import check_rms_norm

    def rms_norm(x, gamma, eps=1e-6):
        r = np.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)
        return gamma * x / r

    with pytest.raises(LearnerError) as raised:
        check_rms_norm(rms_norm)
    text = str(raised.value)
    assert "in your code, line" in text and ".mean(dim=-1, keepdim=True)" in text
    assert "signature" not in text.split("Likely cause:")[1].replace("Your signature is fine", "")
    assert raised.value.misconceptions == ("common.torch_method_on_array",)
    assert "File " not in "\n".join(raised.value._render_traceback_())


def test_expected_and_got_that_print_alike_are_shown_with_the_digits_that_differ():
    expected = np.array([1.0, 2.0, 3.0])
    actual = expected * (1 + 3e-7)
    with pytest.raises(CheckFailed) as failure:
        compare.assert_close(actual, expected, "f(x)", "oracle", 1e-9, None)
    text = str(failure.value)
    assert "print alike at 4 decimals" in text and "expected 3, got 3.000001" in text


def test_a_probe_names_a_hard_coded_eps_and_lower_precision():
    from grader import oracles

    x = np.random.default_rng(0).normal(size=(3, 8))
    probe = compare.Probe(lambda e, dtype: oracles.in_precision(dtype, oracles.layer_norm, x, e), 1e-2)
    expected = oracles.layer_norm(x, 1e-2)
    hard = oracles.layer_norm(x, 1e-5)
    assert compare.ids_of(probe.cause(hard, expected, 1e-9, 0.0, None)) == ("common.eps_not_used",)
    assert "eps=1e-05" in probe.cause(hard, expected, 1e-9, 0.0, None)
    single = oracles.layer_norm(x.astype(np.float32).astype(np.float64), 1e-2).astype(np.float32).astype(np.float64)
    assert compare.ids_of(probe.cause(single, expected, 1e-9, 0.0, "a formula cause")) == ("common.lower_precision",)
    assert probe.cause(expected * 1.01, expected, 1e-9, 0.0, "a formula cause") == "a formula cause"
