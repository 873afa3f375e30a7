"""The registry of index kinds (re-exported by the package): each kind module of
storage/index_kinds imports it from here, not from the package, whose __init__ imports the kind
modules (an import cycle otherwise). Index kinds beyond ascending and descending keys: `hashed`,
wildcard (`$**`), `text`, `2dsphere` and `2d`. Each kind lives in its own module of this package
and registers one IndexKind: how its key pattern and its own options are checked, what a document
contributes to it, and whether it may carry `expireAfterSeconds`. storage/indexes.py asks the registry when a
createIndexes request names a kind; storage/entries.py asks it for a document's entries.

A kind's `bodies` gets the plain extractor (entries' compound-key walk, with MongoDB's multikey,
sparse and parallel-array rules) as an argument, so that a kind that only transforms leaf values
(hashed) reuses it without importing entries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ebbdb.storage.catalog import IndexInfo, kind_name

__all__ = ["IndexKind", "register", "kind_named", "registered", "kind_options", "kind_name"]

Key = tuple[tuple[str, Any], ...]
#: Encoded entry bodies with the field values that made each, and whether an array made them.
Bodies = tuple[list[tuple[bytes, dict[str, Any]]], bool]
#: Maps one indexed field's leaf value to the value encoded in its place.
Leaf = Callable[[str, Any], Any]
#: entries' plain walk: (index, document, leaf mapper or None) -> bodies.
PlainBodies = Callable[[IndexInfo, dict[str, Any], Leaf | None], Bodies]


@dataclass(frozen=True)
class IndexKind:
    """One index kind. `name` is the string in the key pattern ("hashed", "text", ...), or
    "wildcard" for `$**` keys."""

    name: str
    #: Validates the key pattern and the options (all of them: the common ones too, since a kind
    #: may refuse one, e.g. `unique`), raising QueryError with MongoDB's codes. Returns this kind's
    #: own options to store, with MongoDB's defaults filled in (listIndexes shows them).
    check: Callable[[Key, dict[str, Any]], dict[str, Any]]
    #: What a document contributes: (index, document, plain extractor) -> bodies.
    bodies: Callable[[IndexInfo, dict[str, Any], PlainBodies], Bodies]
    #: The options only this kind takes (weights, 2dsphereIndexVersion, wildcardProjection, ...).
    options: frozenset[str] = frozenset()


_KINDS: dict[str, IndexKind] = {}


def register(kind: IndexKind) -> IndexKind:
    _KINDS[kind.name] = kind
    return kind


def kind_named(name: str) -> IndexKind | None:
    return _KINDS.get(name)


def registered() -> frozenset[str]:
    return frozenset(_KINDS)


def kind_options() -> frozenset[str]:
    """Every option some registered kind takes."""
    return frozenset(o for k in _KINDS.values() for o in k.options)
