"""Update errors with MongoDB's codeNames and messages, table-driven: those parse_update raises for
a malformed update or array filter, and those apply raises for a document the update cannot change
(types, non-viable paths, the immutable `_id`, positional paths that resolve to nothing)."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64

from ebbdb.storage.core.errors import InvalidIdField, QueryError
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.update import parse_update
from tests.case_tables import load_cases
from tests.helpers import cases, errors_test, query_error

Doc = dict[str, Any]
NOW = 1_700_000_000_123

# (id, update, arrayFilters, codeName, message)
PARSE_ERRORS = [tuple(case.values()) for case in load_cases("update_parse_errors")]


test_parse_error = errors_test(parse_update, PARSE_ERRORS)


# (id, document, update, arrayFilters, query, codeName, message)
APPLY_ERRORS = [tuple(case.values()) for case in load_cases("update_apply_errors")] + [
    (
        "inc a long past its end",
        {"_id": 1, "a": Int64(2**63 - 1)},
        {"$inc": {"a": 1}},
        None,
        None,
        "BadValue",
        "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for "
        "document {_id: 1}",
    ),
    (
        "mul a long past its end",
        {"_id": 1, "a": Int64(2**62)},
        {"$mul": {"a": 2}},
        None,
        None,
        "BadValue",
        "Failed to apply $mul operations to current value ((NumberLong)4611686018427387904) for "
        "document {_id: 1}",
    ),
]


@cases(("doc", "spec", "filters", "query", "code", "message"), APPLY_ERRORS)
def test_apply_error(
    doc: Doc, spec: Doc, filters: list[Any] | None, query: Doc | None, code: str, message: str
) -> None:
    update = parse_update(spec, filters)
    parsed = None if query is None else parse_filter(query)
    assert query_error(update.apply, doc, now_ms=NOW, query=parsed) == (code, message)


def test_failed_update_leaves_the_document() -> None:
    doc = {"_id": 1, "a": 1, "b": "x"}
    with pytest.raises(QueryError):
        parse_update({"$inc": {"a": 1, "b": 1}}).apply(doc, now_ms=NOW)
    assert doc == {"_id": 1, "a": 1, "b": "x"}


def test_inserted_id_must_be_storable() -> None:
    update = parse_update({"$set": {"_id": [1]}})
    with pytest.raises(InvalidIdField) as info:
        update.apply({}, now_ms=NOW, inserting=True)
    assert info.value.message == "The '_id' value cannot be of type array"
