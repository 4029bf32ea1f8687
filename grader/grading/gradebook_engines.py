"""nbgrader's gradebook, with one SQLAlchemy engine per database per process instead of one per use.

nbgrader opens a new ``Gradebook`` (``nbgrader.api``) in almost every step: seven times in one
learner's autograde phase. Each one calls ``create_engine``, and an engine's cache of compiled
SQL statements lives and dies with it, so every query of every phase was compiled again: a
fifth of the coordinator's time per learner. ``install`` makes ``create_engine`` return the
engine made before for the same URL and options. ``Gradebook.close`` still disposes it (its
connections close; the compiled statements stay), so nothing holds the database open between
steps, and a forked process starts with no engine of its parent's.
"""
from __future__ import annotations

import os

_engines: dict = {}  # (url, options) -> the engine made for them in this process
_original = None


def _cached_create_engine(url, *args, **kwargs):
    key = (str(url), args, tuple(sorted(kwargs.items())))
    engine = _engines.get(key)
    if engine is None:
        engine = _engines[key] = _original(url, *args, **kwargs)
    return engine


def _forget_in_child() -> None:
    """A forked child must not use its parent's connections (SQLAlchemy's rule for engines and fork)."""
    _engines.clear()


def install() -> None:
    """Point nbgrader's ``create_engine`` at the per-process cache (idempotent)."""
    global _original
    from nbgrader import api

    if api.create_engine is _cached_create_engine:
        return
    _original = api.create_engine
    api.create_engine = _cached_create_engine
    os.register_at_fork(after_in_child=_forget_in_child)
