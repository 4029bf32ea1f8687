"""nbgrader's cell-metadata validation, with each schema checked once and each metadata value once.

nbgrader (``nbgraderformat.common.BaseMetadataValidator.validate_cell``) validates the nbgrader
metadata of every cell with ``jsonschema.validate(metadata, schema)``, which first re-checks the
schema itself against its metaschema: about 1.5 ms a cell, a quarter of a learner's sanitise and
record phases for a 60-cell notebook. And it validates the same cells' metadata again in every
phase, for every learner, though intake restored it from the assignment: the same few dozen
values, thousands of times in a class.

``validate`` below is jsonschema's own function with the schema checked the first time it is seen
and each (schema, metadata) pair that passed remembered (as canonical JSON: validation is a pure
function of the two). A value never seen, or one that failed, is validated by the same validator
class, and its ``best_match`` error raised the same way, so nbgrader's behaviour (and its
messages) do not change.
"""
from __future__ import annotations

import json
import types

import jsonschema

MAX_REMEMBERED = 100_000  # passing (schema, metadata) pairs kept; a class has a few hundred distinct ones
_checked: dict[str, object] = {}  # the schema (as canonical JSON) -> a validator for it
_passed: set[tuple[str, str]] = set()  # (schema, instance), both canonical JSON, that validated


def _plain(value, depth: int = 0) -> bool:
    """Whether ``value`` is JSON data that canonical JSON tells apart from every other value: dicts
    with str keys, lists (not tuples, which JSON would merge with them), str, int, float, bool, None."""
    if depth > 50:
        return False
    if type(value) in (str, int, float, bool) or value is None:
        return True
    if isinstance(value, dict):
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return type(value) is list and all(_plain(v, depth + 1) for v in value)


def _canonical(value) -> str | None:
    """``value`` as canonical JSON, or None if it is not plain JSON data (validated every time)."""
    if not _plain(value):
        return None
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def validate(instance, schema, cls=None, *args, **kwargs) -> None:
    """``jsonschema.validate``, with the schema checked the first time it is seen only, and an
    instance that passed against that schema before not validated again."""
    if cls is not None or args or kwargs:
        return jsonschema.validate(instance, schema, cls, *args, **kwargs)
    key = json.dumps(schema, sort_keys=True)
    seen = _canonical(instance)
    if seen is not None and (key, seen) in _passed:
        return None
    validator = _checked.get(key)
    if validator is None:
        kind = jsonschema.validators.validator_for(schema)
        kind.check_schema(schema)
        validator = _checked[key] = kind(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error
    if seen is not None and len(_passed) < MAX_REMEMBERED:
        _passed.add((key, seen))


def install() -> None:
    """Point nbgrader's metadata validator at ``validate`` (idempotent)."""
    from nbgrader.nbgraderformat import common

    if isinstance(common.jsonschema, types.SimpleNamespace):
        return
    common.jsonschema = types.SimpleNamespace(validate=validate, ValidationError=jsonschema.ValidationError)
