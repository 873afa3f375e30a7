"""Index kinds beyond ascending and descending keys (`hashed`, wildcard, `text`, `2dsphere`, `2d`):
the registry (storage/index_kinds/registry.py, re-exported here) and the kind modules, which
register themselves on import. A kind module imports the registry from `registry`, never from
this package (which imports the kind modules)."""

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
from ebbdb.storage.index_kinds import geo  # noqa: E402, F401
