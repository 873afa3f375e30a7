"""Clustered collections (`clusteredIndex: {key: {_id: 1}, unique: true}`): the options MongoDB 7
accepts, how listIndexes and listCollections show them, and the date a document's `_id` gives the
collection's TTL (`expireAfterSeconds`, parsed by storage/expiry/expire_after.py). Pure: the planner
reads `is_clustered` to give them `_id` order, storage/expiry/ttl.py reads `id_date_ms` for their
expiry rule."""

from __future__ import annotations

from typing import Any

from bson import ObjectId

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_decimal
from ebbdb.storage.query.compare import RANK_DATE, date_ms, rank

#: The collection option that makes a collection clustered.
OPTION = "clusteredIndex"
#: The one cluster key MongoDB allows on a replicated (user) collection.
ID_KEY = {"_id": 1}


def is_clustered(coll: CollectionInfo) -> bool:
    return OPTION in coll.options


def clustered_spec(
    key: dict[str, Any], unique: bool, name: str | None, v: int | None
) -> dict[str, Any]:
    """The canonical clusteredIndex option (as listCollections shows it) for a parsed
    `{key, unique, name?, v?}`; raises QueryError with MongoDB 7's code for a spec it refuses."""
    if not unique:
        raise QueryError(
            "Location5979700", "The clusteredIndex option requires unique: true to be specified"
        )
    direction = key.get("_id")
    if list(key) != ["_id"] or not is_number(direction) or to_decimal(direction) != 1:
        raise QueryError(
            "InvalidIndexSpecificationOption",
            "The clusteredIndex option is only supported for key: {_id: 1}",
        )
    version = 2 if v is None else v
    if version != 2:
        raise QueryError(
            "Location5979704",
            f"Invalid clusteredIndex specification {{ v: {version}, key: {{ _id: 1 }}, name: "
            f'"{name or "_id_"}", unique: true }}; cannot create a clusteredIndex with v={version}',
        )
    return {"v": 2, "key": dict(ID_KEY), "name": name or "_id_", "unique": True}


def index_spec(coll: CollectionInfo) -> dict[str, Any]:
    """The listIndexes entry of a clustered collection's cluster key."""
    return {**coll.options[OPTION], "clustered": True}


def id_date_ms(doc: dict[str, Any]) -> int | None:
    """The date a document's `_id` carries, in ms: an ObjectId's timestamp (whole seconds) or a
    Date; None for any other `_id` (such documents never expire)."""
    value = doc.get("_id")
    if isinstance(value, ObjectId):
        return int.from_bytes(value.binary[:4], "big") * 1000
    if value is not None and rank(value) == RANK_DATE:
        return date_ms(value)
    return None
