"""Catalog and index DDL inside a write transaction: create and drop collections and databases,
build, drop and change indexes (a TTL index's facts are added to every record it now covers)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import bson

from ebbdb.storage.catalog.info import (
    EXPIRE_AFTER,
    CollectionInfo,
    IndexInfo,
    validate_collection_name,
    validate_db_name,
)
from ebbdb.storage.core import interrupt
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import (
    NamespaceExists,
    NamespaceNotFound,
    QueryError,
    StorageError,
)
from ebbdb.storage.engine import layout
from ebbdb.storage.engine.environment import EMPTIED, Environment, Txn
from ebbdb.storage.engine.records import IndexFlags, Records, delete_prefix, flagged, new_uuid
from ebbdb.storage.engine.writer import CatalogChanges, Writer
from ebbdb.storage.expiry import expire_after as expire_after_option
from ebbdb.storage.expiry import ttl
from ebbdb.storage.expiry.expire_after import Setting
from ebbdb.storage.indexes.entries import index_key_matches
from ebbdb.storage.indexes.specs import MAX_INDEXES, IndexSpec, conflict

#: A TTL index on `_ts` is the collection's one default time to live (Cosmos DefaultTimeToLive).
_ONE_COSMOS_DEFAULT = (
    "a collection can have only one TTL index on _ts: it sets the collection's default time to live"
)


@dataclass(frozen=True)
class IndexChange:
    """What collMod changed on an index (None: not changed / not reported)."""

    expire_old: int | None = None
    expire_new: int | None = None
    hidden_old: bool | None = None
    hidden_new: bool | None = None


class BuildSuperseded(StorageError):
    """A bulk index build cannot end as it began: its collection was dropped, renamed or
    emptied, or another build made one of its indexes meanwhile. The createIndexes runs again
    from the start (as if it came after that change), as the one-transaction build would."""

    code_name = "IndexBuildAborted"


@dataclass(frozen=True)
class CreateIndexesResult:
    before: int
    after: int
    created_collection: bool
    note: str | None


class Ddl:
    """The DDL operations; each is one storage write (see storage/engine/writer.py)."""

    def __init__(self, env: Environment, records: Records, writer: Writer) -> None:
        self._env = env
        self._records = records
        self._writer = writer

    def create_collection(
        self, db: str, name: str, options: dict[str, Any] | None = None, id_index: bool = True
    ) -> CollectionInfo:
        """Create an empty collection (without an `_id` index if not `id_index`: the oplog).
        Raises NamespaceExists or InvalidNamespace."""
        validate_collection_name(db, name)

        def run(txn: Txn, changes: CatalogChanges) -> CollectionInfo:
            if self._writer.lookup((db, name)) is not None:
                raise NamespaceExists(f"Collection {db}.{name} already exists.")
            info = self._records.new_collection(txn, db, name, dict(options or {}), id_index)
            changes[(db, name)] = info
            return info

        return self._writer.write(run)

    def change_collection_options(
        self, db: str, name: str, change: Callable[[CollectionInfo], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """Replace a collection's options with what `change` makes of its catalog entry (None:
        leave them), in one write; returns the new options (or None). `change` raises to refuse
        (QueryError); NamespaceNotFound when there is no such collection."""

        def run(txn: Txn, changes: CatalogChanges) -> dict[str, Any] | None:
            info = self._writer.lookup((db, name))
            if info is None:
                raise NamespaceNotFound(f"ns does not exist: {db}.{name}")
            options = change(info)
            if options is not None:
                before = info.options
                info = replace(info, options=options)
                self._records.put_collection(txn, info)
                changes[(db, name)] = info
                modified = {k: v for k, v in options.items() if before.get(k) != v}
                self._log(txn, db, {"collMod": name, **modified}, info)
            return options

        return self._writer.write(run)

    def drop_collection(self, db: str, name: str) -> bool:
        """Drop a collection, its documents and its indexes. False when it did not exist."""
        self._keep_live_oplog(db, name, "drop")

        def run(txn: Txn, changes: CatalogChanges) -> bool:
            info = self._writer.lookup((db, name))
            if info is None:
                return False
            self._drop(txn, info)
            self._log(txn, db, {"drop": name}, info)
            changes[(db, name)] = None
            return True

        return self._writer.write(run)

    def drop_database(self, db: str) -> list[str]:
        """Drop every collection of `db`; returns their names."""
        validate_db_name(db)
        oplog = self._records.oplog
        if db == "local" and oplog is not None and oplog.enabled:
            raise QueryError(
                "IllegalOperation", "Cannot drop 'local' database while replication is active"
            )

        def run(txn: Txn, changes: CatalogChanges) -> list[str]:
            infos = [c for c in self._writer.catalog().values() if c.db == db]
            for info in infos:
                self._drop(txn, info)
                self._log(txn, db, {"drop": info.name}, info)
                changes[(info.db, info.name)] = None
            if infos:
                self._log(txn, db, {"dropDatabase": 1})
            return [i.name for i in infos]

        return self._writer.write(run)

    def rename_collection(
        self, db: str, name: str, to_db: str, to_name: str, drop_target: bool = False
    ) -> CollectionInfo:
        """Give collection `db.name` the namespace `to_db.to_name`, in its database or another,
        in one write. Documents, index entries, expiry entries and statistics are keyed by the
        collection's and its indexes' numeric ids, so only the catalog entry moves: the indexes,
        TTL indexes included, and the TTL monitor's work go on under the new name. A move to
        another database gets a new UUID, as MongoDB's copy does. With `drop_target` an existing
        target is dropped in the same write. Raises InvalidNamespace, NamespaceNotFound (no
        source; MongoDB's message tells a missing database apart) or NamespaceExists (a target,
        without `drop_target`)."""
        validate_collection_name(db, name)
        validate_collection_name(to_db, to_name)
        self._keep_live_oplog(db, name, "rename")

        def run(txn: Txn, changes: CatalogChanges) -> CollectionInfo:
            catalog = self._writer.catalog()
            info = catalog.get((db, name))
            if info is None:
                if to_db == db and not any(c.db == db for c in catalog.values()):
                    raise NamespaceNotFound(f"Database {db} does not exist or is drop pending")
                raise NamespaceNotFound("source namespace does not exist")
            target = catalog.get((to_db, to_name))
            if target is not None:
                if not drop_target:
                    raise NamespaceExists("target namespace exists")
                self._drop(txn, target)
            txn.delete(info.ns.encode(), db=self._env.catalog)
            uuid = info.uuid if to_db == db else new_uuid()
            moved = replace(info, db=to_db, name=to_name, uuid=uuid)
            self._records.put_collection(txn, moved)
            renamed: dict[str, Any] = {
                "renameCollection": info.ns,
                "to": moved.ns,
                "stayTemp": False,
            }
            if target is not None:
                renamed["dropTarget"] = target.uuid
            self._log(txn, db, renamed, info)
            changes[(db, name)] = None
            changes[(to_db, to_name)] = moved
            return moved

        return self._writer.write(run)

    def set_collection_options(
        self, db: str, name: str, changes: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Set collection options (collMod's validator, validationLevel, ...); a None value
        removes the option. Returns the new options. Raises NamespaceNotFound."""

        def merged(info: CollectionInfo) -> dict[str, Any]:
            options = {**info.options, **changes}
            return {k: v for k, v in options.items() if v is not None}

        return self.change_collection_options(db, name, merged)

    def empty_collection(self, db: str, name: str) -> CollectionInfo:
        """Delete every document of `db.name` with its index and expiry entries, in one write,
        keeping the collection, its ids, options and indexes: a reader that looked it up before
        sees it as it was or as the rest of the write leaves it, never gone ($out's replacement).
        Raises NamespaceNotFound."""

        def run(txn: Txn, changes: CatalogChanges) -> CollectionInfo:
            info = self._writer.lookup((db, name))
            if info is None:
                raise NamespaceNotFound(f"ns does not exist: {db}.{name}")
            self._log_contents_deleted(txn, info)
            self._delete_contents(txn, info)
            indexes = tuple(replace(ix, multikey=False, long_keys=False) for ix in info.indexes)
            info = changes[(db, name)] = info.with_indexes(indexes)
            self._records.put_collection(txn, info)
            return info

        return self._writer.write(run)

    def _log_contents_deleted(self, txn: Txn, info: CollectionInfo) -> None:
        """Record the deletion of every document of a collection that is emptied, not dropped
        ($out's replacement of its target): the oplog goes on matching the data."""
        oplog = self._records.oplog
        if oplog is None or not oplog.enabled:
            return
        for value in self._records.stored(txn, info):
            self._records.log_delete(txn, info, value)

    def _refuse_oplog_write(self, db: str, name: str) -> None:
        oplog = self._records.oplog
        if oplog is not None:
            oplog.refuse_write(db, name)

    def _keep_live_oplog(self, db: str, name: str, verb: str) -> None:
        """A replica set's oplog is not dropped or renamed (IllegalOperation, as mongod)."""
        oplog = self._records.oplog
        if (db, name) == ("local", "oplog.rs") and oplog is not None and oplog.enabled:
            raise QueryError("IllegalOperation", f"can't {verb} live oplog while replicating")

    def _log(
        self,
        txn: Txn,
        db: str,
        o: dict[str, Any],
        info: CollectionInfo | None = None,
        o2: dict[str, Any] | None = None,
    ) -> None:
        """Record a DDL change in the oplog (a replica set's; a standalone has none)."""
        oplog = self._records.oplog
        if oplog is not None and oplog.enabled:
            ui = None if info is None else info.uuid
            oplog.command(txn, db, o, ui, o2, "" if info is None else info.name)

    def _drop(self, txn: Txn, info: CollectionInfo) -> None:
        self._delete_contents(txn, info)
        txn.delete(info.ns.encode(), db=self._env.catalog)

    def _delete_contents(self, txn: Txn, info: CollectionInfo) -> None:
        watched = self._env.watched.get(info.id)
        if watched is not None:  # an index build in flight cannot catch this up
            watched.add(EMPTIED)
        delete_prefix(txn, self._env.records, layout.collection_prefix(info.id))
        for ix in info.indexes:
            delete_prefix(txn, self._env.index, layout.index_prefix(ix.id))
            delete_prefix(txn, self._env.expiry, layout.index_prefix(ix.id))
        txn.delete(layout.stats_key(info.id), db=self._env.stats)

    # -- writes ----------------------------------------------------------------------------------

    def create_indexes(self, db: str, name: str, specs: Sequence[IndexSpec]) -> CreateIndexesResult:
        """create_or_plan_indexes, building in its one transaction."""
        result: CreateIndexesResult = self.create_or_plan_indexes(db, name, specs)
        return result

    def create_or_plan_indexes(
        self,
        db: str,
        name: str,
        specs: Sequence[IndexSpec],
        bulk_unless: Callable[[CollectionInfo | None, tuple[IndexInfo, ...]], bool] | None = None,
    ) -> Any:
        """Create indexes, building each over the existing documents, all in one transaction:
        a unique build that meets a duplicate raises DuplicateKey and leaves nothing behind.
        Raises QueryError for conflicts with existing indexes (85, 86) or too many indexes.
        Returns a CreateIndexesResult; with `bulk_unless` (storage/engine/index_build.py), when
        it says False for the collection (None: created here) and the new indexes, nothing is
        built and (collection, new indexes with their ids, their specs, indexes before) come back
        instead for a bulk build."""
        validate_collection_name(db, name)
        self._refuse_oplog_write(db, name)

        def run(txn: Txn, changes: CatalogChanges) -> Any:
            info = self._writer.lookup((db, name))
            created = info is None
            if info is None:
                info = self._records.new_collection(txn, db, name, {})
            before = len(info.indexes)
            new: list[IndexInfo] = []
            new_specs: list[IndexSpec] = []
            for spec in (s.with_default_collation(info.options.get("collation")) for s in specs):
                if any(conflict(spec, ix) == "same" for ix in (*info.indexes, *new)):
                    continue
                if any(spec.name == ix.name or conflict(spec, ix) == "same" for ix in new):
                    raise QueryError(
                        "IndexKeySpecsConflict", f"Index with name: {spec.name} is given twice"
                    )
                new.append(
                    IndexInfo(self._records.next_id(txn), spec.name, spec.key, dict(spec.options))
                )
                new_specs.append(spec)
            if not new:
                return CreateIndexesResult(before, before, created, "all indexes already exist")
            if sum(map(ttl.is_cosmos_index, (*info.indexes, *new))) > 1:
                raise QueryError("CannotCreateIndex", _ONE_COSMOS_DEFAULT)
            if before + len(new) > MAX_INDEXES:
                raise QueryError(
                    "CannotCreateIndex",
                    f"add index fails, too many indexes for {info.ns} key:{new[-1].spec()['key']}",
                )
            if bulk_unless is not None and not bulk_unless(None if created else info, tuple(new)):
                return info, tuple(new), tuple(new_specs), before
            built = self._build_indexes(txn, info, tuple(new))
            info = info.with_indexes(info.indexes + built)
            self._records.put_collection(txn, info)
            changes[(db, name)] = info
            self.log_built(txn, db, name, info, built)
            return CreateIndexesResult(before, len(info.indexes), created, None)

        return self._writer.write(run)

    @staticmethod
    def check_still_new(info: CollectionInfo, specs: Sequence[IndexSpec]) -> None:
        """A bulk build's last step: the indexes it built must still be new to the collection
        (another build may have finished one meanwhile). Raises QueryError (85, 86), or
        BuildSuperseded for an identical index."""
        for spec in specs:
            if any(conflict(spec, ix) == "same" for ix in info.indexes):
                raise BuildSuperseded(
                    f"Index build aborted: index {spec.name} on {info.ns} was built meanwhile"
                )

    def log_built(
        self, txn: Txn, db: str, name: str, info: CollectionInfo, built: tuple[IndexInfo, ...]
    ) -> None:
        """Record new indexes of a collection in the oplog."""
        for ix in built:
            self._log(txn, db, {"createIndexes": name, **ix.spec()}, info)

    def _build_indexes(
        self, txn: Txn, info: CollectionInfo, indexes: tuple[IndexInfo, ...]
    ) -> tuple[IndexInfo, ...]:
        flags: IndexFlags = {}
        rewrites: list[tuple[bytes, bytes]] = []
        view = ttl_view(info, indexes)
        cur = txn.cursor(db=self._env.records)
        prefix = layout.collection_prefix(info.id)
        tick = interrupt.current.get().tick
        if cur.set_range(prefix):
            for k, v in cur.iternext():
                if not layout.in_collection(k, prefix):
                    break
                tick()
                doc = bson.decode(ttl.body(v), CODEC)
                rid_bytes = layout.record_rid_bytes(k)
                entries, new_flags = self._records.index_entries(txn, info, doc, rid_bytes, indexes)
                for ix_id, names in new_flags.items():
                    flags.setdefault(ix_id, set()).update(names)
                for key in entries:
                    txn.put(key, rid_bytes, db=self._env.index)
                rewritten = self._add_expiry_facts(txn, view, k, v, doc)
                if rewritten is not None:
                    rewrites.append((k, rewritten))
        # Headers are rewritten after the scan, not under the cursor walking the same records.
        for k, value in rewrites:
            txn.put(k, value, db=self._env.records)
        return flagged(indexes, flags)

    def _add_expiry_facts(
        self,
        txn: Txn,
        ttl_view: CollectionInfo | None,
        key: bytes,
        value: bytes,
        doc: dict[str, Any],
    ) -> bytes | None:
        """For TTL indexes new to a collection (`ttl_view`: the collection with only those, from
        ttl_view): add a record's expiry entries (native and Cosmos) and return its record value
        with the earliest dates in the header (native), if that changed; the caller writes it."""
        if ttl_view is None:
            return None
        header, expiry = self.expiry_facts(ttl_view, value, doc, layout.record_rid_bytes(key))
        for ek in expiry:
            txn.put(ek, b"", db=self._env.expiry)
        return None if header is None else header + ttl.body(value)

    def expiry_facts(
        self, ttl_view: CollectionInfo, value: bytes, doc: dict[str, Any], rid_bytes: bytes
    ) -> tuple[bytes | None, list[bytes]]:
        """What new TTL indexes (`ttl_view`) add to a stored record: its new header (None: the
        same) and its expiry entries under them. Notes date-like strings (date_strings)."""
        meta = ttl.read_meta(value)
        dates = dict(meta.dates)
        undated = False
        for ix in ttl_view.indexes:
            if ttl.is_native_ttl(ix):
                d = ttl.earliest_date(ix, doc)
                if d is None:
                    dates.pop(ix.id, None)
                    undated = True
                else:
                    dates[ix.id] = d
        new_meta = ttl.RecordMeta(meta.modified, meta.ttl, tuple(dates.items()))
        header = new_meta.pack()
        if undated:  # only a TTL index that found no date may have met a date-like string
            self._records.date_strings.check(ttl_view, doc, header)
        expiry = ttl.expiry_keys(ttl_view, new_meta, rid_bytes)
        return (header if new_meta != meta else None), expiry

    def drop_indexes(self, db: str, name: str, which: str | dict[str, Any] | list[str]) -> int:
        """Drop indexes by name, key pattern, list of names, or "*" (all but `_id_`); returns how
        many indexes the collection had. Raises NamespaceNotFound, IndexNotFound, InvalidOptions
        (the `_id_` index) or AmbiguousIndexKeyPattern."""
        validate_collection_name(db, name)

        def run(txn: Txn, changes: CatalogChanges) -> int:
            info = self._writer.lookup((db, name))
            if info is None:
                raise NamespaceNotFound(f"ns not found {db}.{name}")
            targets = self._resolve_drop(info, which)
            for ix in targets:
                delete_prefix(txn, self._env.index, layout.index_prefix(ix.id))
                delete_prefix(txn, self._env.expiry, layout.index_prefix(ix.id))
            dropped = {ix.id for ix in targets}
            updated = info.with_indexes(tuple(ix for ix in info.indexes if ix.id not in dropped))
            self._records.put_collection(txn, updated)
            for ix in targets:
                self._log(txn, db, {"dropIndexes": name, "index": ix.name}, info, ix.spec())
            changes[(db, name)] = updated
            return len(info.indexes)

        return self._writer.write(run)

    def modify_index(
        self,
        db: str,
        name: str,
        key_pattern: dict[str, Any] | None,
        index_name: str | None,
        expire_after: int | None,
        hidden: bool | None,
    ) -> IndexChange:
        """collMod's index form: change a TTL index's expireAfterSeconds (or make a single-field
        index a TTL index), and hide or unhide an index. `expire_after` is the whole seconds
        collMod read (storage/expiry/expire_after.py `read`), checked here against the index it
        names. Raises NamespaceNotFound, IndexNotFound, AmbiguousIndexKeyPattern, InvalidOptions
        (spec/ttl.md, collMod)."""
        if (key_pattern is None) == (index_name is None):
            raise QueryError(
                "InvalidOptions", "must specify exactly one of 'name' or 'keyPattern' in 'index'"
            )

        def run(txn: Txn, changes: CatalogChanges) -> IndexChange:
            info = self._writer.lookup((db, name))
            if info is None:
                raise NamespaceNotFound(f"ns does not exist: {db}.{name}")
            if index_name is not None:
                found = [ix for ix in info.indexes if ix.name == index_name]
                if not found:
                    raise QueryError(
                        "IndexNotFound", f"cannot find index {index_name} for ns {info.ns}"
                    )
            else:
                assert key_pattern is not None
                found = [ix for ix in info.indexes if index_key_matches(ix, key_pattern)]
                if not found:
                    raise QueryError(
                        "IndexNotFound", f"cannot find index {key_pattern} for ns {info.ns}"
                    )
                if len(found) > 1:
                    raise QueryError(
                        "AmbiguousIndexKeyPattern",
                        f"index keyPattern {key_pattern} matches {len(found)} indexes, must use "
                        "index name",
                    )
            ix = found[0]
            options = dict(ix.options)
            change = IndexChange()
            convert = False
            if expire_after is not None:
                expire = expire_after_option.parse(
                    expire_after, Setting.CHANGED_INDEX, ix.key, id_index=ix.name == "_id_"
                )
                old = ix.expire_after
                convert = old is None
                options[EXPIRE_AFTER] = expire.seconds
                change = replace(
                    change,
                    expire_old=None if old is None else old.seconds,
                    expire_new=expire.seconds,
                )
            if hidden is not None:
                if ix.name == "_id_":
                    raise QueryError("InvalidOptions", "cannot hide _id index")
                was = bool(options.get("hidden"))
                if hidden:
                    options["hidden"] = True
                else:
                    options.pop("hidden", None)
                if was != hidden:
                    change = replace(change, hidden_old=was, hidden_new=hidden)
            updated = replace(ix, options=options)
            others = (i for i in info.indexes if i.id != ix.id)
            if ttl.is_cosmos_index(updated) and any(map(ttl.is_cosmos_index, others)):
                raise QueryError("InvalidOptions", _ONE_COSMOS_DEFAULT)
            info = info.with_indexes(tuple(updated if i.id == ix.id else i for i in info.indexes))
            if convert:
                self._convert_to_ttl(txn, info, updated)
            self._records.put_collection(txn, info)
            changes[(db, name)] = info
            index: dict[str, Any] = {"name": ix.name}
            if change.expire_new is not None:
                index["expireAfterSeconds"] = change.expire_new
            if change.hidden_new is not None:
                index["hidden"] = change.hidden_new
            self._log(txn, db, {"collMod": name, "index": index}, info)
            return change

        return self._writer.write(run)

    def _convert_to_ttl(self, txn: Txn, info: CollectionInfo, ix: IndexInfo) -> None:
        """A single-field index just became a TTL index: give every document its expiry facts.
        On `_ts` it becomes the Cosmos default, whose key is the server's last-modified time, so
        its entries built from a client `_ts` field go."""
        if ttl.is_cosmos_index(ix):
            delete_prefix(txn, self._env.index, layout.index_prefix(ix.id))
        prefix = layout.collection_prefix(info.id)
        cur = txn.cursor(db=self._env.records)
        if not cur.set_range(prefix):
            return
        records = list(
            itertools.takewhile(lambda kv: layout.in_collection(kv[0], prefix), cur.iternext())
        )
        view = ttl_view(info, (ix,))
        for k, v in records:
            rewritten = self._add_expiry_facts(txn, view, k, v, bson.decode(ttl.body(v), CODEC))
            if rewritten is not None:
                txn.put(k, rewritten, db=self._env.records)

    def _resolve_drop(
        self, info: CollectionInfo, which: str | dict[str, Any] | list[str]
    ) -> list[IndexInfo]:
        if which == "*":
            return [ix for ix in info.indexes if ix.name != "_id_"]
        if isinstance(which, dict):
            found = [ix for ix in info.indexes if index_key_matches(ix, which)]
            if not found:
                raise QueryError("IndexNotFound", f"can't find index with key: {which}")
            if len(found) > 1:
                raise QueryError(
                    "AmbiguousIndexKeyPattern",
                    f"{len(found)} indexes found for key: {which}, identify by name instead.",
                )
            targets = found
        else:
            names = [which] if isinstance(which, str) else list(which)
            targets = []
            for n in names:
                ix = info.index_named(n)
                if ix is None:
                    raise QueryError("IndexNotFound", f"index not found with name [{n}]")
                targets.append(ix)
        if any(ix.name == "_id_" for ix in targets):
            raise QueryError("InvalidOptions", "cannot drop _id index")
        return targets


def ttl_view(info: CollectionInfo, indexes: tuple[IndexInfo, ...]) -> CollectionInfo | None:
    """The collection seen with only the TTL indexes among `indexes` (None if there are none)."""
    new_ttl = tuple(ix for ix in indexes if ix.expire_after is not None)
    return info.with_indexes(new_ttl) if new_ttl else None
