"""A find, an update's statement and the planner read one parsed filter: QuerySpec parses it once,
under its collation (the projection's positional `$` reads the same tree), IDHACK and the `$text`
planner read what the parse found, and nothing parses the filter document again."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.collation import parse_collation
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.execution import execute
from ebbdb.storage.execution.execute import QuerySpec, choose_plan
from ebbdb.storage.indexes.entries import ID_INDEX_KEY
from ebbdb.storage.indexes.planner import CollScan, IndexScan
from ebbdb.storage.indexes.text_plan import TextScan
from ebbdb.storage.query import match

TEXT_KEY = (("_fts", "text"), ("_ftsx", 1))


def _collection(*indexes: IndexInfo) -> CollectionInfo:
    return CollectionInfo(1, "d", "c", {}, (IndexInfo(2, "_id_", ID_INDEX_KEY), *indexes))


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The collation of each filter QuerySpec parses from now on."""
    seen: list[Any] = []
    real = match.parse_filter

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("collation"))
        return real(*args, **kwargs)

    monkeypatch.setattr(execute, "parse_filter", counted)
    return seen


def test_a_find_parses_its_filter_once_under_its_collation(monkeypatch: pytest.MonkeyPatch) -> None:
    parses = _count_parses(monkeypatch)
    c = parse_collation({"locale": "en", "strength": 2})
    spec = QuerySpec.parse({"tags": "X"}, {"tags.$": 1}, collation=c)
    assert parses == [c]
    assert spec.query.collation is c
    assert spec.predicate({"tags": ["a", "x"]})
    # The positional projection reads the same (collated) tree: "x" is the element that matched.
    assert spec.projection is not None
    assert spec.projection.apply({"_id": 1, "tags": ["a", "x"]}) == {"_id": 1, "tags": ["x"]}
    plan = choose_plan(_collection(), spec)
    assert isinstance(plan, CollScan) and parses == [c]


@pytest.mark.parametrize(
    ("flt", "point"),
    [({"_id": 7}, True), ({"_id": {"$eq": 7}}, True), ({"$and": [{"_id": 7}]}, False)],
)
def test_idhack_reads_the_parsed_id_condition(flt: dict[str, Any], point: bool) -> None:
    plan = choose_plan(_collection(), QuerySpec.parse(flt))
    assert isinstance(plan, IndexScan) and plan.index.name == "_id_"
    assert (plan.point is not None) is point  # a one-key lookup, or a scan of the bounds


def test_text_under_or_plans_the_recorded_clauses() -> None:
    text = IndexInfo(3, "t_text", TEXT_KEY, {"weights": {"t": 1}})
    indexed = _collection(text, IndexInfo(4, "a_1", (("a", 1),)))
    spec = QuerySpec.parse({"$or": [{"$text": {"$search": "x"}}, {"a": 1}]})
    assert isinstance(choose_plan(indexed, spec), CollScan)  # matched one by one
    unindexed = QuerySpec.parse({"$or": [{"$text": {"$search": "x"}}, {"b": 1}]})
    with pytest.raises(QueryError, match="other non-TEXT clauses under OR have to be indexed"):
        choose_plan(indexed, unindexed)
    top = QuerySpec.parse({"$text": {"$search": "x"}})
    assert isinstance(choose_plan(indexed, top), TextScan)
