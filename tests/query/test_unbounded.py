"""Which filters match on a reader thread (storage.query.match_tree.unbounded): those whose test of
one document can take long. A geo filter's test parses and measures a geometry per document (the
review of the geo kinds found 3,000 documents scanned in 100-140 ms, on the event loop)."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.match_tree import unbounded

POLYGON = {"type": "Polygon", "coordinates": [[[0, 0], [5, 0], [5, 5], [0, 5], [0, 0]]]}


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"a": 1, "b": {"$gt": 2}}, False),
        ({"a": {"$in": [1, 2]}}, False),
        ({"a": {"$regex": "^x"}}, True),
        ({"$expr": {"$eq": ["$a", 1]}}, True),
        ({"loc": {"$geoWithin": {"$geometry": POLYGON}}}, True),
        ({"loc": {"$geoIntersects": {"$geometry": POLYGON}}}, True),
        ({"loc": {"$geoWithin": {"$box": [[0, 0], [1, 1]]}}, "x": 1}, True),
        ({"$or": [{"a": 1}, {"loc": {"$geoWithin": {"$center": [[0, 0], 1]}}}]}, True),
    ],
)
def test_what_matches_off_the_event_loop(flt: dict[str, Any], expected: bool) -> None:
    assert unbounded(parse_filter(flt).tree) is expected
