"""Every index kind, registered: importing this module imports each kind module (each calls
register() on import) and gives the registry's functions. Add a new kind's module here and in
the registry's KIND_MODULES (the registry imports a kind's module on first use)."""

from ebbdb.storage.indexes.index_kinds import geo, hashed, text, wildcard
from ebbdb.storage.indexes.index_kinds.registry import (
    IndexKind,
    Leaf,
    kind_named,
    kind_options,
    registered,
)

__all__ = [
    "IndexKind",
    "Leaf",
    "geo",
    "hashed",
    "kind_named",
    "kind_options",
    "registered",
    "text",
    "wildcard",
]
