"""Documents as the pipeline's stages address them: MongoDB's field-path checks, the path helpers
(which never traverse arrays, unlike the query language's paths) and the grouping key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import bson

from ebbdb.storage.aggregate.stage import Doc, error
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import DBREF_FIELDS
from ebbdb.storage.query.compare import (
    RANK_DATE,
    RANK_NUMBER,
    RANK_STRING,
    date_ms,
    is_nan,
    number_value,
    rank,
)
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import field_path as _projection_field_path

# -- field paths -------------------------------------------------------------------------------------


def field_path(path: str, fail: Callable[[int, str], QueryError] = error) -> tuple[str, ...]:
    """MongoDB's FieldPath checks, with its codes (the projection's, with the `$` names a
    pipeline accepts)."""
    return _projection_field_path(path, fail, DBREF_FIELDS)


def get_path(doc: Any, parts: tuple[str, ...]) -> Any:
    """The value at `parts`, or MISSING (arrays on the way are not traversed)."""
    for part in parts:
        if not isinstance(doc, dict):
            return MISSING
        doc = doc.get(part, MISSING)
        if doc is MISSING:
            return MISSING
    return doc


def with_path(doc: Doc, parts: tuple[str, ...], value: Any) -> Doc:
    """A copy of `doc` with `value` at `parts`; what is in the way (a scalar, an array) is replaced
    by documents, as MongoDB's setNestedField does."""
    out = dict(doc)
    head = parts[0]
    if len(parts) == 1:
        out[head] = value
    else:
        child = doc.get(head)
        out[head] = with_path(child if isinstance(child, dict) else {}, parts[1:], value)
    return out


def without_path(doc: Doc, parts: tuple[str, ...]) -> Doc:
    """A copy of `doc` without the field at `parts` (`doc` itself when there is none)."""
    head = parts[0]
    if head not in doc:
        return doc
    out = dict(doc)
    if len(parts) == 1:
        del out[head]
    elif isinstance(doc[head], dict):
        out[head] = without_path(doc[head], parts[1:])
    return out


# -- values as grouping sees them --------------------------------------------------------------------


def group_key(value: Any) -> Any:
    """A hashable stand-in for a value, equal for values MongoDB groups together (1, 1.0 and
    NumberLong(1); documents and arrays of such)."""
    r = rank(value)
    if r == RANK_NUMBER:
        # Python's int, float and Decimal hash alike when equal; NaNs all group together.
        return (r, "NaN") if is_nan(value) else (r, number_value(value))
    if r == RANK_STRING:
        return (r, value)
    if isinstance(value, dict):
        return (r, tuple((k, group_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return (r, tuple(group_key(v) for v in value))
    if r == RANK_DATE:
        return (r, date_ms(value))
    try:
        return (r, bson.encode({"": value}, codec_options=CODEC))
    except Exception:  # a value bson cannot encode (undefined): its text is as good
        return (r, repr(value))
