"""The aggregation pipeline: stages parsed once with MongoDB 7.0's checks and error codes, then run
as generators over decoded documents, reading collections through a Source. EngineSource reads via
the query engine, so expired documents never enter a pipeline, whether read first or joined.

`stage` holds the Stage contract and the registry; `arguments` is the one extractor of stage
specifications (MongoDB's 40415/40414/14 and each stage's own codes); `pipeline` parses and runs a
whole pipeline; `source` reads collections; `pushdown` plans the first read. Each stage family registers its stages
on import: filtering, reshaping, ordering, grouping, subpipelines, diagnostics ($collStats,
$indexStats), output ($out, $merge: they pass their input through; the server writes it),
windows ($setWindowFields), graph ($graphLookup), gaps ($densify, $fill), buckets ($bucketAuto),
geonear ($geoNear), and $documents in source. `writing` writes what $out and $merge pass on.
The top part of storage: it may import every other part.
"""

from ebbdb.storage.aggregate import (  # noqa: F401  (importing a family registers its stages)
    buckets,
    diagnostics,
    filtering,
    gaps,
    geonear,
    graph,
    grouping,
    ordering,
    output,
    reshaping,
    source,
    subpipelines,
    windows,
)
from ebbdb.storage.aggregate.change_stream import stage as _change_stream  # noqa: F401
from ebbdb.storage.aggregate.pipeline import Pipeline, parse_pipeline, run_pipeline
from ebbdb.storage.aggregate.source import READ_CHUNK, EngineSource, ServerFacts
from ebbdb.storage.aggregate.stage import Source, Stage

__all__ = [
    "READ_CHUNK",
    "EngineSource",
    "Pipeline",
    "ServerFacts",
    "Source",
    "Stage",
    "parse_pipeline",
    "run_pipeline",
]
