"""Dotted paths through documents and arrays, with MongoDB's rules for what a path yields."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: What a path yields where the document has no such field.
MISSING: Any = _Missing()


def split(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


def leaves(value: Any, parts: tuple[str, ...], i: int = 0) -> Iterator[Any]:
    """Every value `parts[i:]` reaches from `value`, descending into arrays as MongoDB's matcher does:
    an array element that is a document is searched for the next field, and a numeric field also
    indexes the array itself. Yields MISSING once for each branch that ends without a value."""
    if i == len(parts):
        yield value
        return
    if isinstance(value, dict):
        child = value.get(parts[i], MISSING)
        if child is MISSING:
            yield MISSING
        else:
            yield from leaves(child, parts, i + 1)
        return
    if isinstance(value, list):
        part = parts[i]
        found = False
        if part.isdigit():
            idx = int(part)
            if idx < len(value):
                found = True
                yield from leaves(value[idx], parts, i + 1)
        for element in value:
            if isinstance(element, dict):
                found = True
                yield from leaves(element, parts, i)
        if not found:
            yield MISSING
        return
    yield MISSING


def get(doc: Any, parts: tuple[str, ...]) -> Any:
    """The value at a path without array traversal (for index keys on non-array paths and _id);
    MISSING where any step is absent or not a document."""
    value = doc
    for part in parts:
        if isinstance(value, dict):
            value = value.get(part, MISSING)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value
