"""The DDL of capped collections, each one storage write: cloneCollectionAsCapped and
convertToCapped (a capped copy of a collection's documents in natural order, keeping only the
`_id` index, as mongod does), and collMod's cappedSize / cappedMax."""

from __future__ import annotations

from typing import Any

import bson
from bson.raw_bson import RawBSONDocument

from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import NamespaceExists, NamespaceNotFound, QueryError
from ebbdb.storage.engine import capped
from ebbdb.storage.engine.ddl import Ddl
from ebbdb.storage.engine.environment import Environment, Txn
from ebbdb.storage.engine.records import Records
from ebbdb.storage.engine.sizes import number
from ebbdb.storage.engine.writer import CatalogChanges, Writer
from ebbdb.storage.expiry import ttl


class CappedDdl:
    """Capped-collection DDL over the engine's environment, records, writer and DDL."""

    def __init__(self, env: Environment, records: Records, writer: Writer, ddl: Ddl) -> None:
        self._env = env
        self._records = records
        self._writer = writer
        self._ddl = ddl

    def clone_as_capped(self, db: str, name: str, to_name: str, size: int) -> CollectionInfo:
        """Create capped collection `to_name` of `size` bytes holding `name`'s documents in
        natural order (the oldest go if they do not fit). Raises NamespaceNotFound (no source)
        or NamespaceExists (the target exists)."""
        validate_collection_name(db, name)
        validate_collection_name(db, to_name)

        def run(txn: Txn, changes: CatalogChanges) -> CollectionInfo:
            source = self._source(db, name)
            if self._writer.lookup((db, to_name)) is not None:
                raise NamespaceExists("to collection already exists")
            return self._copy(
                txn, changes, source, to_name, size, self._records.stored(txn, source)
            )

        return self._writer.write(run)

    def convert_to_capped(self, db: str, name: str, size: int) -> CollectionInfo:
        """Replace collection `name` by a capped collection of `size` bytes with its documents
        (natural order; the oldest go if they do not fit) and only the `_id` index; it gets a new
        UUID, as mongod's temporary copy renamed over the original does."""
        validate_collection_name(db, name)

        def run(txn: Txn, changes: CatalogChanges) -> CollectionInfo:
            source = self._source(db, name)
            copied = self._records.stored(txn, source)
            self._ddl.drop_collection(db, name)
            return self._copy(txn, changes, source, name, size, copied)

        return self._writer.write(run)

    def set_limits(self, db: str, name: str, size: int | None, max_docs: int | None) -> None:
        """collMod's cappedSize / cappedMax: new bounds, applied from the next insert on (as in
        MongoDB, nothing is removed now). Raises NamespaceNotFound, or InvalidOptions for a
        collection that is not capped."""

        def run(txn: Txn, changes: CatalogChanges) -> None:
            info = self._writer.lookup((db, name))
            if info is None:
                raise NamespaceNotFound(f"ns does not exist: {db}.{name}")
            if capped.limits(info) is None:
                raise QueryError("InvalidOptions", "Collection must be capped.")
            options = dict(info.options)
            if size is not None:
                options["size"] = number(capped.round_size(size))
            if max_docs is not None:
                options["max"] = number(capped.stored_max(max_docs))
            updated = capped.options(int(options["size"]), options.get("max"), options)
            info = CollectionInfo(info.id, db, name, updated, info.indexes, info.uuid)
            self._records.put_collection(txn, info)
            changes[(db, name)] = info

        self._writer.write(run)

    def _source(self, db: str, name: str) -> CollectionInfo:
        info = self._writer.lookup((db, name))
        if info is None:
            raise NamespaceNotFound(f"source collection {db}.{name} does not exist")
        return info

    def _copy(
        self,
        txn: Txn,
        changes: CatalogChanges,
        source: CollectionInfo,
        to_name: str,
        size: int,
        stored: list[bytes],
    ) -> CollectionInfo:
        options = capped.options(size, None, {})
        info = self._records.new_collection(txn, source.db, to_name, options)
        changes[(source.db, to_name)] = info
        count = data = 0
        for rid, value in enumerate(stored, start=1):
            raw = ttl.body(value)
            doc: dict[str, Any] = bson.decode(raw, CODEC)
            modified = ttl.read_meta(value).modified
            info = self._records.insert_one(txn, info, rid, modified, raw, doc)
            oplog = self._records.oplog
            if oplog is not None:  # the copy's documents are inserts, as mongod logs them
                oplog.op(txn, "i", info, RawBSONDocument(raw), {"_id": doc.get("_id")})
            count += 1
            data += len(raw)
            gone, freed = self._records.make_room(txn, info, rid, (count, data))
            count -= gone
            data -= freed
        changes[(source.db, to_name)] = info
        self._records.add_stats(txn, info.id, count, data)
        return info
