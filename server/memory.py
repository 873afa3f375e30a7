"""The memory limits one operation runs under: the server parameters (and $densify's cap on what
it generates), and the command's `allowDiskUse` (or `allowDiskUseByDefault`) for whether blocking
stages may spill to disk; and
the server's cap on what all operations hold (ebbdbMaxTrackedMemoryBytes), with what serverStatus
reports of it."""

from __future__ import annotations

import os
from typing import Any

from bson import Int64

from ebbdb.server.parameters import Parameters
from ebbdb.storage.core.limits import MemoryLimits
from ebbdb.storage.core.memory import Pool

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
        lookup_bytes=int(parameters.get("internalLookupStageIntermediateDocumentMaxSizeBytes")),
        window_bytes=int(parameters.get("internalDocumentSourceSetWindowFieldsMaxMemoryBytes")),
        densify_docs=int(parameters.get("internalQueryMaxAllowedDensifyDocs")),
        densify_bytes=int(parameters.get("internalDocumentSourceDensifyMaxMemoryBytes")),
    )


def cap_pool(parameters: Parameters, pool: Pool) -> None:
    """Keep `pool`'s cap at ebbdbMaxTrackedMemoryBytes, now and after every runtime change."""

    def follow() -> None:
        pool.cap = int(parameters.get("ebbdbMaxTrackedMemoryBytes"))

    follow()
    parameters.on_change("ebbdbMaxTrackedMemoryBytes", follow)


def memory_status(pool: Pool) -> dict[str, Any]:
    """serverStatus's `ebbdb.memory`: what operations hold now, the most they held at once, and
    the cap (0: none), in bytes."""
    return {
        "usedBytes": Int64(pool.used),
        "peakBytes": Int64(pool.peak),
        "capBytes": Int64(pool.cap),
    }
