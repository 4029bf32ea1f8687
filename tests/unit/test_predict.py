"""Predict, then run: the verdicts, and that a prediction never raises or writes to stderr."""
import contextlib
import io

import pytest

from grader.predict import choose, compare, verdict


@pytest.mark.parametrize("guess, actual, expected", [
    (..., 3.0, "missing"), (None, 3.0, "missing"), ("many", 3.0, "invalid"), (float("nan"), 3.0, "invalid"),
    (3.1, 3.0, "close"), (0.0, 0.0, "close"), (10.0, 3.0, "order"), (0.5, 3.0, "order"), (100.0, 3.0, "far"),
    (-3.0, 3.0, "far"), (256, 256, "close"),
])
def test_verdicts(guess, actual, expected):
    assert verdict(guess, actual) == expected


def test_compare_and_choose_print_and_never_raise():
    class Hostile:
        def __float__(self):
            raise RuntimeError("no")

        def __eq__(self, other):
            raise RuntimeError("no")

        __hash__ = object.__hash__

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert compare(..., 2.0, name="the norm") == "missing"
        assert compare(2.1, 2.0, name="the norm") == "close"
        assert compare(Hostile(), 2.0) == "invalid"
        assert choose(..., ["pre", "post"], "post") == "missing"
        assert choose("post", ["pre", "post"], "post") == "right"
        assert choose("pre", ["pre", "post"], "post") == "wrong"
        assert choose("side", ["pre", "post"], "post") == "invalid"
        assert choose(Hostile(), ["pre", "post"], "post") == "invalid"
    assert err.getvalue() == ""
    text = out.getvalue()
    assert "write your guess" in text and "✔ close" in text and "is right" in text and "you chose 'pre'" in text
