"""The catalog's records: databases, collections and their indexes, with MongoDB's naming rules.
Pure data and validation; storage/engine/store.py persists them. What an index's or a collection's
options say (a collation, a partial filter, a time to live) is read on first use: loading the
catalog at start compiles nothing, nor imports the query language."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ebbdb.storage.core.collation import Collation, parse_collation
from ebbdb.storage.core.errors import InvalidNamespace

MAX_NS_LEN = 255
MAX_DB_NAME_LEN = 63
_DB_FORBIDDEN = set('/\\. "$\x00')
#: The option, on an index or a clustered or time series collection, that gives it a time to live.
EXPIRE_AFTER = "expireAfterSeconds"


@dataclass(frozen=True)
class ExpireAfter:
    """A valid `expireAfterSeconds`: whole seconds. On a TTL index on a date field 0..2147483647;
    on the `_ts` index (the Cosmos default) -1 (documents without their own `ttl` never expire)
    or 1..2147483647; on a clustered or time series collection 0 up to the time since the epoch.
    Only storage/expiry/expire_after.py makes one from a client's value; the catalog reads its
    own back (`IndexInfo.expire_after`, `CollectionInfo.expire_after`). It lives here, below
    expiry, because the catalog's records carry it."""

    seconds: int

    @property
    def ms(self) -> int:
        return self.seconds * 1000


def kind_name(key: tuple[tuple[str, Any], ...]) -> str | None:
    """The index kind a key pattern names (storage/index_kinds): its first string value
    ("hashed", "text", "2dsphere", ...), "wildcard" for a `$**` field, None for plain ascending
    and descending keys."""
    for field_name, direction in key:
        if isinstance(direction, str):
            return direction
        if field_name == "$**" or field_name.endswith(".$**"):
            return "wildcard"
    return None


@dataclass(frozen=True)
class IndexInfo:
    """One index: `key` is ((path, direction), ...); `options` holds what listIndexes shows beyond
    v, key and name (unique, sparse, expireAfterSeconds, ...)."""

    id: int
    name: str
    key: tuple[tuple[str, Any], ...]
    options: dict[str, Any] = field(default_factory=dict)
    #: Some document gave this index an array value: one document may have several entries.
    multikey: bool = False
    #: Some entry's key was shortened to fit LMDB: entries sharing a long prefix are in hash
    #: order, so the index cannot deliver a sort.
    long_keys: bool = False

    @cached_property
    def unique(self) -> bool:
        """Its keys are held once: as the index says, and an `_id` index unless it says
        `unique: false` (a time series collection's, made so since its measurements may share
        an `_id`, as MongoDB's have no `_id` index)."""
        return bool(self.options.get("unique", self.name == "_id_"))

    @cached_property
    def sparse(self) -> bool:
        return bool(self.options.get("sparse"))

    @cached_property
    def hidden(self) -> bool:
        return bool(self.options.get("hidden"))

    @cached_property
    def expire_after(self) -> ExpireAfter | None:
        """The index's time to live (None: not a TTL index). The catalog keeps it where listIndexes
        shows it, in `options`, as the whole number of seconds it has always stored."""
        return _stored_expire_after(self.options)

    @cached_property
    def collation(self) -> Collation | None:
        """The index's collation (None: the simple one): string keys are its sort keys."""
        spec = self.options.get("collation")
        return None if spec is None else parse_collation(spec)

    @property
    def partial_filter(self) -> dict[str, Any] | None:
        pfe = self.options.get("partialFilterExpression")
        return dict(pfe) if pfe is not None else None

    @cached_property
    def partial_predicate(self) -> Callable[[dict[str, Any]], bool] | None:
        """The compiled partialFilterExpression (documents it rejects have no entries)."""
        pfe = self.partial_filter
        if pfe is None:
            return None
        from ebbdb.storage.query.match import compile_filter

        return compile_filter(pfe)

    @cached_property
    def kind(self) -> str | None:
        """None for ascending/descending keys, else the kind's name (storage/index_kinds)."""
        return kind_name(self.key)

    @cached_property
    def directions(self) -> tuple[int, ...]:
        return tuple(-1 if isinstance(d, (int, float)) and d < 0 else 1 for _, d in self.key)

    @cached_property
    def fields(self) -> tuple[str, ...]:
        return tuple(f for f, _ in self.key)

    def spec(self) -> dict[str, Any]:
        """The document listIndexes returns for this index."""
        return {"v": 2, "key": dict(self.key), "name": self.name, **self.options}

    def to_doc(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "key": dict(self.key),
            "options": self.options,
            "multikey": self.multikey,
            "long_keys": self.long_keys,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> IndexInfo:
        return cls(
            int(doc["id"]),
            # A plain string: an index named by JavaScript code (which pymongo decodes as a str
            # subclass, unhashable) could be created before such names were refused.
            str(doc["name"]),
            tuple(doc["key"].items()),
            dict(doc["options"]),
            bool(doc.get("multikey", False)),
            bool(doc.get("long_keys", False)),
        )


@dataclass(frozen=True)
class CollectionInfo:
    id: int
    db: str
    name: str
    options: dict[str, Any]
    indexes: tuple[IndexInfo, ...]
    uuid: Any = None

    @property
    def ns(self) -> str:
        return f"{self.db}.{self.name}"

    def index_named(self, name: str) -> IndexInfo | None:
        return next((ix for ix in self.indexes if ix.name == name), None)

    def with_indexes(self, indexes: tuple[IndexInfo, ...]) -> CollectionInfo:
        return CollectionInfo(self.id, self.db, self.name, self.options, indexes, self.uuid)

    @cached_property
    def expire_after(self) -> ExpireAfter | None:
        """A clustered or time series collection's time to live (None: none, or "off"), kept in
        `options` as listCollections shows it (a long)."""
        return _stored_expire_after(self.options)

    @cached_property
    def collation(self) -> Collation | None:
        """The collection's default collation (None: the simple one)."""
        spec = self.options.get("collation")
        return None if spec is None else parse_collation(spec)

    @cached_property  # read by every `_id` lookup
    def id_index(self) -> IndexInfo:
        ix = self.index_named("_id_")
        assert ix is not None
        return ix

    def to_doc(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "db": self.db,
            "name": self.name,
            "options": self.options,
            "uuid": self.uuid,
            "indexes": [ix.to_doc() for ix in self.indexes],
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> CollectionInfo:
        return cls(
            int(doc["id"]),
            doc["db"],
            doc["name"],
            dict(doc["options"]),
            tuple(IndexInfo.from_doc(ix) for ix in doc["indexes"]),
            doc.get("uuid"),
        )


def _stored_expire_after(options: dict[str, Any]) -> ExpireAfter | None:
    """The time to live the catalog stored in `options` (an int or a long, already valid)."""
    value = options.get(EXPIRE_AFTER)
    return None if value is None else ExpireAfter(int(value))


def validate_db_name(db: str) -> None:
    """Raises InvalidNamespace unless `db` is a name MongoDB accepts for a database."""
    if not db:
        raise InvalidNamespace("database names cannot be empty")
    if len(db.encode("utf-8", "surrogatepass")) > MAX_DB_NAME_LEN:
        raise InvalidNamespace(f"db name '{db}' is too long, max length is {MAX_DB_NAME_LEN}")
    bad = sorted(set(db) & _DB_FORBIDDEN)
    if bad:
        raise InvalidNamespace(f"Invalid database name: '{db}'")


#: Namespaces that passed validate_collection_name (a client names the same few on every request);
#: emptied when it grows past _VALID_MAX, so a client inventing names cannot grow it for ever.
_VALID: set[tuple[str, str]] = set()
_VALID_MAX = 4096


def validate_collection_name(db: str, name: str) -> None:
    """Raises InvalidNamespace unless `db.name` is a namespace a client may create or read."""
    if type(db) is not str or type(name) is not str:  # (pymongo's Code is a str subclass)
        raise InvalidNamespace(f"Invalid namespace specified '{db}.{name}'")
    if (db, name) in _VALID:
        return
    validate_db_name(db)
    ns = f"{db}.{name}"
    if not name or "\x00" in name or name.startswith(".") or "$" in name:
        raise InvalidNamespace(f"Invalid namespace specified '{ns}'")
    if len(ns.encode("utf-8", "surrogatepass")) > MAX_NS_LEN:
        raise InvalidNamespace(
            f"Fully qualified namespace is too long. Namespace: {ns} Max: {MAX_NS_LEN}"
        )
    if len(_VALID) >= _VALID_MAX:
        _VALID.clear()
    _VALID.add((db, name))
