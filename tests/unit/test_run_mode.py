"""Every notebook names its grading flag the same way, through the one helper."""
import re
from pathlib import Path

from normlab.run_mode import quick_run

SOURCES = sorted(Path(__file__).resolve().parents[2].glob("source/*/*.py"))


def test_quick_run_follows_nbgrader(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert quick_run() is False
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert quick_run() is True


def test_one_flag_name_in_every_notebook():
    for source in SOURCES:
        text = source.read_text()
        assert "NBGRADER_EXECUTION" not in text, f"{source.name} reads the variable itself"
        assert not re.search(r"\b(GRADING|FAST)\b", text), f"{source.name} uses another flag name"
        if "QUICK" in text:
            assert "QUICK = quick_run()" in text, source.name
