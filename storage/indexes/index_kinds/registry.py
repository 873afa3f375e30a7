"""The index-kind registry (see the package's docstring): IndexKind and its functions, in a
module of their own so that the kind modules, which the package imports, import this one and
not the package (no import cycle). A kind's module is imported by the first lookup of the kind
(KIND_MODULES says which module registers which kind), so that a catalog without such indexes
never imports the geometry or the text-search libraries."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ebbdb.storage.catalog.info import IndexInfo, kind_name

if TYPE_CHECKING:  # imported at start-up (the catalog's kinds); the planner comes with a query
    from ebbdb.storage.indexes.plans import Planning
    from ebbdb.storage.query.match_tree import ParsedFilter

__all__ = [
    "IndexKind",
    "Planning",
    "register",
    "kind_named",
    "registered",
    "kind_options",
    "kind_name",
    "query_planners",
]

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
    #: The key pattern to store for the one requested, when the kind stores another form (text:
    #: `{_fts: "text", _ftsx: 1}`); None: as requested. The default name is the requested one's.
    stored_key: Callable[[Key], Key] | None = None
    #: How the planner reads this kind's indexes (storage/indexes/plans.py); None: as ascending
    #: and descending keys.
    planning: Planning | None = None


#: Every kind, with the module under storage/index_kinds that registers it
#: (tests/storage/test_index_kinds_registry.py holds this to what the modules register).
KIND_MODULES: dict[str, str] = {
    "2d": "geo",
    "2dsphere": "geo",
    "hashed": "hashed",
    "text": "text",
    "wildcard": "wildcard",
}


#: The kind modules whose query planner (Planning.query) a filter needs even on a collection
#: without their indexes, and how to tell such a filter (the parse records it): a $near needs a
#: geo index, or fails. The module is imported by the first such filter.
QUERY_PLANNED: dict[str, Callable[[ParsedFilter], bool]] = {"geo": lambda parsed: parsed.geo}

_KINDS: dict[str, IndexKind] = {}


def register(kind: IndexKind) -> IndexKind:
    _KINDS[kind.name] = kind
    return kind


def kind_named(name: str) -> IndexKind | None:
    """The kind `name` names (importing its module the first time); None for no kind (also for
    JavaScript code, which pymongo decodes as a str subclass)."""
    if type(name) is not str:
        return None
    kind = _KINDS.get(name)
    if kind is None and name in KIND_MODULES:
        importlib.import_module(f"{__package__}.{KIND_MODULES[name]}")
        kind = _KINDS.get(name)
    return kind


def query_planners(parsed: ParsedFilter) -> list[Planning]:
    """The planning of the kinds whose query planner plans this filter before the plain planner
    does (each once, for a module that registers several kinds)."""
    out: list[Planning] = []
    for module, needs in QUERY_PLANNED.items():
        if needs(parsed):
            out.extend(_module_planners(module))
    return out


def _module_planners(module: str) -> list[Planning]:
    """The distinct query planners of the kinds a module registers (importing it the first time)."""
    found = _PLANNERS.get(module)
    if found is None:
        importlib.import_module(f"{__package__}.{module}")
        found = []
        for name, kind in _KINDS.items():
            planning = kind.planning
            if KIND_MODULES.get(name) == module and planning and planning.query is not None:
                if all(p.query is not planning.query for p in found):
                    found.append(planning)
        _PLANNERS[module] = found
    return found


_PLANNERS: dict[str, list[Planning]] = {}


def registered() -> frozenset[str]:
    """The names of every kind (their modules need not be imported yet)."""
    return frozenset(KIND_MODULES)


def kind_options() -> frozenset[str]:
    """Every option some kind takes (every kind module imported)."""
    return frozenset(o for name in KIND_MODULES if (k := kind_named(name)) for o in k.options)
