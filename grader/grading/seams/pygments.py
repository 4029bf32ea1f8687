"""pygments' non-public parts the grader relies on: the ``regex_opt`` name ``pygments.lexer`` calls.

Speed only: **regex-memo**. In a sandbox, IPython formats a learner's failing cell with stack_data, which
highlights a library frame's function with a new subclass of pygments' Python lexer on every call, and a new
lexer class builds its token patterns again: ``regex_opt`` turning each keyword list into one pattern (13% of
a 05_placement sandbox's CPU). ``install_regex_memo`` memoises it where ``pygments.lexer`` calls it, in the zygote,
so every fork inherits the memo. ``regex_opt`` is a pure function of its arguments: same patterns, same tracebacks.
"""
from __future__ import annotations

import functools

from grader.grading.seams import SPEED, Patch, enabled, expect, expect_signature


def check_regex_memo() -> None:
    import pygments.lexer
    import pygments.regexopt

    build = getattr(pygments.lexer.regex_opt, "__wrapped__", pygments.lexer.regex_opt)
    expect(build is pygments.regexopt.regex_opt, "pygments.lexer.regex_opt is not pygments.regexopt.regex_opt")
    expect_signature(build, "strings", "prefix", "suffix")
    expect(build(("b", "a"), r"\b", r"\b") == build(["a", "b"], r"\b", r"\b"), "regex_opt depends on the order "
           "or type of its strings")


REGEX_MEMO = Patch("regex-memo", "pygments", SPEED, "keyword patterns built once per sandbox", check_regex_memo)
PATCHES = [REGEX_MEMO]


def install_regex_memo() -> bool:
    """Memoise ``pygments.lexer.regex_opt`` (idempotent); False where the patch is off or pygments is missing."""
    try:
        import pygments.lexer
    except ImportError:
        return False
    build = pygments.lexer.regex_opt
    if getattr(build, "memoised", False):
        return True
    if not enabled(REGEX_MEMO):
        return False
    built = functools.lru_cache(maxsize=4096)(build)  # called with the strings as a tuple: hashable, same pattern

    @functools.wraps(build)
    def regex_opt(strings, prefix="", suffix=""):
        try:
            return built(tuple(strings), prefix, suffix)
        except TypeError:  # an unhashable argument: built as pygments would
            return build(strings, prefix, suffix)

    regex_opt.memoised = True
    pygments.lexer.regex_opt = regex_opt
    return True
