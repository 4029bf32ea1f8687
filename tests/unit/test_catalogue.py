"""The misconception catalogue is well formed, and matches what the checks can name."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader import catalogue
from grader.catalogue import ID_PATTERN, all_misconceptions, for_notebook, get

ROOT = Path(__file__).resolve().parents[2]
# where ids are written: the checks, the shared comparison code, the grading side
TAGGING_SOURCES = sorted((ROOT / "grader").rglob("*.py"))
QUOTED_ID = re.compile(r"""["']([a-z][a-z0-9]*\.[a-z][a-z0-9_]*)["']""")
PREFIXED_ID = re.compile(r"""f["']\{prefix\}\.([a-z][a-z0-9_]*)["']""")  # grader/checks/bn_vs_ln.py: ln. and bn.
PREFIXES = {"common", "ln", "bn", "causal", "geo", "bwd", "rms", "place", "welford"}
# what a hint may not contain: code a learner could paste
CODE = re.compile(r"`|\bnp\.|\btorch\.|\.astype|=|\b[A-Za-z_][A-Za-z0-9_]*\(|\bkeepdims\b|\[\s*\.\.\.")


def _ids_written_in(path: Path) -> set:
    if "catalogue" in path.parts:
        return set()
    text = path.read_text()
    prefixed = {f"{prefix}.{name}" for name in PREFIXED_ID.findall(text) for prefix in ("ln", "bn")}
    return prefixed | {m for m in QUOTED_ID.findall(text) if m.split(".")[0] in PREFIXES}


def test_entries_are_complete_and_ids_well_formed():
    entries = all_misconceptions()
    assert entries
    for mistake in entries.values():
        assert ID_PATTERN.match(mistake.id), mistake.id
        assert mistake.id.split(".")[0] in PREFIXES, mistake.id
        for field in ("name", "concept", "hint", "note"):
            assert getattr(mistake, field).strip(), (mistake.id, field)
        assert len(mistake.name) <= 60, mistake.id


@pytest.mark.parametrize("mistake", list(all_misconceptions().values()), ids=lambda m: m.id)
def test_hints_give_no_code(mistake):
    assert not CODE.search(mistake.hint), (mistake.id, CODE.search(mistake.hint).group(0), mistake.hint)


def test_every_id_a_check_names_is_catalogued():
    written = set().union(*(_ids_written_in(path) for path in TAGGING_SOURCES))
    unknown = {i for i in written if get(i) is None}
    assert not unknown, f"ids used in grader/ but not catalogued: {sorted(unknown)}"


# That every catalogued id is actually named by a check is measured on mutants:
# tests/integration/test_misconceptions.py::test_every_catalogued_misconception_is_named_on_some_mutant.


def test_notebooks_partition_the_catalogue():
    notebooks = [n for n in catalogue.MODULES.values()]
    counted = sum(len(for_notebook(n)) for n in notebooks)
    assert counted == len(all_misconceptions())
    assert {m.id for m in for_notebook("04_rmsnorm", common=True)} >= {m.id for m in for_notebook("")}


def test_importing_the_catalogue_is_cheap():
    code = ("import sys, grader.catalogue as c; c.all_misconceptions(); "
            "heavy = [m for m in ('numpy', 'torch', 'nbgrader', 'matplotlib') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout
