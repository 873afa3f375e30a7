"""The database profiler and the slow-operation log, as mongod keeps them: per-database profiling
levels (0 off, 1 slow operations, 2 all) and filters, the global `slowms` and `sampleRate`, the
"Slow query" line (id 51803) for an operation slower than slowms, and `<db>.system.profile`
documents written through the storage writer, never on the event loop.

The dispatcher times every command and calls `finished` only for one past `threshold`, a number
that is slowms while nothing is profiled: a fast command costs one comparison. The query language
(a profile filter, a find's plan) is imported when there is one, not at start."""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import bson
from bson import Int64
from bson.raw_bson import RawBSONDocument

from ebbdb.server.arguments import DocSequence
from ebbdb.server.gateway import Gateway
from ebbdb.server.log import log_event
from ebbdb.server.raw_reply import RawDoc
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.values import render

if TYPE_CHECKING:
    from ebbdb.storage.execution.execute import QueryRun
    from ebbdb.storage.query.match_tree import Predicate

log = logging.getLogger("ebbdb.command")

#: mongod's "Slow query" line.
SLOW_QUERY_ID = 51803
#: mongod's "Profiler settings changed" line.
SETTINGS_CHANGED_ID = 48742
#: The profiler collection of each database (a plain collection here: ebbdb has no capped ones).
PROFILE_COLLECTION = "system.profile"
#: A logged command larger than this (bytes of BSON) is logged as `{$truncated: "..."}`.
MAX_LOGGED_COMMAND = 10 * 1024
#: mongod's limit on a profiled command (appendMaxElementSize).
MAX_PROFILED_COMMAND = 50 * 1024
#: Profile documents waiting for the writer; past this they are dropped (and counted).
MAX_PENDING = 10_000
FILTER_NOTE = (
    "When a filter expression is set, slowms and sampleRate are not used for profiling and "
    "slow-query log lines."
)

#: A command's `op` in system.profile (others are "command").
_OPS = {
    "find": "query",
    "getMore": "getmore",
    "insert": "insert",
    "update": "update",
    "delete": "remove",
}


_ERROR_FIELDS = ("ok", "errMsg", "errName", "errCode")


@dataclass(frozen=True)
class ProfileSettings:
    """One database's profiling level and filter (the filter's source and its compiled form)."""

    level: int = 0
    filter: dict[str, Any] | None = None
    predicate: Predicate | None = None


@dataclass(frozen=True)
class Finished:
    """A command that has run, as the dispatcher saw it."""

    db: str
    name: str
    body: Mapping[str, Any]
    reply: Mapping[str, Any]
    seconds: float
    peer: str
    metadata: Mapping[str, Any] | None
    run: object  # the QueryRun a find or getMore read with (None: none)
    ctx: str
    #: The most memory the operation's stages held at once, tracked (MongoDB 8's
    #: peakTrackedMemBytes; 0: none, and then not shown).
    peak_memory: int = 0


def app_name(metadata: Mapping[str, Any] | None) -> str | None:
    """The application name a driver's handshake carried (`client.application.name`)."""
    if not metadata:
        return None
    app = metadata.get("application")
    name = app.get("name") if isinstance(app, Mapping) else None
    return name if isinstance(name, str) and name else None


#: Top-level command fields never logged, profiled or echoed in a message.
_SECRETS = frozenset({"pwd", "payload"})


def loggable_command(body: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """The command as mongod logs and profiles it: the body without the OP_MSG document sequences
    (mongod's CurOp keeps the body alone), as `{$truncated: "<toString>..."}` past `limit`.
    Passwords (createUser's and updateUser's `pwd`) and SASL payloads read "xxx", as mongod
    redacts them."""
    cmd = {
        k: "xxx" if k in _SECRETS else v for k, v in body.items() if not isinstance(v, DocSequence)
    }
    budget = _Budget(limit)
    shown = _trimmed(cmd, budget)
    if budget.cut:
        # Past `limit` values (each renders to a character or more, so the text is past `limit`
        # characters), the rest cannot show: neither encoded nor rendered, so that a command of
        # 500,000 values does not hold the event loop (as measuring it whole did, for a second).
        return {"$truncated": render(shown)[: limit - 3] + "..."}
    try:
        size = len(bson.encode(cmd, codec_options=CODEC))
    except Exception:  # a value BSON cannot hold: say so rather than fail the report
        return {"$truncated": "(not encodable)"}
    if size <= limit:
        return cmd
    text = render(cmd)
    return {"$truncated": text[: limit - 3] + "..." if len(text) > limit else text}


class _Budget:
    """How many more values a trimmed copy may hold (see _trimmed), and whether it ran out."""

    __slots__ = ("cut", "left")

    def __init__(self, left: int) -> None:
        self.left = left
        self.cut = False


def _trimmed(value: Any, budget: _Budget) -> Any:
    """`value` with its documents' and arrays' values, in document order, cut off once `budget`
    is spent (`budget.cut` then says so); `value` itself when it holds no document or array."""
    if isinstance(value, Mapping):
        doc: dict[Any, Any] = {}
        for k, v in value.items():
            if budget.left <= 0:
                budget.cut = True
                break
            budget.left -= 1
            doc[k] = _trimmed(v, budget)
        return doc
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for v in value:
            if budget.left <= 0:
                budget.cut = True
                break
            budget.left -= 1
            items.append(_trimmed(v, budget))
        return items
    return value


def _namespace(db: str, name: str, body: Mapping[str, Any]) -> str:
    """mongod's `ns` of an operation: `db.coll` for a command on a collection, else `db.$cmd`."""
    if name == "getMore":
        coll = body.get("collection")
    else:
        coll = next(iter(body.values()), None)
    if isinstance(coll, str) and coll:
        return f"{db}.{coll}"
    if name == "aggregate":
        return f"{db}.$cmd.aggregate"
    return f"{db}.$cmd"


def plan_summary(run: QueryRun) -> str:
    """mongod's planSummary: COLLSCAN, IDHACK (an _id lookup), or IXSCAN with the key pattern."""
    from ebbdb.storage.indexes.planner import IndexScan  # loaded already: `run` was planned

    plan = run.plan
    if not isinstance(plan, IndexScan):
        return "COLLSCAN"
    if plan.point is not None and plan.index.name == "_id_":
        return "IDHACK"
    return f"IXSCAN {render(dict(plan.index.key))}"


def _metrics(f: Finished) -> dict[str, Any]:
    """What is known of what the operation did, under mongod's names and in mongod's order:
    cursorid, keysExamined, docsExamined, nMatched, nModified, ninserted, ndeleted, nUpserted,
    cursorExhausted, nreturned, and the error (ok, errMsg, errName, errCode)."""
    out: dict[str, Any] = {}
    run = None
    if f.run is not None:
        from ebbdb.storage.execution.execute import QueryRun  # loaded already: a run was made

        run = f.run if isinstance(f.run, QueryRun) else None
    cursor = f.reply.get("cursor")
    cursor_id = None
    returned = None
    if type(cursor) is RawDoc and cursor.batch is not None:
        # A cursor reply laid out as BSON (server.commands.replies), up to 16 MB: its batch is
        # not read (inflating it held the event loop for most of a second).
        returned, cursor_id = cursor.batch
        if cursor_id:
            out["cursorid"] = Int64(cursor_id)
    elif isinstance(cursor, RawDoc):
        cursor = RawBSONDocument(cursor.raw)
    if isinstance(cursor, Mapping):
        batch = cursor.get("firstBatch", cursor.get("nextBatch"))
        returned = len(batch) if isinstance(batch, list) else None
        cursor_id = cursor.get("id")
        if cursor_id:
            out["cursorid"] = Int64(cursor_id)
    if run is not None:
        out["planSummary"] = plan_summary(run)
        out["keysExamined"] = run.keys_examined
        out["docsExamined"] = run.docs_examined
    n = f.reply.get("n")
    if f.reply.get("ok") and isinstance(n, int):
        if f.name == "update":
            upserted = f.reply.get("upserted")
            n_upserted = len(upserted) if isinstance(upserted, list) else 0
            out["nMatched"] = n - n_upserted
            out["nModified"] = f.reply.get("nModified", 0)
            if n_upserted:
                out["nUpserted"] = n_upserted
        elif f.name == "insert":
            out["ninserted"] = n
        elif f.name == "delete":
            out["ndeleted"] = n
    if cursor_id == 0 and f.name in ("find", "getMore", "aggregate"):
        out["cursorExhausted"] = True
    if returned is not None:
        out["nreturned"] = returned
    if f.peak_memory:
        out["peakTrackedMemBytes"] = Int64(f.peak_memory)
    if not f.reply.get("ok"):
        out["ok"] = 0
        out["errMsg"] = f.reply.get("errmsg", "")
        out["errName"] = f.reply.get("codeName", "")
        out["errCode"] = f.reply.get("code", 0)
    return out


def profile_document(f: Finished, now: datetime.datetime) -> dict[str, Any]:
    """The system.profile document of an operation, in mongod's field order (the fields ebbdb
    knows: no locks or storage statistics, no execStats)."""
    metrics = _metrics(f)
    summary = metrics.pop("planSummary", None)
    ok_fields: dict[str, Any] = {k: metrics.pop(k) for k in _ERROR_FIELDS if k in metrics}
    returned = metrics.pop("nreturned", None)
    doc: dict[str, Any] = {
        "op": _OPS.get(f.name, "command"),
        "ns": _namespace(f.db, f.name, f.body),
        "command": loggable_command(f.body, MAX_PROFILED_COMMAND),
        **metrics,
        "numYield": 0,
    }
    if returned is not None:
        doc["nreturned"] = returned
    doc["locks"] = {}
    doc["flowControl"] = {}
    if ok_fields:
        ok_fields["ok"] = 0.0
        doc.update(ok_fields)
    doc["protocol"] = "op_msg"
    doc["millis"] = int(f.seconds * 1000)
    if summary is not None:
        doc["planSummary"] = summary
    doc["ts"] = now
    doc["client"] = f.peer.rsplit(":", 1)[0] if ":" in f.peer else f.peer
    name = app_name(f.metadata)
    if name is not None:
        doc["appName"] = name
    doc["allUsers"] = []
    doc["user"] = ""
    return doc


def slow_query_attr(f: Finished) -> dict[str, Any]:
    """The attributes of mongod's "Slow query" line, in mongod's order."""
    attr: dict[str, Any] = {"type": "command", "ns": _namespace(f.db, f.name, f.body)}
    name = app_name(f.metadata)
    if name is not None:
        attr["appName"] = name
    attr["command"] = loggable_command(f.body, MAX_LOGGED_COMMAND)
    metrics = _metrics(f)
    summary = metrics.pop("planSummary", None)
    if summary is not None:
        attr["planSummary"] = summary
    errors: dict[str, Any] = {k: metrics.pop(k) for k in _ERROR_FIELDS if k in metrics}
    returned = metrics.pop("nreturned", None)
    attr.update(metrics)
    attr["numYields"] = 0
    if returned is not None:
        attr["nreturned"] = returned
    attr.update(errors)
    attr["remote"] = f.peer
    attr["protocol"] = "op_msg"
    attr["durationMillis"] = int(f.seconds * 1000)
    return attr


def _slow_query_text(f: Finished, attr: dict[str, Any]) -> str:
    """The readable line: `Slow query: find test.c 152ms planSummary:COLLSCAN docsExamined:...`."""
    parts = [f"Slow query: {f.name} {attr['ns']} {attr['durationMillis']}ms"]
    for key in (
        "appName",
        "planSummary",
        "keysExamined",
        "docsExamined",
        "nMatched",
        "nModified",
        "ninserted",
        "ndeleted",
        "nreturned",
        "peakTrackedMemBytes",
        "errName",
    ):
        if key in attr:
            parts.append(f"{key}:{attr[key]}")
    return " ".join(parts)


class Profiler:
    """Profiling settings and what they cause. `threshold` (seconds) is what the dispatcher
    compares a command's time with: slowms while no database is profiled and no filter is set,
    and minus infinity otherwise (every command is then looked at)."""

    def __init__(
        self,
        gateway: Gateway | None = None,
        *,
        slowms: int = 100,
        sample_rate: float = 1.0,
        default_level: int = 0,
        log_all: bool = False,
    ) -> None:
        self.gateway = gateway
        self.slowms = slowms
        self.sample_rate = sample_rate
        #: Every operation gets a "Slow query" line (mongod at COMMAND verbosity 1 and up).
        self.log_all = log_all
        self.default = ProfileSettings(default_level)
        self._dbs: dict[str, ProfileSettings] = {}
        self.threshold = 0.0
        #: Profile documents dropped because the writer fell MAX_PENDING behind.
        self.dropped = 0
        self._pending: list[tuple[str, bytes]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False
        self._refresh()

    def _refresh(self) -> None:
        watching = self.log_all or any(
            s.level > 0 or s.predicate is not None for s in (self.default, *self._dbs.values())
        )
        self.threshold = -math.inf if watching else self.slowms / 1000

    def settings(self, db: str) -> ProfileSettings:
        return self._dbs.get(db, self.default)

    def reset(self, level: int, slowms: int, sample_rate: float) -> list[str]:
        """Every database back to `level` without a filter, with `slowms` and `sample_rate` (the
        start-up settings; resetTestState); returns the databases that had settings of their own."""
        dbs = sorted(self._dbs)
        self._dbs.clear()
        self.default = ProfileSettings(level)
        self.slowms, self.sample_rate = slowms, sample_rate
        self._refresh()
        return dbs

    def configure(
        self,
        db: str,
        level: int,
        filter: dict[str, Any] | None | bool,
        slowms: int | None,
        sample_rate: float | None,
        ctx: str | None = None,
    ) -> tuple[ProfileSettings, int, float]:
        """Apply a `profile` command to `db`: a level outside 0..2 keeps the current one;
        `filter` is a document to set, None to unset, False to keep. Returns the settings,
        slowms and sampleRate that were in force before. Raises QueryError for a bad filter."""
        old = self.settings(db)
        old_slowms, old_rate = self.slowms, self.sample_rate
        new = old
        if filter is None:
            new = ProfileSettings(new.level)
        elif filter is not False:
            assert isinstance(filter, dict)
            from ebbdb.storage.query.match import compile_filter

            new = ProfileSettings(new.level, filter, compile_filter(filter))
        if 0 <= level <= 2:
            new = ProfileSettings(level, new.filter, new.predicate)
        if slowms is not None:
            self.slowms = slowms
        if sample_rate is not None:
            self.sample_rate = sample_rate
        self._dbs[db] = new
        self._refresh()
        if level != -1 or slowms is not None or sample_rate is not None or filter is not False:
            self._log_change(db, old, old_slowms, old_rate, new, ctx)
        return old, old_slowms, old_rate

    def _log_change(
        self,
        db: str,
        old: ProfileSettings,
        slowms: int,
        rate: float,
        new: ProfileSettings,
        ctx: str | None,
    ) -> None:
        def state(s: ProfileSettings, ms: int, r: float) -> dict[str, Any]:
            out: dict[str, Any] = {"level": s.level, "slowms": ms, "sampleRate": r}
            if s.filter is not None:
                out["filter"] = s.filter
            return out

        attr = {
            "from": state(old, slowms, rate),
            "to": state(new, self.slowms, self.sample_rate),
            "db": db,
        }
        log_event(
            log,
            logging.INFO,
            SETTINGS_CHANGED_ID,
            "Profiler settings changed",
            attr,
            ctx=ctx,
            text=f"Profiler settings changed on {db}: level {old.level} -> {new.level}, "
            f"slowms {slowms} -> {self.slowms}, sampleRate {rate} -> {self.sample_rate}",
        )

    def finished(self, f: Finished) -> None:
        """A command that took longer than `threshold`: log it as a slow query and write its
        profile document, as the settings of its database say."""
        settings = self.settings(f.db)
        doc: dict[str, Any] | None = None
        if settings.predicate is not None:
            doc = profile_document(f, datetime.datetime.now(datetime.UTC))
            try:
                passes = bool(settings.predicate(doc))
            except Exception:  # a filter that fails on this document selects nothing
                passes = False
            log_it = profile_it = passes
        else:
            slow = f.seconds * 1000 > self.slowms
            sampled = self.sample_rate >= 1.0 or random.random() < self.sample_rate
            log_it = (slow or self.log_all) and sampled
            profile_it = slow and sampled
        if log_it:
            attr = slow_query_attr(f)
            log_event(
                log,
                logging.INFO,
                SLOW_QUERY_ID,
                "Slow query",
                attr,
                ctx=f.ctx,
                text=_slow_query_text(f, attr),
            )
        if settings.level >= 2 or (settings.level == 1 and profile_it):
            if doc is None:
                doc = profile_document(f, datetime.datetime.now(datetime.UTC))
            self._profile(f.db, doc)

    # -- writing system.profile --------------------------------------------------------------------

    def _profile(self, db: str, doc: dict[str, Any]) -> None:
        if self.gateway is None or self._closed or not db:
            return
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        try:
            raw = bson.encode(doc, codec_options=CODEC)
        except Exception:
            self.dropped += 1
            return
        self._pending.append((db, raw))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        """Hand the pending documents to the writer thread, one insert per database, until none
        are left (those profiled meanwhile go with the next round)."""
        gateway = self.gateway
        assert gateway is not None
        while self._pending:
            pending, self._pending = self._pending, []
            by_db: dict[str, list[bytes]] = {}
            for db, raw in pending:
                by_db.setdefault(db, []).append(raw)
            for db, docs in by_db.items():
                try:
                    await gateway.write(gateway.engine.insert, db, PROFILE_COLLECTION, docs, False)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning(
                        "could not write %d profile documents to %s: %s", len(docs), db, exc
                    )

    async def settle(self, collection: str | None) -> None:
        """Before a read of `collection`: when it is system.profile, let the profile documents
        already written for earlier operations reach it (MongoDB writes them as part of the
        operation, so the next read sees them)."""
        if collection != PROFILE_COLLECTION:
            return
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            await asyncio.shield(flusher)

    async def close(self, timeout: float = 1.0) -> None:
        """Let the documents already handed over reach storage (briefly), then stop: what is
        profiled from now on is not written."""
        self._closed = True
        flusher = self._flusher
        if flusher is None or flusher.done():
            return
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(flusher)
        except TimeoutError:
            flusher.cancel()
