"""Update and delete statements' filters are parsed once: a command that may be a small write has
them parsed before its job, to tell whether each pins one `_id`, and the job takes that parse
(again only when the collation it resolves to has changed since, or when the early parse failed,
whose error it raises in the statement's turn)."""

from __future__ import annotations

import pytest

from ebbdb.server.commands import writes
from ebbdb.storage.core.collation import parse_collation
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.execution.execute import QuerySpec


def _statement(
    q: dict[str, object], collation: dict[str, object] | None = None
) -> writes.DeleteStatement:
    return writes.DeleteStatement(q=q, hint=None, limit=1, collation=collation)


def test_the_job_takes_the_early_parse() -> None:
    spec = QuerySpec.parse({"_id": 1})
    prepared: writes.Prepared = {0: (None, spec)}
    assert writes._statement_spec(prepared, 0, _statement({"_id": 1}), {}, None) is spec
    # Not parsed early: parsed now.
    parsed = writes._statement_spec({}, 0, _statement({"_id": 1}), {}, None)
    assert parsed is not spec and parsed.filter == {"_id": 1}


def test_a_changed_collation_parses_again() -> None:
    given = {"locale": "en", "strength": 2}
    early: writes.Prepared = {0: (None, QuerySpec.parse({"s": "A"}))}
    spec = writes._statement_spec(early, 0, _statement({"s": "A"}, given), {}, None)
    assert spec.query.collation == parse_collation(given)
    assert spec.predicate({"s": "a"})


def test_an_early_parse_error_is_raised_in_the_statements_turn() -> None:
    error = QueryError("BadValue", "unknown operator: $foo")
    with pytest.raises(QueryError) as exc:
        writes._statement_spec({0: (None, error)}, 0, _statement({"a": {"$foo": 1}}), {}, None)
    assert exc.value is error


def test_small_only_when_every_filter_pins_an_id() -> None:
    by_id = QuerySpec.parse({"_id": {"$eq": 3}, "x": 1})
    other = QuerySpec.parse({"x": 1})
    assert writes._all_by_id({0: (None, by_id), 1: (None, by_id)}, 2)
    assert not writes._all_by_id({0: (None, by_id), 1: (None, other)}, 2)
    assert not writes._all_by_id({0: (None, by_id)}, 2)  # one not parsed early
    assert not writes._all_by_id({0: (None, QueryError("BadValue", "x"))}, 1)
