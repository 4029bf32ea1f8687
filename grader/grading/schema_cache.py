"""nbgrader's cell-metadata validation, with each schema checked once instead of on every cell.

nbgrader (``nbgraderformat.common.BaseMetadataValidator.validate_cell``) validates the nbgrader
metadata of every cell with ``jsonschema.validate(metadata, schema)``, which first re-checks the
schema itself against its metaschema: about 1.5 ms a cell, a quarter of a learner's sanitise and
record phases for a 60-cell notebook. ``validate`` below is jsonschema's own function with that
check done once per schema: the same validator class, the same ``best_match`` error, raised the
same way, so nbgrader's behaviour (and its messages) do not change.
"""
from __future__ import annotations

import json
import types

import jsonschema

_checked: dict[str, object] = {}  # the schema (as canonical JSON) -> a validator for it


def validate(instance, schema, cls=None, *args, **kwargs) -> None:
    """``jsonschema.validate``, with the schema checked the first time it is seen only."""
    if cls is not None or args or kwargs:
        return jsonschema.validate(instance, schema, cls, *args, **kwargs)
    key = json.dumps(schema, sort_keys=True)
    validator = _checked.get(key)
    if validator is None:
        kind = jsonschema.validators.validator_for(schema)
        kind.check_schema(schema)
        validator = _checked[key] = kind(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error


def install() -> None:
    """Point nbgrader's metadata validator at ``validate`` (idempotent)."""
    from nbgrader.nbgraderformat import common

    if isinstance(common.jsonschema, types.SimpleNamespace):
        return
    common.jsonschema = types.SimpleNamespace(validate=validate, ValidationError=jsonschema.ValidationError)
