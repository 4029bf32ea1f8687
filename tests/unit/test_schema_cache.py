"""grader.grading.schema_cache: nbgrader's metadata validation, the schema checked once, same verdicts."""
import copy

import jsonschema
import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.nbgraderformat import common

from grader.grading import schema_cache
from tests.conftest import ASSIGNMENTS, ROOT

WRONG_VALUES = [None, "x", -1, []]


def metadata_cases() -> list[dict]:
    """Every nbgrader metadata of the release notebooks (committed: a fresh clone has no built source
    notebooks), and each with one key dropped or mistyped."""
    cases = []
    for assignment in ASSIGNMENTS:
        nb = nbformat.read(ROOT / "release" / assignment / f"{assignment}.ipynb", as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader")
            if not meta:
                continue
            cases.append(dict(meta))
            for key in meta:
                dropped = {k: v for k, v in meta.items() if k != key}
                cases.append(dropped)
                for value in WRONG_VALUES:
                    cases.append({**copy.deepcopy(meta), key: value})
    return cases


def verdict(validate, instance, schema):
    try:
        validate(instance, schema)
    except jsonschema.ValidationError as error:
        return error.message, list(error.path), list(error.schema_path)
    return None


def test_same_verdict_and_error_as_jsonschema_for_every_case():
    schema = MetadataValidator().schema
    cases = metadata_cases()
    assert len(cases) > 500
    invalid = 0
    for case in cases:
        expected = verdict(jsonschema.validate, case, schema)
        assert verdict(schema_cache.validate, case, schema) == expected, case
        invalid += expected is not None
    assert invalid > 100  # the mutations reach the schema's errors, not only valid metadata


def test_a_broken_schema_is_still_refused():
    with pytest.raises(jsonschema.SchemaError):
        schema_cache.validate({}, {"type": "no-such-type"})


def test_install_points_nbgrader_at_it_once(monkeypatch):
    monkeypatch.setattr(common, "jsonschema", jsonschema)
    schema_cache.install()
    schema_cache.install()
    assert common.jsonschema.validate is schema_cache.validate
    assert common.jsonschema.ValidationError is jsonschema.ValidationError
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": "two",
                                 "grade_id": "t", "schema_version": 3}
    with pytest.raises(jsonschema.ValidationError, match="not of type"):
        MetadataValidator().validate_cell(cell)


def test_metadata_that_passed_once_is_remembered_and_failures_are_not(monkeypatch):
    schema = MetadataValidator().schema
    good = {"grade": True, "solution": False, "locked": True, "points": 2, "grade_id": "t-remembered",
            "schema_version": 3}
    bad = {**good, "points": "two"}
    calls = []
    real = jsonschema.exceptions.best_match
    monkeypatch.setattr(jsonschema.exceptions, "best_match", lambda errors: calls.append(1) or real(errors))
    for _ in range(3):
        schema_cache.validate(dict(good), schema)
    assert len(calls) == 1  # validated once, then remembered
    for _ in range(2):
        with pytest.raises(jsonschema.ValidationError, match="not of type"):
            schema_cache.validate(bad, schema)
    assert len(calls) == 3  # a failing value is validated (and refused) every time


@pytest.mark.parametrize("lookalike", [
    {1: "x"},  # JSON would write the key as "1"
    {"grade_id": ("a",)},  # JSON would write the tuple as a list
])
def test_values_json_cannot_tell_apart_are_never_remembered(lookalike):
    schema = {"type": "object", "properties": {"1": {"type": "integer"}, "grade_id": {"type": "array"}}}
    twin = {str(k): list(v) if isinstance(v, tuple) else v for k, v in lookalike.items()}
    assert verdict(jsonschema.validate, lookalike, schema) != verdict(jsonschema.validate, twin, schema)
    for first, second in [(twin, lookalike), (lookalike, twin)]:
        schema_cache._passed.clear()
        verdict(schema_cache.validate, first, schema)
        # the second value gets jsonschema's own verdict, not the first one's
        assert verdict(schema_cache.validate, second, schema) == verdict(jsonschema.validate, second, schema)
