"""Aggregations that end in $out or $merge: the pipeline's results are computed on a reader thread,
then written by jobs for the writer thread ($out in one job, so the target changes atomically;
$merge in batches), and the reply is MongoDB's empty cursor. With `batchSize: 0` the cursor stays
open and the write happens at its first getMore, as in MongoDB. The storage side is
storage/aggregate/writing.py."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from ebbdb.server.context import CommandContext
from ebbdb.server.cursors import PipelineRun
from ebbdb.storage.aggregate.output import Merge, Out
from ebbdb.storage.aggregate.writing import (
    MERGE_BATCH,
    MergeTarget,
    check_target,
    merge_batch,
    replace_collection,
)
from ebbdb.storage.core.collation import Collation
from ebbdb.storage.core.footprint import LIST_SLOT
from ebbdb.storage.core.interrupt import current

_ALL = 1 << 31
_NO_LIMIT = 1 << 62


def writes_output(body: Mapping[str, Any]) -> bool:
    """Whether an aggregate command's pipeline ends in $out or $merge (it then takes a
    writeConcern, as MongoDB's does)."""
    pipeline = body.get("pipeline")
    if not isinstance(pipeline, list) or not pipeline or not isinstance(pipeline[-1], Mapping):
        return False
    return next(iter(pipeline[-1]), None) in ("$out", "$merge")


class OutputRun(PipelineRun):
    """A pipeline whose results are written, not returned: its first batch (aggregate's, or the
    first getMore's after `batchSize: 0`) runs the whole pipeline, writes, and returns nothing."""

    def __init__(
        self,
        results: Iterator[dict[str, Any]],
        set_now: Callable[[int], None],
        read: Callable[..., Any],
        write: Callable[[list[bytes]], Awaitable[None]],
        what: str = "$out",
    ) -> None:
        super().__init__(results, set_now, read)
        self._write = write
        self._what = what  # the writing stage's name

    async def fill(self, max_docs: int | None, now_ms: int) -> list[bytes]:
        if self.exhausted:
            return []
        docs: list[bytes] = []
        # The results are all held before they are written (one atomic write for $out):
        # counted against the server's cap.
        tracker = current.get().memory.child(self._what)
        try:
            while not self.exhausted:
                batch = await self._read(self._pull, _ALL, _NO_LIMIT, now_ms)
                tracker.charge(sum(map(sys.getsizeof, batch)) + LIST_SLOT * len(batch))
                docs += batch
            await self._write(docs)
        finally:
            tracker.close()
        return []


def output_run(
    ctx: CommandContext,
    stage: Out | Merge,
    results: Iterator[dict[str, Any]],
    set_now: Callable[[int], None],
    variables: Mapping[str, Any],
    collation: Collation | None,
    bypass: bool,
) -> OutputRun:
    """The run of a pipeline ending in `stage`; raises MongoDB's error for a target it may not
    write (checked now, before any work, as MongoDB does)."""
    engine = ctx.gateway.engine
    db = stage.db if stage.db is not None else ctx.db
    index = check_target(engine, stage, db, collation)
    write: Callable[[list[bytes]], Awaitable[None]]
    if isinstance(stage, Out):

        async def write(docs: list[bytes]) -> None:
            await ctx.gateway.write_stamped(
                replace_collection, engine, db, stage.coll, docs, bypass
            )

    else:
        assert index is not None
        target = MergeTarget(stage, index, variables, collation, bypass)

        async def write(docs: list[bytes]) -> None:
            for i in range(0, len(docs), MERGE_BATCH):
                batch = docs[i : i + MERGE_BATCH]
                await ctx.gateway.write_stamped(merge_batch, engine, db, stage.coll, batch, target)

    return OutputRun(results, set_now, ctx.gateway.read, write, stage.name)
