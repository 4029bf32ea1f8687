"""Which isolation a sandbox gets (``auto``, ``user``, ``userns``, ``basic``: see ``isolation``), and the
error that refuses to start one where the isolation asked for cannot be had.

The grader checks a level before a run (``check_level``); the zygote and every sandbox choose the
level to enforce (``choose_level``): the same or stronger, never weaker.
"""
from __future__ import annotations

LEVELS = ("auto", "user", "userns", "basic")


class IsolationError(Exception):
    """The isolation asked for cannot be had here; the sandbox must not start."""


def check_level(requested: str) -> None:
    """IsolationError unless ``requested`` names one of LEVELS."""
    if requested not in LEVELS:
        raise IsolationError(f"unknown isolation mode {requested[:100]!r}: use one of {', '.join(LEVELS)}")


def choose_level(requested: str, is_root: bool) -> str:
    """The level to enforce for ``requested``: the same or stronger, never weaker (IsolationError)."""
    check_level(requested)
    if requested == "basic":
        return "basic"
    if is_root:
        return "user"  # as root nothing less will do: learner code must never keep root's uid
    if requested == "user":
        raise IsolationError("isolation 'user' needs the grader to run as root; as another user use 'userns' "
                             "(or 'auto'), or LNCOURSE_ISOLATION=basic to run without confinement")
    return "userns"

