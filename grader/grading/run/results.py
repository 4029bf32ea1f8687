"""The result of executing one notebook: a JSON document with a schema, validated before use.

``grader.grading.autograde.execute`` writes one result per learner notebook; the record phase
(``grader.grading.autograde.nbgrader_steps.ReplayResults``) reads it back. Grading fails closed on it: a
test cell earns its points only when a *valid* result, for *this* learner, notebook and
assignment, for the very cells being recorded, says the trusted grader ran that test to
the end and saw it pass. Every other state (no result, a malformed one, one for another
learner, a digest that does not match, a test not run, killed or failed) is a zero with
a message.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema

from grader.catalogue import ID_PATTERN

SCHEMA_VERSION = 2
PASSED = "passed"
MAX_RESULT_BYTES = 256 * 2**20
MAX_MISCONCEPTIONS = 20  # ids recorded for one test (a diagnosis names one or two)

_TEXT = {"type": "string"}
_OUTPUT = {
    "type": "object",
    "required": ["output_type"],
    "properties": {"output_type": {"enum": ["stream", "display_data", "execute_result", "error"]}},
}
SCHEMA = {
    "type": "object",
    "required": ["schema", "assignment", "student", "notebook", "source_digest", "notebook_digest", "cells",
                 "digests", "tests", "notes"],
    "properties": {
        "schema": {"const": SCHEMA_VERSION},
        "assignment": _TEXT, "student": _TEXT, "notebook": _TEXT,
        "source_digest": _TEXT, "notebook_digest": _TEXT,
        "cells": {"type": "object", "additionalProperties": {"type": "array", "items": _OUTPUT}},
        "digests": {"type": "object", "additionalProperties": _TEXT},
        "tests": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["status"],
            "properties": {"status": {"enum": [PASSED, "failed", "not_run", "mismatch"]}, "message": _TEXT,
                           # the catalogue ids (grader.catalogue) of the diagnosis a failed test gave
                           "misconceptions": {"type": "array", "maxItems": MAX_MISCONCEPTIONS, "items": {
                               "type": "string", "maxLength": 100, "pattern": ID_PATTERN.pattern}}}}},
        "notes": {"type": "array", "items": _TEXT},
        # what the grader saw but cannot prove (grader.grading.autograde.execute): evidence for the report, never points
        "flags": {"type": "array", "maxItems": 50, "items": {
            "type": "object", "required": ["test", "check", "seen"], "additionalProperties": False,
            "properties": {"test": {"type": "string", "maxLength": 200}, "check": {"type": "string", "maxLength": 40},
                           "seen": {"type": "string", "maxLength": 500}}}},
        "isolation": {"type": ["object", "null"]},
        # no sandbox failure or limit stopped the run (grader.grading.run.jobs.cacheable)
        "complete": {"type": "boolean"},
        "executed": {"type": "object", "required": ["notebook", "folder"], "additionalProperties": False,  # jobs.accept
                     "properties": {k: {"type": "string", "pattern": "^[0-9a-f]{64}$"}
                                    for k in ("notebook", "folder")}},
        # the job that produced it (grader.grading.run.jobs.Job.identity): a result is accepted only for that job
        "job": {"type": "object", "required": ["key", "submission", "bundle", "grader", "settings"],
                "additionalProperties": False,
                "properties": {name: {"type": "string", "pattern": "^[0-9a-f]{64}$"}
                               for name in ("key", "submission", "bundle", "grader", "settings")}},
    },
}


def cell_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def notebook_digest(nb) -> str:
    """Digest of every code cell's text, in order: what was executed is what is recorded."""
    digest = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            digest.update(cell_digest(cell.source).encode() + b"\n")
    return digest.hexdigest()


def bytes_digest(data: bytes) -> str:
    """The digest of a file's content: what a job's ``bundle`` and a result's ``source_digest`` hold."""
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    return bytes_digest(Path(path).read_bytes())


def autograded_tests(nb) -> dict[int, str]:
    """index -> grade_id of every autograded test cell (graded code cell that is not a solution)."""
    tests = {}
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and isinstance(meta, dict) and meta.get("grade") and not meta.get("solution"):
            tests[index] = str(meta.get("grade_id"))
    return tests


def load(path: Path, expected: dict) -> tuple[dict | None, str | None]:
    """(result, None) if ``path`` holds a valid result matching ``expected``, else (None, why not).

    ``expected``: the fields that must match exactly (assignment, student, notebook, source_digest,
    notebook_digest).
    """
    path = Path(path)
    try:
        if not path.is_file() or path.is_symlink():
            return None, "no result was produced for this notebook (its execution did not finish)"
        if path.stat().st_size > MAX_RESULT_BYTES:
            return None, "the result of this notebook is too large to be trusted"
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        return None, f"the result of this notebook is unreadable ({type(error).__name__})"
    problem = invalid(data)
    if problem:
        return None, f"the result of this notebook is malformed ({problem})"
    for field, value in expected.items():
        if data.get(field) != value:
            return None, f"the result does not belong to this notebook ({field} differs)"
    return data, None


_VALIDATOR = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)  # what jsonschema.validate uses, built once


def invalid(data) -> str | None:
    """Why ``data`` is not a valid result (at most 200 characters), or None if it is one."""
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(data))
    if error is not None:
        return error.message[:200]
    for test in data["tests"].values():
        # JSON Schema's "pattern" searches, and its "$" also matches before a final newline
        if not all(ID_PATTERN.fullmatch(mid) for mid in test.get("misconceptions", [])):
            return "a misconception id is not a catalogue id"
    return None


def write(path: Path, result: dict) -> None:
    """Write atomically: a reader sees the whole result or none. Raises ValueError for an invalid one."""
    problem = invalid(result)
    if problem:
        raise ValueError(f"not a valid result: {problem}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(result))
    temporary.replace(path)
