"""Tailable cursors on capped collections: find's checks and plan (a forward collection scan in
natural order), and getMore's batch, which resumes after the last record the cursor passed and,
for an awaitData cursor with nothing new, waits on the event loop for a committed insert into the
collection (server/inserts.py) up to maxTimeMS (1 s by default, as mongod)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ebbdb.server.context import CommandContext
from ebbdb.server.cursors import Cursor, Tailing, fill_batch
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.values import render
from ebbdb.storage.engine import capped
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.indexes.planner import CollScan

#: How long a getMore on an awaitData cursor waits when the client gives no maxTimeMS.
DEFAULT_AWAIT_MS = 1000


def check_find(
    tailable: bool, await_data: bool, sort: Mapping[str, Any] | None, single_batch: bool
) -> Tailing | None:
    """The find options of a tailable cursor, checked as MongoDB's find request is (before the
    collection is looked at); None for an ordinary find."""
    if await_data and not tailable:
        raise CommandError(
            ErrorCode.FailedToParse, "Cannot set 'awaitData' without also setting 'tailable'"
        )
    if not tailable:
        return None
    if sort and dict(sort) != {"$natural": 1}:
        raise CommandError(
            ErrorCode.BadValue, "cannot use tailable option with a sort other than {$natural: 1}"
        )
    if single_batch:
        raise CommandError(
            ErrorCode.BadValue, "cannot use tailable option with the 'singleBatch' option"
        )
    return Tailing(await_data)


def _query_text(ns: str, filter: Mapping[str, Any], sort: Any, projection: Any) -> str:
    """The canonical query as MongoDB's error messages show it (exact for an empty filter, whose
    tree is an empty $and)."""
    tree = "$and" if not filter else render(dict(filter))
    return (
        f"ns={ns}Tree: {tree}\nSort: {render(dict(sort or {}))}\n"
        f"Proj: {render(dict(projection or {}))}\n"
    )


def tail_run(
    coll: CollectionInfo, spec: QuerySpec, ns: str, sort: Any, projection: Any
) -> QueryRun:
    """The run of a tailable find: refused unless the collection is capped (2 BadValue, in
    mongod's words), else a forward collection scan, whatever index the filter could use."""
    if capped.limits(coll) is None:
        raise CommandError(
            ErrorCode.BadValue,
            f"error processing query: {_query_text(ns, spec.filter, sort, projection)} "
            "tailable cursor requested on non capped collection",
        )
    return QueryRun(coll, spec, CollScan())


def keeps_cursor(ctx: CommandContext, coll: CollectionInfo) -> bool:
    """Whether a tailable find keeps its cursor: mongod keeps it unless the collection has no
    records at all (SERVER-13955), even when the first batch took everything."""
    with ctx.gateway.engine.read() as reader:
        return reader.stats(coll)[0] > 0


def check_get_more(cursor: Cursor, max_time_ms: int | None) -> None:
    """maxTimeMS on getMore only sets how long an awaitData cursor waits."""
    if max_time_ms is not None and (cursor.tail is None or not cursor.tail.await_data):
        raise CommandError(
            ErrorCode.BadValue,
            "cannot set maxTimeMS on getMore command for a non-awaitData cursor",
        )


def _gone(ctx: CommandContext, run: QueryRun) -> bool:
    current = ctx.gateway.engine.collection(run.coll.db, run.coll.name)
    return current is None or current.id != run.coll.id


async def tail_batch(
    ctx: CommandContext, cursor: Cursor, max_docs: int | None, max_time_ms: int | None
) -> list[bytes]:
    """The next batch of a tailable cursor: the documents inserted after the last one it passed;
    with awaitData and none yet, wait (without holding the event loop) for an insert into the
    collection to commit, until maxTimeMS is up. Marks the run exhausted only when its
    collection is gone or its limit is reached (the cursor then closes)."""
    run = cursor.run
    assert isinstance(run, QueryRun) and cursor.tail is not None

    async def look() -> list[bytes]:
        run.exhausted = False  # a tailable scan resumes after the last record it passed
        docs = await fill_batch(ctx.gateway, run, max_docs, ctx.now())
        left = run.limit_left
        run.exhausted = _gone(ctx, run) or (left is not None and left <= 0)
        return docs

    docs = await look()
    if docs or run.exhausted or not cursor.tail.await_data:
        return docs
    loop = asyncio.get_running_loop()
    wait_ms = DEFAULT_AWAIT_MS if max_time_ms is None else max_time_ms
    deadline = loop.time() + wait_ms / 1000
    while not cursor.killed:
        with ctx.gateway.inserts.waiting(run.coll.id) as inserted:
            docs = await look()  # after registering: an insert committed from now on wakes us
            left = deadline - loop.time()
            if docs or run.exhausted or left <= 0:
                return docs
            cursor.waiting = inserted  # killCursors wakes it too
            try:
                async with asyncio.timeout(left):
                    await inserted
            except TimeoutError:
                return await look()
            finally:
                cursor.waiting = None
    return []
