"""The memory limits one operation runs under: the server parameters, and the command's
`allowDiskUse` (or `allowDiskUseByDefault`) for whether blocking stages may spill to disk."""

from __future__ import annotations

import os

from ebbdb.server.parameters import Parameters
from ebbdb.storage.core.limits import MemoryLimits

#: Where operations spill, under the data directory (emptied at startup).
SPILL_DIR = "_tmp"


def spill_dir(dbpath: str) -> str:
    return os.path.join(dbpath, SPILL_DIR)


def memory_limits(parameters: Parameters, dbpath: str, allow_disk_use: bool | None) -> MemoryLimits:
    """The limits of a find or aggregate that gave `allow_disk_use` (None: it did not)."""
    allow = parameters.get("allowDiskUseByDefault") if allow_disk_use is None else allow_disk_use
    return MemoryLimits(
        sort_bytes=int(parameters.get("internalQueryMaxBlockingSortMemoryUsageBytes")),
        group_bytes=int(parameters.get("internalDocumentSourceGroupMaxMemoryBytes")),
        allow_disk=bool(allow),
        spill_dir=spill_dir(dbpath),
    )
