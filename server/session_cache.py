"""The logical session cache's periodic work, as mongod's: every logicalSessionRefreshMillis, forget
sessions idle past localLogicalSessionTimeoutMinutes (their cursors and transactions die with
them), write the sessions used since the last refresh to config.system.sessions ({_id: {id, uid},
lastUse}) and remove the ended ones. The collection's TTL index on lastUse expires records of
sessions no server refreshed (after a restart, for instance)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bson.binary import Binary

from ebbdb.server.gateway import Gateway
from ebbdb.server.parameters import Parameters
from ebbdb.server.retryable_writes import reap
from ebbdb.server.sessions import (
    SESSIONS_COLL,
    SESSIONS_DB,
    TTL_INDEX_NAME,
    SessionCatalog,
    as_datetime,
)
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution import writes
from ebbdb.storage.execution.execute import QuerySpec
from ebbdb.storage.indexes.specs import IndexSpec
from ebbdb.storage.query.update import parse_update

log = logging.getLogger("ebbdb.control")


def timeout_minutes(parameters: Parameters) -> int:
    """localLogicalSessionTimeoutMinutes: what hello and startSession report."""
    return int(parameters.get("localLogicalSessionTimeoutMinutes"))


def _id_of(key: bytes) -> dict[str, Any]:
    return {"id": Binary(key[:16], 4), "uid": Binary(key[16:], 0)}


def _ensure_collection(engine: Engine, expire_seconds: int) -> None:
    """config.system.sessions with its TTL index (made by the first refresh, as mongod does)."""
    coll = engine.collection(SESSIONS_DB, SESSIONS_COLL)
    index = (
        None
        if coll is None
        else next((ix for ix in coll.indexes if ix.name == TTL_INDEX_NAME), None)
    )
    if index is not None:
        if index.options.get("expireAfterSeconds") != expire_seconds:
            # Started with another localLogicalSessionTimeoutMinutes: as mongod, the index
            # follows it (collMod).
            engine.modify_index(
                SESSIONS_DB, SESSIONS_COLL, None, TTL_INDEX_NAME, expire_seconds, None
            )
        return
    spec = IndexSpec(TTL_INDEX_NAME, (("lastUse", 1),), {"expireAfterSeconds": expire_seconds})
    engine.create_indexes(SESSIONS_DB, SESSIONS_COLL, [spec])


async def refresh_now(catalog: SessionCatalog, gateway: Gateway, parameters: Parameters) -> None:
    """One refresh: expire idle sessions, then write and remove records in one storage write.
    A refresh that fails leaves its work to the next one."""
    timeout = timeout_minutes(parameters)
    expired = catalog.expire(timeout * 60_000)
    if expired:
        log.info("%d logical sessions timed out", len(expired))
    used, ended = catalog.take_refresh()
    live = {s.key for s in catalog.sessions()}
    engine = gateway.engine

    def job(now_ms: int) -> None:
        _ensure_collection(engine, timeout * 60)
        for session in used:
            fields: dict[str, Any] = {"lastUse": as_datetime(now_ms)}
            if session.user is not None:
                fields["user"] = {"name": f"{session.user[0]}@{session.user[1]}"}
            spec = QuerySpec.parse({"_id": _id_of(session.key)})
            change = parse_update({"$set": fields})
            writes.update(engine, SESSIONS_DB, SESSIONS_COLL, spec, change, False, True, now_ms)
        for key in ended:
            spec = QuerySpec.parse({"_id": _id_of(key)})
            writes.delete(engine, SESSIONS_DB, SESSIONS_COLL, spec, True, now_ms)
        # The retryable write records of sessions gone for a whole timeout.
        reap(engine, live, now_ms - timeout * 60_000, now_ms)

    try:
        await gateway.write_stamped(job)
    except BaseException:
        catalog.give_back(used, ended)
        raise


async def run(
    catalog: SessionCatalog, gateway: Gateway, parameters: Parameters, first: bool = False
) -> None:
    """Refresh every logicalSessionRefreshMillis until cancelled (`first`: the first refresh
    now)."""
    while True:
        if not first:
            await asyncio.sleep(int(parameters.get("logicalSessionRefreshMillis")) / 1000)
        first = False
        try:
            await refresh_now(catalog, gateway, parameters)
        except Exception as exc:  # the next refresh tries again
            log.warning("logical session refresh failed: %s", exc)
