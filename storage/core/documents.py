"""Client documents on their way in: how ebbdb decodes BSON, the size limit, and the one check
that gives every document a valid `_id` as its first field."""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from typing import Any

import bson
from bson import ObjectId, Regex
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions, DatetimeConversion

from ebbdb.storage.core.errors import DocumentTooLarge, InvalidBSON, InvalidIdField, QueryError
from ebbdb.storage.core.limits import MAX_STORAGE_DEPTH, check_insert_depth, may_nest_too_deep

#: How documents are decoded inside ebbdb: dates stay exact milliseconds, UUIDs stay Binary, so a
#: decoded document re-encodes to the same bytes.
CODEC: CodecOptions[dict[str, Any]] = CodecOptions(
    datetime_conversion=DatetimeConversion.DATETIME_MS,
    uuid_representation=UuidRepresentation.UNSPECIFIED,
)
#: MongoDB's maxBsonObjectSize.
MAX_DOCUMENT_SIZE = 16 * 1024 * 1024


def prepare_document(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """Validate one client document and make sure `_id` is present and first.
    Returns (the BSON to store, its decoded form)."""
    try:
        doc = bson.decode(raw, CODEC)
    except Exception as exc:  # bson raises several types for corrupt input
        raise InvalidBSON(f"invalid BSON document: {exc}") from None
    if may_nest_too_deep(len(raw), MAX_STORAGE_DEPTH):  # most documents are too short to
        check_insert_depth(doc)
    if "_id" not in doc:
        oid = ObjectId()
        # Splice one ObjectId element in front of the original elements, so every other value
        # keeps its exact bytes (a decode/encode round trip would not for deprecated types).
        raw = struct.pack("<i", len(raw) + 17) + b"\x07_id\x00" + oid.binary + raw[4:]
        doc = {"_id": oid, **doc}
    else:
        check_id(doc["_id"])
        if next(iter(doc)) != "_id":
            doc = {"_id": doc["_id"], **doc}
            raw = bson.encode(doc, codec_options=CODEC)
    if len(raw) > MAX_DOCUMENT_SIZE:
        raise DocumentTooLarge(
            f"object to insert too large. size in bytes: {len(raw)}, max size: {MAX_DOCUMENT_SIZE}"
        )
    return raw, doc


#: `_id` types that pass check_id as they are.
_PLAIN_IDS = frozenset({ObjectId, int, str, float, bson.Int64})


def check_id(value: Any) -> None:
    """MongoDB's storage rules for an `_id` (storageValidIdField), for inserts, replacements,
    pipeline updates and upserts alike: not an array or a regular expression (InvalidIdField),
    and, since MongoDB 5.0, no `$`-prefixed field anywhere inside a document `_id`
    (DollarPrefixedFieldName; a well-formed DBRef decodes to a DBRef, which is allowed)."""
    if type(value) in _PLAIN_IDS:  # nearly every _id: nothing to look into
        return
    if isinstance(value, list):
        raise InvalidIdField("The '_id' value cannot be of type array")
    if isinstance(value, Regex | re.Pattern):
        raise InvalidIdField("The '_id' value cannot be of type regex")
    if isinstance(value, Mapping):
        name = _dollar_field(value)
        if name is not None:
            raise QueryError(
                "DollarPrefixedFieldName",
                f"_id fields may not contain '$'-prefixed fields: {name} is not valid for storage.",
            )


def _dollar_field(value: Any) -> str | None:
    """The first `$`-prefixed field name inside a document or array (BSONObj's
    storageValidEmbedded), or None."""
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    for name, child in items:
        if isinstance(name, str) and name.startswith("$"):
            return name
        if isinstance(child, Mapping | list):
            found = _dollar_field(child)
            if found is not None:
                return found
    return None
