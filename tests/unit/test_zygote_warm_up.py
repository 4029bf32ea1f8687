"""What the zygote does to the libraries every sandbox inherits: caches only, the same results."""
import pygments.lexer
import pygments.lexers.python as python_lexers
import pygments.regexopt
import pytest

from grader.grading.sandbox import zygote


def test_the_memoised_keyword_patterns_are_pygments_own(monkeypatch):
    monkeypatch.setattr(pygments.lexer, "regex_opt", pygments.regexopt.regex_opt)
    zygote._memoise_word_patterns()
    zygote._memoise_word_patterns()  # idempotent: one memo, not two
    memoised, own = pygments.lexer.regex_opt, pygments.regexopt.regex_opt
    assert memoised.memoised and memoised.__wrapped__ is own
    words = [rule[0] for lexer in (python_lexers.PythonLexer, python_lexers.Python2Lexer, python_lexers.CythonLexer)
             for rules in lexer.tokens.values() for rule in rules
             if isinstance(rule, tuple) and isinstance(rule[0], pygments.lexer.words)]
    assert len(words) > 5
    for w in words:
        expected = own(w.words, prefix=w.prefix, suffix=w.suffix)
        assert memoised(w.words, prefix=w.prefix, suffix=w.suffix) == expected
        assert memoised(list(reversed(w.words)), w.prefix, w.suffix) == expected  # again, and from a list
    for fails in (memoised, own):  # what pygments refuses, the memo refuses the same way
        with pytest.raises(TypeError):
            fails([["not", "a", "string"]], "", "")


def test_a_new_lexer_class_finds_its_patterns_built(monkeypatch):
    """stack_data makes a new subclass of the Python lexer for each frame it highlights."""
    monkeypatch.setattr(pygments.lexer, "regex_opt", pygments.regexopt.regex_opt)
    zygote._memoise_word_patterns()
    calls = []
    first = type("First", (python_lexers.PythonLexer,), {})()
    monkeypatch.setattr(pygments.regexopt, "regex_opt_inner", lambda *a: calls.append(a) or "")
    second = type("Second", (python_lexers.PythonLexer,), {})()
    assert not calls, "the second class built its keyword patterns again"
    source = "def f(): return None"
    assert [t for t in first.get_tokens(source)] == [t for t in second.get_tokens(source)]
