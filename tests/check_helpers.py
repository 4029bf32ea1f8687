"""Shared assertions for the tests of grader/checks: a wrong implementation must fail, and say why.

The implementation modules (tests/implementations/*.py) keep tables of wrong answers,
``{name: (function, expected, kwargs)}``: ``expected`` is a phrase the diagnosis must contain,
or (for the mistake combinations) the phrases it must contain and nothing else of ``ALL_NAMED``.
``table_cases`` turns such a table into one test id per name; the ``assert_*`` helpers run the
check and read its failure.
"""
from __future__ import annotations

import pytest

from grader.compare import CheckFailed


def table_cases(table: dict):
    """Parametrise a test over ``table``'s (function, expected, kwargs) entries, one test id per name."""
    return pytest.mark.parametrize("function, expected, kwargs", list(table.values()), ids=list(table))


def check_failure(check, function, kwargs: dict) -> CheckFailed:
    """The CheckFailed that ``check(function, **kwargs)`` must raise."""
    with pytest.raises(CheckFailed) as failure:
        check(function, **kwargs)
    return failure.value


def assert_diagnosis_named(check, function, diagnosis: str, kwargs: dict) -> None:
    """The check fails ``function`` and its message contains ``diagnosis``."""
    text = str(check_failure(check, function, kwargs))
    assert diagnosis in text, text


def assert_names_exactly(text: str, named, all_named, allow_contained: bool = True) -> None:
    """``text`` contains every phrase of ``named`` and no other phrase of ``all_named``.

    ``allow_contained``: a phrase of ``all_named`` that is part of a named phrase may appear (it
    is seen inside the named one); False forbids it as well.
    """
    for phrase in named:
        assert phrase in text, (phrase, text)
    for phrase in all_named:
        if phrase in named or (allow_contained and any(phrase in n for n in named)):
            continue
        assert phrase not in text, (f"names an absent mistake: {phrase}", text)


def assert_mistakes_named_exactly(check, function, named, kwargs: dict, all_named,
                                  allow_contained: bool = True) -> None:
    """The check fails ``function`` and its likely cause names ``named`` and no other mistake of ``all_named``."""
    text = str(check_failure(check, function, kwargs)).split("Likely cause:")[-1]
    assert_names_exactly(text, named, all_named, allow_contained)


def assert_ids_named(check, function, kwargs: dict, ids: set) -> None:
    """The check fails ``function`` naming exactly the catalogue ids ``ids``."""
    failure = check_failure(check, function, kwargs)
    assert set(failure.misconceptions) == ids, str(failure)
