"""grader.grading.run.terminal.printable: learner text cannot rewrite the instructor's terminal."""
import unicodedata

import pytest

from grader.grading.run.terminal import ELLIPSIS, printable

FORBIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"}


def forbidden_chars(text: str, allowed: str = "") -> list[str]:
    return [c for c in text if unicodedata.category(c) in FORBIDDEN and c not in allowed]


@pytest.mark.parametrize("text, expected", [
    ("alice", "alice"),
    ("ünïcødé λ 学生 🙂", "ünïcødé λ 学生 🙂"),
    ("a\\x1b stays", "a\\x1b stays"),  # a typed backslash is not touched (idempotence)
    ("\x1b[2J\x1b[1;1Hpwned", "\\x1b[2J\\x1b[1;1Hpwned"),  # ANSI CSI: clear screen, move cursor
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC: set window title, BEL
    ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "\\x1b]8;;http://evil\\x1b\\link\\x1b]8;;\\x1b\\"),  # hyperlink
    ("\x9b31m", "\\x9b31m"),  # C1 CSI
    ("\x85next", "\\x85next"),  # C1 NEL
    ("10.0\rzero", "10.0\\rzero"),
    ("ab\bc\x7f", "ab\\x08c\\x7f"),
    ("bob\u202egnp.exe", "bob\\u202egnp.exe"),  # right-to-left override
    ("\u2066x\u2069\u202a\u202c", "\\u2066x\\u2069\\u202a\\u202c"),  # isolates, embedding
    ("zero\u200bwidth\u200d\ufeff", "zero\\u200bwidth\\u200d\\ufeff"),
    ("tag\U000e0041", "tag\\U000e0041"),  # tag characters are Cf
    ("line\u2028para\u2029", "line\\u2028para\\u2029"),
    ("bad\udcffbyte", "bad\\udcffbyte"),  # surrogate-escaped file name byte: print() would raise
    ("a\nb\tc", "a\\nb\\tc"),
    ("\x00", "\\x00"),
])
def test_escapes(text, expected):
    assert printable(text) == expected
    assert not forbidden_chars(printable(text))


def test_multiline_keeps_newlines_and_tabs_only():
    assert printable("a\nb\tc\r\x1b[A", multiline=True) == "a\nb\tc\\r\\x1b[A"


def test_limit():
    assert printable("x" * 10, 10) == "x" * 10
    assert printable("x" * 11, 10) == "x" * 9 + ELLIPSIS
    assert printable("abc", 0) == ""
    assert len(printable("\x1b" * 100, 20)) <= 20
    # cut before an escape, never inside one
    assert printable("abcdefg\x1b", 10) == "abcdefg" + ELLIPSIS
    assert printable("x" * 10**6, 200).endswith(ELLIPSIS)


def test_non_strings_are_converted():
    assert printable(12) == "12"
    assert printable(ValueError("\x1b[31mred")) == "\\x1b[31mred"


def test_idempotent_examples():
    for text in ["\x1b[31m\u202eabc\r\n", "x" * 50 + "\x00", "plain"]:
        for limit in (None, 5, 20):
            once = printable(text, limit)
            assert printable(once, limit) == once


def test_every_code_point_is_safe_or_escaped():
    """Planes 0-2 and the tags block (every assigned control and format character): nothing unsafe survives."""
    text = "".join(chr(i) for i in [*range(0x30000), *range(0xE0000, 0xE0200), 0xF0000, 0x10FFFF])
    out = printable(text)
    assert not forbidden_chars(out)
    assert not forbidden_chars(printable(text, multiline=True), allowed="\n\t")
    assert printable(out) == out


# Hypothesis properties (hypothesis comes with the dev extras); importorskip inside each test,
# so the examples above still run without it.
def test_property_output_is_safe_bounded_and_idempotent():
    pytest.importorskip("hypothesis")
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.text(), st.none() | st.integers(min_value=0, max_value=300), st.booleans())
    def check(text, limit, multiline):
        out = printable(text, limit, multiline=multiline)
        assert not forbidden_chars(out, allowed="\n\t" if multiline else "")
        if limit is not None:
            assert len(out) <= limit
        assert printable(out, limit, multiline=multiline) == out
        assert printable(out, multiline=multiline) == out

    check()


def test_property_safe_text_is_unchanged():
    pytest.importorskip("hypothesis")
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.text(alphabet=st.characters(blacklist_categories=tuple(FORBIDDEN))))
    def check(text):
        assert printable(text) == text

    check()
