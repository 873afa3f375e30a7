"""The oplog's update diff ($v 2) computed from two versions of a document: the shape mongod
logs for each kind of change."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.engine.oplog import update_diff

CASES: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ({"a": 1}, {"a": 2}, {"u": {"a": 2}}),
    ({"a": 1}, {"a": 1.0}, {"u": {"a": 1.0}}),  # the type changed: not the same value
    ({"a": 1, "b": 2}, {"a": 1}, {"d": {"b": False}}),
    ({"a": 1}, {"a": 1, "b": 2}, {"i": {"b": 2}}),
    ({"s": {"x": 1, "y": 2}}, {"s": {"x": 5}}, {"ss": {"d": {"y": False}, "u": {"x": 5}}}),
    ({"s": {}}, {"s": {"1": 5}}, {"ss": {"i": {"1": 5}}}),
    ({"s": {"x": 1}}, {"s": {}}, {"u": {"s": {}}}),
    ({"a": [1, 2, 3]}, {"a": [1, 2]}, {"sa": {"a": True, "l": 2}}),
    ({"a": []}, {"a": [7]}, {"sa": {"a": True, "u0": 7}}),
    ({"a": [1]}, {"a": []}, {"u": {"a": []}}),
    ({"a": [{"b": 1}]}, {"a": [{"b": 2}]}, {"sa": {"a": True, "s0": {"u": {"b": 2}}}}),
    ({"a": [1]}, {"a": {"0": 1}}, {"u": {"a": {"0": 1}}}),
    ({"a": 1}, {"a": 1}, {}),
]


@pytest.mark.parametrize(("old", "new", "diff"), CASES)
def test_update_diff(old: dict[str, Any], new: dict[str, Any], diff: dict[str, Any]) -> None:
    assert update_diff(old, new) == diff
