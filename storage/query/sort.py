"""Sort specifications and sort keys, with MongoDB's array rule: ascending sorts an array by its
smallest element, descending by its largest."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ebbdb.storage.core import interrupt
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.compare import UNDEFINED, compare
from ebbdb.storage.query.metadata import check_keyword, keep_metadata, text_score
from ebbdb.storage.query.paths import MISSING, leaves, split


class Collating(Protocol):
    """A collation, as sorting uses one: values with their strings made sort keys."""

    def collate(self, value: Any) -> Any: ...


#: The path parts standing for `{$meta: "textScore"}` in a sort (a sort path never starts with
#: `$`): the text score, highest first.
TEXT_SCORE_KEY: tuple[str, ...] = ("$meta", "textScore")


@dataclass(frozen=True)
class SortSpec:
    keys: tuple[tuple[tuple[str, ...], int], ...]  # (path parts, 1 or -1)
    natural: int = 0  # 1 / -1 for {$natural: ±1}, 0 otherwise

    @property
    def uses_text_score(self) -> bool:
        return any(parts == TEXT_SCORE_KEY for parts, _ in self.keys)


def parse_sort(spec: dict[str, Any] | None) -> SortSpec | None:
    if not spec:
        return None
    keys = []
    natural = 0
    for path, direction in spec.items():
        if isinstance(direction, dict) and "$meta" in direction and len(direction) == 1:
            check_keyword(direction["$meta"])
            keys.append((TEXT_SCORE_KEY, -1))
            continue
        if (
            isinstance(direction, bool)
            or not isinstance(direction, (int, float))
            or direction not in (1, -1)
        ):
            raise QueryError(
                "BadValue", "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
            )
        if path == "$natural":
            natural = int(direction)
            continue
        if not path or path.startswith("$") or "" in path.split("."):
            raise QueryError("BadValue", f"Invalid sort key: {path!r}")
        keys.append((split(path), int(direction)))
    return SortSpec(tuple(keys), natural)


def _sort_value(doc: dict[str, Any], parts: tuple[str, ...], direction: int) -> Any:
    if parts == TEXT_SCORE_KEY:
        return text_score(doc)
    values: list[Any] = []
    for v in leaves(doc, parts):
        if type(v) is list:
            # MongoDB sorts an empty array below null and missing.
            values.extend(v) if v else values.append(UNDEFINED)
        else:
            values.append(v)
    present = [None if v is MISSING else v for v in values]
    if not present:
        return None
    pick = min if direction > 0 else max
    return pick(present, key=functools.cmp_to_key(compare))


def sort_key(spec: SortSpec, collation: Collating | None = None) -> Callable[[Any], Any]:
    """A key function for `spec` (which has keys): a document -> an object that orders as the
    document sorts (what sort_documents compares; for heapq.merge and sorted)."""

    def cmp_keys(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
        for va, vb, (_, direction) in zip(a, b, spec.keys):
            c = compare(va, vb)
            if c:
                return c * direction
        return 0

    wrap = functools.cmp_to_key(cmp_keys)

    def key(doc: Any) -> Any:
        if collation is not None:
            doc = _collated(doc, collation)
        return wrap(tuple(_sort_value(doc, parts, direction) for parts, direction in spec.keys))

    return key


def _collated(doc: Any, collation: Collating) -> Any:
    """The document under the collation, its metadata kept."""
    return keep_metadata(doc, collation.collate(doc))


def sort_documents(
    docs: list[tuple[dict[str, Any], Any]], spec: SortSpec, collation: Collating | None = None
) -> list[Any]:
    """Stable sort of (decoded, payload) pairs; returns the payloads in order. Strings compare
    under `collation` when one is given (storage/core/collation.py), else by code point."""
    if collation is not None and spec.keys:
        docs = [(_collated(d, collation), p) for d, p in docs]
    if not spec.keys:
        ordered = docs if spec.natural >= 0 else list(reversed(docs))
        return [p for _, p in ordered]
    keyed = [
        (tuple(_sort_value(d, parts, direction) for parts, direction in spec.keys), p)
        for d, p in docs
    ]

    tick = interrupt.current.get().tick

    def cmp_rows(a: tuple[tuple[Any, ...], Any], b: tuple[tuple[Any, ...], Any]) -> int:
        tick()
        for (va, vb), (_, direction) in zip(zip(a[0], b[0]), spec.keys):
            c = compare(va, vb)
            if c:
                return c * direction
        return 0

    keyed.sort(key=functools.cmp_to_key(cmp_rows))
    return [p for _, p in keyed]
