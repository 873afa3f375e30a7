"""Index kinds beyond ascending and descending keys (`hashed`, wildcard, `text`, `2dsphere`, `2d`):
the registry (storage/indexes/index_kinds/registry.py, re-exported here) and the kind modules, which
register themselves on import. The registry imports a kind's module on the first lookup of that
kind; storage/indexes/index_kinds/kinds.py imports them all. A kind registers its planning hooks
with it (`Planning`; the plan types are in storage/indexes/plans.py), so the planner reads any
kind's index without naming the kind, and no kind imports the planner.

A kind's `bodies` gets the plain extractor (entries' compound-key walk, with MongoDB's multikey,
sparse and parallel-array rules) as an argument, so that a kind that only transforms leaf values
(hashed) reuses it without importing entries."""

from ebbdb.storage.indexes.index_kinds.registry import (
    KIND_MODULES,
    Bodies,
    IndexKind,
    Key,
    Leaf,
    PlainBodies,
    kind_name,
    kind_named,
    kind_options,
    register,
    registered,
)

__all__ = [
    "KIND_MODULES",
    "Bodies",
    "IndexKind",
    "Key",
    "Leaf",
    "PlainBodies",
    "kind_name",
    "kind_named",
    "kind_options",
    "register",
    "registered",
]
