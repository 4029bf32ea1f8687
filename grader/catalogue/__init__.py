"""The misconception catalogue: every mistake a check can name, as data.

Each diagnosis a check gives carries stable ids (``CheckFailed.misconceptions``); this
package says what each id means. The learner's hint ladder (``grader.learner``) and the
instructor's class report (``grader.grading.report.render``) are both built from it. One module per
notebook, read top to bottom like the checks' diagnosis tables, plus ``common`` for the
mistakes any exercise can make (the shape rule, a changed signature, a wrong return type).

An entry has an ``id`` (``"rms.eps_outside_sqrt"``: a notebook prefix and a name that
never changes once released, since reports compare classes across terms), a short
``name``, the ``concept`` it violates, a ``hint`` that points at that concept without
giving code, and a one-line teaching ``note`` for instructors.

Importing this package is cheap: it loads no numpy, torch or nbgrader.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

# catalogue module -> the notebook it belongs to ("" for mistakes of any notebook)
MODULES = {
    "common": "",
    "bn_vs_ln": "01_bn_vs_ln",
    "geometry": "02_geometry",
    "backward": "03_backward",
    "rmsnorm": "04_rmsnorm",
    "placement": "05_placement",
    "welford": "06_welford",
}
ID_PATTERN = re.compile(r"^[a-z][a-z0-9]*\.[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Misconception:
    """One catalogued mistake. ``notebook`` is "" for the common ones."""

    id: str
    name: str
    concept: str
    hint: str
    note: str
    notebook: str = ""


def entry(id: str, name: str, concept: str, hint: str, note: str) -> Misconception:
    """A catalogue entry; the notebook is filled in when its module is loaded."""
    return Misconception(id=id, name=name, concept=concept, hint=hint, note=note)


_loaded: dict[str, Misconception] | None = None


def all_misconceptions() -> dict[str, Misconception]:
    """id -> Misconception for the whole catalogue, in catalogue order."""
    global _loaded
    if _loaded is None:
        found: dict[str, Misconception] = {}
        for module_name, notebook in MODULES.items():
            module = importlib.import_module(f"grader.catalogue.{module_name}")
            for item in module.MISCONCEPTIONS:
                if item.id in found:
                    raise ValueError(f"misconception id {item.id!r} is catalogued twice")
                found[item.id] = Misconception(**{**item.__dict__, "notebook": notebook})
        _loaded = found
    return _loaded


def get(id: str) -> Misconception | None:
    """The entry for ``id``, or None for an id the catalogue does not know."""
    return all_misconceptions().get(id)


def for_notebook(notebook: str, common: bool = False) -> list[Misconception]:
    """The entries of one notebook (e.g. ``"04_rmsnorm"``), with the common ones if asked."""
    return [m for m in all_misconceptions().values() if m.notebook == notebook or (common and not m.notebook)]
