"""nbgrader's gradebook, with one SQLAlchemy engine per database per process instead of one per use.

nbgrader opens a new ``Gradebook`` (``nbgrader.api``) in almost every step: seven times in one
learner's autograde phase. Each one calls ``create_engine``, and an engine's cache of compiled
SQL statements lives and dies with it, so every query of every phase was compiled again: a
fifth of the coordinator's time per learner. ``install`` makes ``create_engine`` return the
engine made before for the same URL and options. ``Gradebook.close`` still disposes it (its
connections close; the compiled statements stay), so nothing holds the database open between
steps, and a forked process starts with no engine of its parent's.

Each ``Gradebook`` also runs ``create_all`` before its first query, which asks the database about
every table in turn (about 40 % of the time of opening one). ``install`` puts one question first:
the list of tables; when every table of nbgrader's schema is already there, nothing else is asked.
A new or damaged database still gets nbgrader's own ``create_all``.
"""
from __future__ import annotations

import os

_engines: dict = {}  # (url, options) -> the engine made for them in this process
_original = None
_original_create_all = None


def _create_all_if_missing(bind=None, *args, **kwargs):
    """nbgrader's ``Base.metadata.create_all``, skipped when every table of its schema exists."""
    from nbgrader import api
    from sqlalchemy import inspect

    if bind is not None and not args and set(kwargs) <= {"checkfirst"}:
        if set(api.Base.metadata.tables) <= set(inspect(bind).get_table_names()):
            return None
    return _original_create_all(bind, *args, **kwargs)


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
    global _original, _original_create_all
    from nbgrader import api

    if api.create_engine is _cached_create_engine:
        return
    _original = api.create_engine
    api.create_engine = _cached_create_engine
    _original_create_all = api.Base.metadata.create_all
    api.Base.metadata.create_all = _create_all_if_missing
    os.register_at_fork(after_in_child=_forget_in_child)
