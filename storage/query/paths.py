"""Dotted paths through documents and arrays, with MongoDB's rules for what a path yields."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bson import DBRef


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


def values_at(doc: dict[str, Any], parts: tuple[str, ...], expand: bool) -> list[Any]:
    """What the matcher tests at a dotted path, following MongoDB's element iterator exactly:

    - a path that ends at an array reached by field name yields the array and its elements when
      `expand` (most operators), or only the array ($size, $elemMatch);
    - an array met before the path ends is searched element by element: a document element is
      searched for the rest of the path (MISSING where it lacks it), and a numeric component also
      indexes the array; scalar elements and nested arrays yield nothing;
    - an element reached by an index (`a.0`) is yielded as it is, even an array;
    - a missing field, or a scalar met before the path ends, yields MISSING.

    Unlike `leaves`, an array with no document element yields nothing rather than MISSING, so
    {"a.b": null} does not match {a: [1]} in MongoDB."""
    out: list[Any] = []
    _from_doc(doc, parts, 0, expand, out)
    return out


def _as_doc(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if type(value) is DBRef:
        # pymongo decodes {$ref, $id} subdocuments as DBRef; MongoDB sees a plain subdocument.
        return dict(value.as_doc())
    return None


def _from_doc(
    doc: dict[str, Any], parts: tuple[str, ...], i: int, expand: bool, out: list[Any]
) -> None:
    n = len(parts)
    while True:
        value = doc.get(parts[i], MISSING)
        i += 1
        if i == n:
            out.append(value)
            if expand and type(value) is list:
                out.extend(value)
            return
        if type(value) is list:
            _from_array(value, parts, i, expand, out)
            return
        sub = _as_doc(value)
        if sub is None:
            out.append(MISSING)
            return
        doc = sub


def _from_array(
    array: list[Any], parts: tuple[str, ...], i: int, expand: bool, out: list[Any]
) -> None:
    part = parts[i]
    # Only a canonical number is an offset: "01" names a field, never element 1.
    index = int(part) if part.isascii() and part.isdigit() and str(int(part)) == part else -1
    last = i + 1 == len(parts)
    for k, element in enumerate(array):
        sub = _as_doc(element)
        if sub is not None:
            _from_doc(sub, parts, i, expand, out)
            if k == index:
                if last:
                    out.append(element)
                else:
                    _from_doc(sub, parts, i + 1, expand, out)
        elif k == index:
            if last:
                out.append(element)
            elif type(element) is list:
                _from_array(element, parts, i + 1, expand, out)
