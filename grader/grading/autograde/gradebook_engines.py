"""nbgrader's gradebook, with one SQLAlchemy engine per database per process instead of one per use.

nbgrader opens a new ``Gradebook`` (``nbgrader.api``) in almost every step: seven times in one
learner's autograde phase. Each one calls ``create_engine``, and an engine's cache of compiled
SQL statements lives and dies with it, so every query of every phase was compiled again: a
fifth of the coordinator's time per learner. ``install`` makes ``create_engine`` return the
engine made before for the same URL and options. ``Gradebook.close`` still disposes it (its
connections close; the compiled statements stay), so nothing holds the database open between
steps, and a forked process starts with no engine of its parent's. ``grader.grading.seams.nbgrader``
(``install_gradebook_engine``) points nbgrader at these functions, after its self-check.

Each ``Gradebook`` also runs ``create_all`` before its first query, which asks the database about
every table in turn (about 40 % of the time of opening one). ``create_all_if_missing`` asks one question first:
the list of tables; when every table of nbgrader's schema is already there, nothing else is asked.
A new or damaged database still gets nbgrader's own ``create_all``.
"""
from __future__ import annotations

_engines: dict = {}  # (url, options) -> the engine made for them in this process
original: dict = {}  # "create_engine", "create_all": nbgrader's own, kept by the seam that replaces them


def create_all_if_missing(bind=None, *args, **kwargs):
    """nbgrader's ``Base.metadata.create_all``, skipped when every table of its schema exists."""
    from nbgrader import api
    from sqlalchemy import inspect

    if bind is not None and not args and set(kwargs) <= {"checkfirst"}:
        if set(api.Base.metadata.tables) <= set(inspect(bind).get_table_names()):
            return None
    return original["create_all"](bind, *args, **kwargs)


def cached_create_engine(url, *args, **kwargs):
    key = (str(url), args, tuple(sorted(kwargs.items())))
    engine = _engines.get(key)
    if engine is None:
        engine = _engines[key] = original["create_engine"](url, *args, **kwargs)
    return engine


def forget_in_child() -> None:
    """A forked child must not use its parent's connections (SQLAlchemy's rule for engines and fork)."""
    _engines.clear()
