"""`$changeStream` in the stage registry: parsed and placed as mongod places it (first, never in
$facet, $lookup or $unionWith), so it counts among the stages ebbdb runs. A change stream is not
run through the pipeline: the server opens it from the oplog (server/change_streams.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ebbdb.storage.aggregate.change_stream.spec import StreamSpec, parse_spec
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Placement, Stage
from ebbdb.storage.core.errors import QueryError


class ChangeStream(Stage, name="$changeStream"):
    spec: StreamSpec

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # Only a pipeline that is not a stream's reaches here (an explain of one).
        raise QueryError("NotImplemented", "explain of a $changeStream is not supported")


@STAGES.stage("$changeStream", Placement(first=True, in_facet=False, in_subpipeline=False))
def _parse(spec: Any, defined: frozenset[str]) -> Stage:
    return ChangeStream(parse_spec(spec))
