"""Writing a pipeline's results, as $out and $merge do (their stages are parsed in
storage/aggregate/output.py): the checks on the target MongoDB makes before any work, $out's
replacement of a collection's contents in one write (readers see the old contents or the new,
never a mix; the target's options and indexes stay), and $merge's handling of each result by the
`on` fields, in batches of short writes. A target's documents expired at the write's time count as
absent, as they are for every other write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import bson
from bson import ObjectId

from ebbdb.storage.aggregate import EngineSource
from ebbdb.storage.aggregate.fields import get_path
from ebbdb.storage.aggregate.output import Merge, Out
from ebbdb.storage.aggregate.stage import Context, Doc, error
from ebbdb.storage.catalog import timeseries
from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name
from ebbdb.storage.core.collation import Collation
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import DuplicateKey, InvalidNamespace, QueryError
from ebbdb.storage.engine.records import CollectionWrites
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution import views
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.entries import index_bodies
from ebbdb.storage.query.compare import UNDEFINED, compare
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import render_value as render

#: Databases MongoDB keeps for itself: neither stage writes there.
INTERNAL_DATABASES = frozenset({"admin", "config", "local"})
#: $merge results written per write transaction (MongoDB's $merge is not atomic either).
MERGE_BATCH = 500


# -- the target ------------------------------------------------------------------------------------


def check_target(
    engine: Engine, stage: Out | Merge, db: str, collation: Collation | None
) -> str | None:
    """MongoDB's refusals of a target before the pipeline runs; for $merge, returns the name of
    the unique index that makes its `on` fields unique (MongoDB checks one exists: 51183)."""
    coll = stage.coll
    ns = f"{db}.{coll}"
    out = isinstance(stage, Out)
    try:
        validate_collection_name(db, coll)
    except InvalidNamespace:
        shown = (
            f"Invalid $out target namespace, {ns}"
            if out
            else f"Invalid $merge target namespace: '{ns}'"
        )
        raise QueryError("InvalidNamespace", shown) from None
    if coll.startswith("system."):
        if out:
            raise error(17385, f"Can't $out to special collection: {coll}")
        raise error(31319, f"Cannot $merge to special collection: {coll}")
    if db in INTERNAL_DATABASES:
        if out:
            raise error(31321, f"Can't $out to internal database: {db}")
        raise error(31320, f"Cannot $merge to internal database: {db}")
    info = engine.collection(db, coll)
    # A time series collection is a view over its buckets in MongoDB: neither stage writes there.
    if timeseries.is_timeseries(info) or (info is None and views.lookup(engine, db, coll)):
        raise QueryError("CommandNotSupportedOnView", f"Namespace {ns} is a view, not a collection")
    if out:
        if info is not None and info.options.get("capped"):
            raise error(17152, f"namespace '{ns}' is capped so it can't be used for $out")
        return None
    assert isinstance(stage, Merge)
    if stage.on is None:
        return "_id_"
    index = _unique_index(info, stage.on, collation)
    if index is None:
        raise error(51183, "Cannot find index to verify that join fields will be unique")
    return index


def _unique_index(
    info: CollectionInfo | None, on: tuple[str, ...], collation: Collation | None
) -> str | None:
    """An index that makes `on` unique as MongoDB requires: unique (or `_id_`), not partial, on
    exactly those fields with plain directions, under the pipeline's collation. With no target
    only `_id` qualifies (the target will get its `_id` index)."""
    if info is None:
        return "_id_" if on == ("_id",) else None
    for ix in info.indexes:
        if not ix.unique or ix.partial_filter is not None:
            continue
        if any(isinstance(d, str) for _, d in ix.key) or set(ix.fields) != set(on):
            continue
        if len(ix.fields) == len(on) and ix.collation == collation:
            return ix.name
    return None


# -- $out --------------------------------------------------------------------------------------------


def replace_collection(
    engine: Engine,
    db: str,
    coll: str,
    documents: Sequence[bytes],
    bypass: bool = False,
    *,
    now_ms: int,
) -> None:
    """$out: `db.coll` holds `documents` and nothing else, in one write (MongoDB fills a new
    collection and renames it over the target; here the target is emptied and refilled in one
    transaction, keeping its ids, so a reader sees the old contents or the new, never a mix or
    none). Its options and indexes stay. A document that fails (DuplicateKey on a unique index,
    DocumentValidationFailure unless `bypass`) raises, and the target is left as it was."""

    def run() -> None:
        if engine.collection(db, coll) is not None:
            engine.empty_collection(db, coll)
        elif not documents:
            engine.create_collection(db, coll)
        if documents:
            result = engine.insert(db, coll, documents, True, now_ms, bypass)
            if result.errors:
                raise result.errors[0][1]

    engine.atomic(run)


# -- $merge ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeTarget:
    """What a $merge writes with: its stage, the unique index its `on` fields are found by, the
    command's variables (its `let`, NOW), the pipeline's collation, and bypassDocumentValidation."""

    stage: Merge
    index: str
    variables: Mapping[str, Any]
    collation: Collation | None = None
    bypass: bool = False


def merge_batch(
    engine: Engine, db: str, coll: str, raws: Sequence[bytes], target: MergeTarget, *, now_ms: int
) -> None:
    """Merge one batch of results into `db.coll`, in one write; raises MongoDB's error for the
    first result that cannot be merged (what the batch did before it is undone with it)."""

    def run(view: CollectionWrites) -> None:
        for raw in raws:
            _merge_one(engine, view, bson.decode(raw, CODEC), target)

    engine.modify(db, coll, run, now_ms, target.bypass)


def _on_values(doc: Doc, on: tuple[str, ...]) -> None:
    for path in on:
        value = get_path(doc, tuple(path.split(".")))
        if isinstance(value, list):
            raise error(51185, f"$merge write error: 'on' field '{path}' is an array")
        if value is MISSING or value is None or value is UNDEFINED:
            raise error(
                51132,
                f"$merge write error: 'on' field '{path}' cannot be missing, null, undefined or"
                " an array",
            )


def _merge_one(engine: Engine, view: CollectionWrites, doc: Doc, target: MergeTarget) -> None:
    stage = target.stage
    on = stage.on_fields
    if "_id" in on and "_id" not in doc:
        doc = {"_id": ObjectId(), **doc}
    _on_values(doc, on)
    try:
        if stage.when_matched == "fail":
            # MongoDB inserts: a document already there is a duplicate key.
            view.insert(_encode(doc))
            return
        found = _matching(engine, view, target.index, doc)
        if found is None:
            if stage.when_not_matched == "insert":
                view.insert(_encode(doc))
            elif stage.when_not_matched == "fail":
                raise QueryError(
                    "MergeStageNoMatchingDocument",
                    "$merge could not find a matching document in the target collection for at"
                    " least one document in the source collection",
                )
            return
        rid, value, old = found
        if stage.when_matched == "keepExisting":
            return
        new = _updated(engine, view.db, view.now_ms, old, doc, target)
        view.replace(rid, value, _encode(new), new, old)
    except DuplicateKey as exc:
        raise _in_context(exc, stage) from None


def _matching(
    engine: Engine, view: CollectionWrites, index_name: str, doc: Doc
) -> tuple[int, bytes, Doc] | None:
    """The target's document with the result's `on` values (found in their unique index), unless
    there is none or it is expired at the write's time (then it is as good as absent)."""
    info = view.info
    if info is None:
        return None
    ix = info.index_named(index_name)
    if ix is None:  # dropped since the pipeline started
        raise error(51183, "Cannot find index to verify that join fields will be unique")
    bodies, _multikey = index_bodies(ix, doc)
    if len(bodies) != 1:
        return None
    with engine.read() as reader:  # on the writer thread: the write's own transaction
        entry = reader.unique_entry(ix, bodies[0][0])
    if entry is None:
        return None
    rid = entry[1]
    value = view.get(rid)
    if value is None or ttl.expired_value(value, ttl.rules_for(info), view.now_ms):
        return None
    return rid, value, bson.decode(ttl.body(value), CODEC)


def _updated(engine: Engine, db: str, now_ms: int, old: Doc, doc: Doc, target: MergeTarget) -> Doc:
    """The matched document after whenMatched replace, merge or a pipeline; its `_id` may not
    change (ImmutableField), and one the result leaves out is kept."""
    stage = target.stage
    if stage.when_matched == "replace":
        new = doc
    elif stage.when_matched == "merge":
        new = {**old, **doc}
    else:
        assert stage.pipeline is not None
        variables = dict(target.variables)
        for name, expr in stage.let:
            value = expr(doc, target.variables)
            variables[name] = None if value is MISSING else value
        ctx = Context(EngineSource(engine, db, now_ms), variables, stage.coll, target.collation)
        docs = iter([old])
        for s in stage.pipeline.stages:
            docs = s.run(docs, ctx)
        new = next(docs, old)
    if "_id" not in new:
        return {"_id": old["_id"], **new}
    if compare(new["_id"], old["_id"]) != 0:
        raise QueryError(
            "ImmutableField",
            "$merge failed to update the matching document, did you attempt to modify the _id or"
            " the shard key? :: caused by :: After applying the update, the (immutable) field"
            f" '_id' was found to have been altered to _id: {render(new['_id'])}",
        )
    return new


def _encode(doc: Doc) -> bytes:
    return bson.encode(doc, codec_options=CODEC)


def _in_context(exc: DuplicateKey, stage: Merge) -> DuplicateKey:
    """MongoDB's duplicate key error of a $merge: the storage error with $merge's words in front
    (one for whenMatched: fail meeting a document with the same `on` values)."""
    on_fields = set(exc.key_pattern) == set(stage.on_fields)
    if stage.when_matched == "fail" and on_fields:
        context = (
            "$merge with whenMatched: fail found an existing document with the same values for"
            " the 'on' fields"
        )
    else:
        context = "$merge failed due to a DuplicateKey error"
    wrapped = DuplicateKey(exc.ns, exc.index_name, exc.key_pattern, exc.key_value)
    wrapped.message = f"{context} :: caused by :: {exc.message}"
    return wrapped
