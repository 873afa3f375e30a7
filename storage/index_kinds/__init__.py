"""Index kinds beyond ascending and descending keys: `hashed`, wildcard (`$**`), `text`,
`2dsphere` and `2d`. Each kind lives in its own module of this package and registers one
IndexKind: how its key pattern and its own options are checked, what a document contributes to
it, and whether it may carry `expireAfterSeconds`. storage/indexes.py asks the registry when a
createIndexes request names a kind; storage/entries.py asks it for a document's entries.

A kind's `bodies` gets the plain extractor (entries' compound-key walk, with MongoDB's multikey,
sparse and parallel-array rules) as an argument, so that a kind that only transforms leaf values
(hashed) reuses it without importing entries."""

from ebbdb.storage.index_kinds.registry import (
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

# The kinds register themselves on import (each module calls register()); add new ones here.
# Kind modules import ebbdb.storage.index_kinds.registry, not this package.
from ebbdb.storage.index_kinds import hashed, text, wildcard  # noqa: E402, F401
