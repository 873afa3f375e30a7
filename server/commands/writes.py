"""Writing documents: insert, update, delete and findAndModify. Statements are parsed here, run on
the writer thread by storage (storage/execution/writes.py matches through the query engine, so expired
documents are never matched), and per-statement failures go back in `writeErrors`."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ebbdb.server import retryable_writes
from ebbdb.server.arguments import COMMAND_VALUE, MAX_WRITE_BATCH_SIZE, ItemCount, Kind, OneOf, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode, write_error
from ebbdb.server.large_messages import PASS_ITEMS, EncodedDocs, LargeReply, encoded
from ebbdb.server.registry import REGISTRY
from ebbdb.server.retryable_writes import Retry
from ebbdb.server.sessions import CURRENT_TRANSACTION
from ebbdb.storage.aggregate.updates import parse_pipeline_update
from ebbdb.storage.catalog import timeseries
from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name
from ebbdb.storage.core.collation import Collation, resolve
from ebbdb.storage.core.errors import QueryError, StorageError
from ebbdb.storage.engine.oplog import WRITE_SESSION
from ebbdb.storage.engine.store import InsertResult
from ebbdb.storage.engine.writer import SLICER
from ebbdb.storage.execution import writes
from ebbdb.storage.execution.execute import QuerySpec
from ebbdb.storage.query.expressions import command_variables
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import parse_projection
from ebbdb.storage.query.update import Update, parse_update

#: How many documents or statements a write command carries (insert, update, delete).
WRITE_BATCH = ItemCount(
    1,
    MAX_WRITE_BATCH_SIZE,
    f"Write batch sizes must be between 1 and {MAX_WRITE_BATCH_SIZE}. Got {{count}} operations.",
    ErrorCode.InvalidLength,
)

S = TypeVar("S")
T = TypeVar("T")


def in_transaction() -> bool:
    """A transaction's statement runs: its batch stops at the first error whatever `ordered`
    says (mongod: "If we are in a transaction, we must fail the whole batch")."""
    return CURRENT_TRANSACTION.get() is not None


def _each_statement(
    statements: Sequence[S],
    ordered: bool,
    run: Callable[[int, S], None],
    errors: list[dict[str, Any]],
    start: int = 0,
    ends: Callable[[int], bool] = lambda i: False,
) -> int:
    """Run statements in order from `start` (inside one writer job), until `ends(i)` says the
    slice is over before statement i; a statement's failure is added to `errors` as a
    writeErrors entry, and stops the rest when the command is ordered. Returns the index of the
    statement to run next (len(statements): none)."""
    i = start
    while i < len(statements) and not ends(i):
        try:
            run(i, statements[i])
        except (StorageError, CommandError) as exc:
            errors.append(write_error(i, exc))
            if ordered:
                return len(statements)
        i += 1
    return i


#: How far a command in pieces got: its reply and writeErrors so far, the next statement, and
#: (a retryable write) the statements it executed (Retry.pending).
_Progress = tuple[dict[str, Any], list[dict[str, Any]], int, dict[int, "retryable_writes.Executed"]]


def _finished(reply: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """A write command's reply: its counts, then writeErrors (if any), then ok."""
    if errors:
        reply["writeErrors"] = errors
    reply["ok"] = 1.0
    return reply


@dataclass(frozen=True)
class StatementsParams:
    """The fields update and delete share besides their statements (MongoDB's
    WriteCommandRequestBase, with `let`); each adds its statements' field."""

    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    ordered: bool = arg("ordered", Kind.BOOL, True)
    let: dict[str, Any] | None = arg("let", Kind.DOC)
    bypass_document_validation: bool = arg("bypassDocumentValidation", Kind.BOOL, False)


async def _run_statements(
    ctx: CommandContext,
    batch: _Batch[F],
    ordered: bool,
    counts: Callable[[], dict[str, Any]],
    run: Callable[[dict[str, Any], int, F, int], None],
    retry: Retry | None = None,
    recorded: Callable[[F], bool] = lambda s: True,
) -> dict[str, Any]:
    """Run every statement in one writer job (one commit shared with other clients' writes; a
    bounded write when the batch is small, see Gateway.write_small), or sliced
    (Gateway.write_sliced): many statements each on one document in pieces of about a slice's
    time, each piece a writer job; a statement that may change many documents with each of its
    writes a slice. Reply: the counts, which
    `run(reply, i, statement, now_ms)` adds to (rebuilt from `counts()` if the job is run again),
    then writeErrors for the statements that failed, then ok. A retryable write (`retry`) skips
    the statements it executed before and records those it executes (`recorded` says which
    may be: one on many documents may not)."""
    each = run if retry is None else retry.wrap(run, recorded)
    ordered = ordered or in_transaction()
    statements = batch.statements

    def job(now_ms: int) -> dict[str, Any]:
        if retry is not None:
            retry.start()
        reply, errors = counts(), list[dict[str, Any]]()
        _each_statement(statements, ordered, lambda i, s: each(reply, i, s, now_ms), errors)
        if retry is not None:
            retry.record(now_ms)
        return _finished(reply, errors)

    def piece(done: _Progress, now_ms: int) -> _Progress:
        """Statements from the next one for about a slice's time, as one writer job, with a
        retryable write's record of them. What `done` holds is copied first: the writer may
        run the job again."""
        before, errors_before, start, pending = done
        reply = {k: list(v) if type(v) is list else v for k, v in before.items()}
        errors = list(errors_before)
        if retry is not None:
            retry.pending = dict(pending)
        ends = writes.slice_end(statements, start)
        run_one: Callable[[int, F], None] = lambda i, s: each(reply, i, s, now_ms)  # noqa: E731
        i = _each_statement(statements, ordered, run_one, errors, start, ends)
        if retry is not None:
            retry.record(now_ms)
        return reply, errors, i, {} if retry is None else dict(retry.pending)

    def in_pieces(now_ms: int) -> dict[str, Any]:
        # Many statements, each on one document: a slice takes as many as fit in its time.
        if retry is not None:
            retry.start()
        slicer = SLICER.get()
        done: _Progress = (counts(), [], 0, {})
        while done[2] < len(statements):
            step = functools.partial(piece, done, now_ms)
            done = step() if slicer is None else slicer(step)
        return _finished(done[0], done[1])

    gateway = ctx.gateway
    if batch.small:
        return await gateway.write_small(job)
    if not batch.sliced and len(statements) > SMALL_STATEMENTS:
        return await gateway.write_sliced(in_pieces)
    # A statement on many documents commits in slices, letting other writes go in between;
    # unless a retryable write records a statement, whose record must commit with its write
    # (the record's lastWriteOpTime is how a restart finds what was executed).
    sliced = batch.sliced and (retry is None or not any(map(recorded, batch.statements)))
    return await (gateway.write_sliced(job) if sliced else gateway.write_stamped(job))


#: Statements few enough, each found by `_id`, that a command is a small bounded write.
SMALL_STATEMENTS = 16


def by_id(spec: QuerySpec) -> bool:
    """The parsed filter pins one document by an `_id` equality (at most one match)."""
    return writes.id_point(spec.query) is not MISSING


class _Filtered(Protocol):
    """What of an update or delete statement its filter is parsed from."""

    @property
    def q(self) -> dict[str, Any]: ...
    @property
    def hint(self) -> Any: ...
    @property
    def collation(self) -> dict[str, Any] | None: ...


F = TypeVar("F", bound=_Filtered)

#: Statements' filters parsed before their job: by index, the collation each was parsed under
#: and its QuerySpec, or the error its parse raised (the job raises it in the statement's turn).
Prepared = dict[int, tuple[Collation | None, QuerySpec | StorageError]]


def _prepare(
    ctx: CommandContext,
    collection: str,
    statements: Sequence[_Filtered],
    variables: dict[str, Any],
) -> Prepared:
    """Parse the statements' filters now, on the loop, under the collation each resolves to now:
    for a command that may be a small write (few statements, each on one document), whose
    filters tell whether each pins one `_id`. The job takes each as parsed (_statement_spec)."""
    coll = ctx.collection(collection)
    prepared: Prepared = {}
    for i, s in enumerate(statements):
        try:
            collation = resolve(s.collation, coll)
        except StorageError:
            continue  # the job raises it, in the statement's turn
        try:
            spec = QuerySpec.parse(s.q, hint=s.hint, variables=variables, collation=collation)
        except StorageError as exc:
            prepared[i] = (collation, exc)
        else:
            prepared[i] = (collation, spec)
    return prepared


def _all_by_id(prepared: Prepared, count: int) -> bool:
    """Every one of the `count` statements has a filter that parsed and pins one `_id`."""
    return len(prepared) == count and all(
        isinstance(spec, QuerySpec) and by_id(spec) for _, spec in prepared.values()
    )


def _statement_spec(
    prepared: Prepared,
    i: int,
    s: _Filtered,
    variables: dict[str, Any],
    coll: CollectionInfo | None,
) -> QuerySpec:
    """Statement `i`'s filter, parsed once: as _prepare parsed it, unless it did not or the
    collation it resolves to has changed since (the collection was recreated in between), then
    here. Raises StorageError for a malformed filter or collation."""
    collation = resolve(s.collation, coll)
    found = prepared.get(i)
    if found is not None and (found[0] is collation or found[0] == collation):
        if isinstance(found[1], StorageError):
            raise found[1]
        return found[1]
    return QuerySpec.parse(s.q, hint=s.hint, variables=variables, collation=collation)


@dataclass(frozen=True)
class _Batch(Generic[F]):
    """An update or delete command's statements, with the `let` variables their filters read and
    the filters parsed ahead (_prepare) where the command may be a small write."""

    statements: Sequence[F]
    variables: dict[str, Any]
    prepared: Prepared
    #: Few statements, each on one document found by `_id`: a small bounded write.
    small: bool
    #: A statement may change many documents: the command commits in slices.
    sliced: bool

    def spec(self, i: int, s: F, coll: CollectionInfo | None) -> QuerySpec:
        """Statement `i`'s filter (_statement_spec)."""
        return _statement_spec(self.prepared, i, s, self.variables, coll)


def _batch(
    ctx: CommandContext, p: StatementsParams, statements: Sequence[F], each_on_one: bool
) -> _Batch[F]:
    """The command's batch: `each_on_one` says every statement changes one document at most."""
    variables = command_variables(p.let, ctx.now())
    may_be_small = len(statements) <= SMALL_STATEMENTS and each_on_one
    prepared = _prepare(ctx, p.collection, statements, variables) if may_be_small else {}
    small = may_be_small and _all_by_id(prepared, len(statements))
    return _Batch(statements, variables, prepared, small, not each_on_one)


def _parse_change(
    u: Any,
    array_filters: list[Any] | None,
    multi: bool,
    variables: dict[str, Any],
    constants: dict[str, Any] | None = None,
) -> Update:
    """An update statement's `u`: an update or replacement document, or a pipeline (run with the
    command's `variables` and the statement's `constants`). Raises StorageError (reported per
    statement) for a malformed one."""
    if isinstance(u, list):
        return parse_pipeline_update(u, variables, constants, array_filters)
    if constants is not None:
        raise QueryError(
            "Location51198", "Constant values may only be specified for pipeline updates"
        )
    change = parse_update(u, array_filters)
    if change.replacement and multi:
        raise CommandError(
            ErrorCode.FailedToParse, "multi update is not supported for replacement-style update"
        )
    return change


def _check_update_argument(u: Any) -> None:
    """An update statement's `u` as the command parser checks it (a command error, not a
    statement's): a document, or an array of stage documents."""
    if not isinstance(u, dict | list):
        raise CommandError(
            ErrorCode.FailedToParse, "Update argument must be either an object or an array"
        )
    if isinstance(u, list) and not all(isinstance(stage, dict) for stage in u):
        raise CommandError(
            ErrorCode.TypeMismatch, "Each element of the 'pipeline' array must be an object"
        )


# -- insert ----------------------------------------------------------------------------------------

#: An insert this small is a bounded write (see Gateway.write_small).
SMALL_INSERT_DOCS = 16
SMALL_BYTES = 256 * 1024


@dataclass(frozen=True)
class InsertParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    documents: tuple[bytes, ...] = arg("documents", Kind.RAW_DOCS, required=True, check=WRITE_BATCH)
    ordered: bool = arg("ordered", Kind.BOOL, True)
    bypass_document_validation: bool = arg("bypassDocumentValidation", Kind.BOOL, False)


@REGISTRY.command("insert", params=InsertParams, writes=True)
async def insert(ctx: CommandContext, p: InsertParams) -> dict[str, Any]:
    """Insert documents; per-document failures are reported in writeErrors."""
    if _retryable(ctx):
        return await _run_retryable(ctx, lambda retry: _insert(ctx, p, retry))
    return await _insert(ctx, p, None)


async def _insert(ctx: CommandContext, p: InsertParams, retry: Retry | None) -> dict[str, Any]:
    if retry is not None:
        return await _insert_retryable(ctx, p, retry)
    gateway = ctx.gateway
    small = _small(p)
    if small:
        write, run = gateway.write_small, gateway.engine.insert
    elif writes.one_insert_slice(p.documents):
        # One slice's worth: one writer job, without the slicer thread's two hand-offs.
        write, run = gateway.write_stamped, gateway.engine.insert
    else:
        # A large insert commits in slices (writes.insert), letting other writes go in between.
        write, run = gateway.write_sliced, functools.partial(writes.insert, gateway.engine)
    result = await write(
        run,
        ctx.db,
        p.collection,
        p.documents,
        p.ordered or in_transaction(),
        bypass=p.bypass_document_validation,
    )
    if len(result.errors) > PASS_ITEMS:
        # Many failures (50,000 duplicates): their entries built and encoded a pass at a time,
        # for a LargeReply (server/large_messages.py).
        errors = await encoded(result.errors, _write_error)
        return insert_reply(ctx, result, LargeReply(), errors)
    return insert_reply(ctx, result)


def insert_reply(
    ctx: CommandContext,
    result: InsertResult,
    reply: dict[str, Any] | None = None,
    errors: EncodedDocs | None = None,
) -> dict[str, Any]:
    """An insert's reply (its documents counted): `n`, then writeErrors for those that failed.
    The general path's and the express path's. `reply`: the (empty) reply to fill, and
    `errors`: the writeErrors entries already encoded, for a large one."""
    ctx.stats.count_documents("insert", result.inserted)
    if reply is None:
        reply = {}
    reply["n"] = result.inserted
    if result.errors:
        reply["writeErrors"] = (
            [write_error(i, exc) for i, exc in result.errors] if errors is None else errors
        )
    reply["ok"] = 1.0
    return reply


def _write_error(failure: tuple[int, BaseException]) -> dict[str, Any]:
    return write_error(*failure)


def _small(p: InsertParams) -> bool:
    """A small bounded insert (see Gateway.write_small); a larger one commits in slices."""
    return len(p.documents) <= SMALL_INSERT_DOCS and sum(map(len, p.documents)) <= SMALL_BYTES


async def _insert_retryable(ctx: CommandContext, p: InsertParams, retry: Retry) -> dict[str, Any]:
    """A retryable insert: each document is a statement (its stmtId: its index), recorded when
    inserted; the documents a first try inserted are not inserted again, the others are, in
    runs of consecutive statements."""
    engine = ctx.gateway.engine

    def piece(
        start: int, stop: int, now_ms: int, pending: dict[int, retryable_writes.Executed]
    ) -> list[tuple[int, StorageError]]:
        """Insert documents [start, stop), each recorded as executed, and the session's record:
        one storage write (one slice). Returns the failures. `pending`: the statements executed
        before it, restored first, since the writer may run the slice again (and a second run
        may insert fewer: the disk refused it)."""
        retry.pending = dict(pending)
        retry.begin_statement(start)  # the documents are statements start, start + 1, ...
        result = engine.insert(
            ctx.db,
            p.collection,
            p.documents[start:stop],
            p.ordered,
            now_ms=now_ms,
            bypass=p.bypass_document_validation,
        )
        failed = [(start + i, exc) for i, exc in result.errors]
        reached = failed[0][0] if failed and p.ordered else stop
        gone = {i for i, _ in failed}
        for i in range(start, reached):
            if i not in gone:
                retry.done(i, retryable_writes.Executed(n=1))
        retry.record(now_ms)
        return failed

    def job(now_ms: int) -> tuple[int, list[dict[str, Any]]]:
        retry.start()
        # Sliced (see _insert): each slice commits its documents with the record naming them.
        slicer = SLICER.get()
        errors: list[dict[str, Any]] = []
        reached = len(p.documents)  # an ordered insert stops at its first failure
        for run_start, run_stop in retry.unexecuted(len(p.documents)):
            for start, stop in writes.insert_slices(p.documents, run_start, run_stop):
                step = functools.partial(piece, start, stop, now_ms, dict(retry.pending))
                failed = step() if slicer is None else slicer(step)
                errors += [write_error(i, exc) for i, exc in failed]
                if failed and p.ordered:
                    reached = failed[0][0]
                    break
            if reached < len(p.documents):
                break
        replayed = sum(1 for i in range(reached) if retry.executed(i) is not None)
        return replayed + len(retry.pending), errors

    gateway = ctx.gateway
    n, errors = await (gateway.write_stamped(job) if _small(p) else gateway.write_sliced(job))
    ctx.stats.count_documents("insert", n)
    reply: dict[str, Any] = LargeReply() if len(errors) > PASS_ITEMS else {}
    reply["n"] = n
    if errors:
        reply["writeErrors"] = errors
    reply["ok"] = 1.0
    return reply


# -- update ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdateStatement:
    q: dict[str, Any] = arg("q", Kind.DOC, required=True)
    u: Any = arg("u", Kind.ANY, required=True)
    upsert: bool = arg("upsert", Kind.BOOL, False)
    multi: bool = arg("multi", Kind.BOOL, False)
    array_filters: list[Any] | None = arg("arrayFilters", Kind.ARRAY)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    upsert_supplied: bool = arg("upsertSupplied", Kind.BOOL, False)
    #: Constants a pipeline update's stages read as `$$name` (MongoDB's per-statement `c`).
    c: dict[str, Any] | None = arg("c", Kind.DOC)


@dataclass(frozen=True)
class UpdateParams(StatementsParams):
    updates: tuple[UpdateStatement, ...] = arg(
        "updates", Kind.DOCS, required=True, check=WRITE_BATCH, of=UpdateStatement
    )


@REGISTRY.command("update", params=UpdateParams, writes=True)
async def update(ctx: CommandContext, p: UpdateParams) -> dict[str, Any]:
    """Run update statements in order; each statement's failure is a writeErrors entry."""
    if _retryable(ctx):
        return await _run_retryable(ctx, lambda retry: _update(ctx, p, retry))
    return await _update(ctx, p, None)


async def _update(ctx: CommandContext, p: UpdateParams, retry: Retry | None) -> dict[str, Any]:
    validate_collection_name(ctx.db, p.collection)
    for s in p.updates:
        _check_update_argument(s.u)
    batch = _batch(ctx, p, p.updates, not any(s.multi for s in p.updates))
    variables = batch.variables
    engine = ctx.gateway.engine

    def run(reply: dict[str, Any], i: int, s: UpdateStatement, now_ms: int) -> None:
        coll = ctx.collection(p.collection)
        ts = timeseries.options_of(coll)
        if ts is not None:  # MongoDB 7.0 updates a time series collection's metaField only
            timeseries.check_update_options(ts, s.multi, s.upsert)
        spec = batch.spec(i, s, coll)
        if ts is not None:
            timeseries.check_update(ts, spec.query, s.u)
        result = writes.update(
            engine,
            ctx.db,
            p.collection,
            spec,
            _parse_change(s.u, s.array_filters, s.multi, variables, s.c),
            s.multi,
            s.upsert,
            now_ms,
            p.bypass_document_validation,
        )
        if result.error is not None:
            # As MongoDB: a failed statement adds only its writeErrors entry to the reply,
            # though the documents it changed before failing stay changed.
            raise result.error
        reply["n"] += result.matched
        reply["nModified"] += result.modified
        if result.upserted_id is not MISSING:
            reply["n"] += 1
            reply.setdefault("upserted", []).append({"index": i, "_id": result.upserted_id})

    reply = await _run_statements(
        ctx, batch, p.ordered, lambda: {"n": 0, "nModified": 0}, run, retry, lambda s: not s.multi
    )
    ctx.stats.count_documents("update", reply["nModified"] + len(reply.get("upserted", ())))
    return reply


# -- delete ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeleteStatement:
    q: dict[str, Any] = arg("q", Kind.DOC, required=True)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)
    # Checked in this order: the limit (1: the first match, 0: every match), then the collation.
    limit: int = arg(
        "limit",
        Kind.INT,
        required=True,
        check=OneOf((0, 1), "The limit field in delete objects must be 0 or 1. Got {value}"),
    )
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)


@dataclass(frozen=True)
class DeleteParams(StatementsParams):
    deletes: tuple[DeleteStatement, ...] = arg(
        "deletes", Kind.DOCS, required=True, check=WRITE_BATCH, of=DeleteStatement
    )


@REGISTRY.command("delete", params=DeleteParams, writes=True)
async def delete(ctx: CommandContext, p: DeleteParams) -> dict[str, Any]:
    """Run delete statements in order (`limit` 1: the first match, 0: every match)."""
    if _retryable(ctx):
        return await _run_retryable(ctx, lambda retry: _delete(ctx, p, retry))
    return await _delete(ctx, p, None)


async def _delete(ctx: CommandContext, p: DeleteParams, retry: Retry | None) -> dict[str, Any]:
    validate_collection_name(ctx.db, p.collection)
    batch = _batch(ctx, p, p.deletes, all(s.limit == 1 for s in p.deletes))
    engine = ctx.gateway.engine

    def run(reply: dict[str, Any], i: int, s: DeleteStatement, now_ms: int) -> None:
        spec = batch.spec(i, s, ctx.collection(p.collection))
        reply["n"] += writes.delete(
            engine, ctx.db, p.collection, spec, s.limit == 1, now_ms
        ).deleted

    reply = await _run_statements(
        ctx, batch, p.ordered, lambda: {"n": 0}, run, retry, lambda s: s.limit == 1
    )
    ctx.stats.count_documents("delete", reply["n"])
    return reply


# -- findAndModify ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FindAndModifyParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    query: dict[str, Any] | None = arg("query", Kind.DOC)
    sort: dict[str, Any] | None = arg("sort", Kind.DOC)
    remove: bool = arg("remove", Kind.BOOL, False)
    update: Any = arg("update", Kind.ANY)
    new: bool = arg("new", Kind.BOOL, False)
    fields: dict[str, Any] | None = arg("fields", Kind.DOC)
    upsert: bool = arg("upsert", Kind.BOOL, False)
    array_filters: list[Any] | None = arg("arrayFilters", Kind.ARRAY)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    let: dict[str, Any] | None = arg("let", Kind.DOC)
    bypass_document_validation: bool = arg("bypassDocumentValidation", Kind.BOOL, False)


def _check_find_and_modify(p: FindAndModifyParams) -> None:
    if p.remove and p.update is not None:
        raise CommandError(ErrorCode.FailedToParse, "Cannot specify both an update and remove=true")
    if not p.remove and p.update is None:
        raise CommandError(
            ErrorCode.FailedToParse, "Either an update or remove=true must be specified"
        )
    if p.remove and p.upsert:
        raise CommandError(
            ErrorCode.FailedToParse, "Cannot specify both upsert=true and remove=true"
        )
    if p.remove and p.new:
        raise CommandError(
            ErrorCode.FailedToParse,
            "Cannot specify both new=true and remove=true; 'remove' always returns the deleted "
            "document",
        )
    if p.update is not None:
        _check_update_argument(p.update)


@REGISTRY.command("findAndModify", "findandmodify", params=FindAndModifyParams, writes=True)
async def find_and_modify(ctx: CommandContext, p: FindAndModifyParams) -> dict[str, Any]:
    """Update or remove one document and return it (before, or with `new` after, the change)."""
    if _retryable(ctx):
        return await _run_retryable(ctx, lambda retry: _find_and_modify(ctx, p, retry))
    return await _find_and_modify(ctx, p, None)


async def _find_and_modify(
    ctx: CommandContext, p: FindAndModifyParams, retry: Retry | None
) -> dict[str, Any]:
    validate_collection_name(ctx.db, p.collection)
    _check_find_and_modify(p)
    if not p.remove and timeseries.is_timeseries(ctx.collection(p.collection)):
        raise CommandError(
            ErrorCode.InvalidOptions,
            "Cannot perform a non-multi update on a time-series collection",
        )
    variables = command_variables(p.let, ctx.now())
    collation = resolve(p.collation, ctx.collection(p.collection))
    spec = QuerySpec.parse(
        p.query, sort=p.sort, hint=p.hint, variables=variables, collation=collation
    )
    change = None if p.remove else _parse_change(p.update, p.array_filters, False, variables)
    fields = parse_projection(p.fields, filter=spec.query) if p.fields else None
    gateway = ctx.gateway
    modify = functools.partial(
        writes.find_and_modify,
        gateway.engine,
        ctx.db,
        p.collection,
        spec,
        remove=p.remove,
        change=change,
        upsert=p.upsert,
        return_new=p.new,
        fields=fields,
        bypass=p.bypass_document_validation,
    )
    if retry is not None:
        return await gateway.write_stamped(_retryable_modify, retry, modify, p.new, p.remove)
    result = await (gateway.write_small if by_id(spec) else gateway.write_stamped)(modify)
    return find_and_modify_reply(result, p.remove)


def find_and_modify_reply(result: writes.FindAndModifyResult, remove: bool) -> dict[str, Any]:
    """A findAndModify's reply (the general path's and the express path's)."""
    last: dict[str, Any] = {"n": result.matched}
    if not remove:
        last["updatedExisting"] = result.updated_existing
        if result.upserted_id is not MISSING:
            last["upserted"] = result.upserted_id
    return {"lastErrorObject": last, "value": result.value, "ok": 1.0}


def _retryable_modify(
    retry: Retry,
    modify: Callable[..., writes.FindAndModifyResult],
    new: bool,
    remove: bool,
    now_ms: int,
) -> dict[str, Any]:
    """A retryable findAndModify's job: its first reply if it ran before (statement 0), else
    run, recorded with the document it returned (mongod's retry image) when it wrote."""
    retry.start()
    done = retry.executed(0)
    if done is not None and done.reply is not None:
        return {**done.reply, "ok": 1.0}
    retry.begin_statement(0)
    result = modify(now_ms=now_ms)
    reply = find_and_modify_reply(result, remove)
    if result.matched:
        # A copy: the dispatcher may add to the reply it sends (a fail point's write concern
        # error), never to the one a retry gets.
        retry.done(0, retryable_writes.Executed(reply=dict(reply)))
        retry.record(now_ms, ("postImage" if new else "preImage", reply["value"]))
    return reply


def _retryable(ctx: CommandContext) -> bool:
    """Whether the command running may be a retryable write: replica-set mode, a session, and a
    txnNumber (cheap: every write asks)."""
    op = ctx.client.op
    return (
        ctx.client.session is not None
        and op is not None
        and "txnNumber" in op.body
        and ctx.replica_set is not None
    )


async def _run_retryable(ctx: CommandContext, write: Callable[[Retry | None], Awaitable[T]]) -> T:
    """Run `write` with the retry bookkeeping of the command (None: not a retryable write); the
    statements' oplog entries carry the session (WRITE_SESSION). The dispatcher has checked the
    session out to this command (its `lock`), as mongod does."""
    session = ctx.client.session
    op = ctx.client.op
    assert session is not None and op is not None
    engine = ctx.gateway.engine
    retry = await retryable_writes.begin(
        session, op.body, engine, ctx.gateway.read, ctx.sessions.abort_transaction
    )
    if retry is None:
        return await write(None)
    token = WRITE_SESSION.set(retry.write_session)
    try:
        result = await write(retry)
    finally:
        WRITE_SESSION.reset(token)
    retry.commit()
    return result
