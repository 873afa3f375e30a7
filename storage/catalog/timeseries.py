"""Time series collections (`timeseries: {timeField, metaField, granularity | bucket parameters}`):
the options MongoDB 7 accepts and fills in, what a measurement must hold, which updates MongoDB 7
allows on them, and the date (the timeField) their TTL counts from. Pure.

The layout is simplified: MongoDB keeps measurements in `system.buckets.<name>` and unpacks them
on every read; ebbdb stores each measurement as a document of the collection itself, fields in the
order MongoDB's unpacking gives them (timeField, metaField, then the rest), so finds, aggregations
and deletes read them as users see them in MongoDB."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import bson

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.compare import RANK_DATE, date_ms, rank

if TYPE_CHECKING:  # the catalog loads at start-up; the matcher with the first query
    from ebbdb.storage.query.match_tree import Node, ParsedFilter

OPTION = "timeseries"
#: granularity -> (bucketMaxSpanSeconds, bucketRoundingSeconds) MongoDB derives from it.
GRANULARITIES = {"seconds": (3600, 60), "minutes": (86400, 3600), "hours": (2592000, 86400)}
#: The only granularity changes collMod allows: to a coarser one.
_COARSER = {"seconds": ("minutes", "hours"), "minutes": ("hours",), "hours": ()}
#: create options a time series collection may be given besides `timeseries` (MongoDB 7).
ALLOWED_WITH = frozenset(
    {"timeseries", "expireAfterSeconds", "storageEngine", "indexOptionDefaults", "collation"}
)


def options_of(coll: CollectionInfo | None) -> dict[str, Any] | None:
    """The collection's timeseries options, or None for any other collection."""
    if coll is None:
        return None
    ts = coll.options.get(OPTION)
    return dict(ts) if ts is not None else None


def is_timeseries(coll: CollectionInfo | None) -> bool:
    return coll is not None and OPTION in coll.options


def create_options(
    ns: str,
    time_field: str,
    meta_field: str | None,
    granularity: str | None,
    max_span: int | None,
    rounding: int | None,
) -> dict[str, Any]:
    """The timeseries option as MongoDB 7 stores and lists it, from what `create` was given;
    raises QueryError with MongoDB's codes (72 InvalidOptions, 2 BadValue, 51024)."""
    if "." in time_field:
        raise QueryError(
            "InvalidOptions", f"{ns}: 'timeField' must be a top-level field and not contain a '.'"
        )
    if meta_field is not None:
        if meta_field == "_id":
            raise QueryError("InvalidOptions", "'metaField' cannot be \"_id\"")
        if meta_field == time_field:
            raise QueryError("InvalidOptions", "'metaField' cannot be the same as 'timeField'")
        if "." in meta_field:
            raise QueryError(
                "InvalidOptions",
                f"{ns}: 'metaField' must be a top-level field and not contain a '.'",
            )
    if granularity is not None and granularity not in GRANULARITIES:
        raise QueryError(
            "BadValue",
            f"Enumeration value '{granularity}' for field 'create.timeseries.granularity' is not "
            "a valid value.",
        )
    for name, value in (("bucketRoundingSeconds", rounding), ("bucketMaxSpanSeconds", max_span)):
        if value is not None and value < 1:
            raise QueryError(
                "Location51024",
                f"BSON field 'create.timeseries.{name}' value must be >= 1, actual value '{value}'",
            )
    out: dict[str, Any] = {"timeField": time_field}
    if meta_field is not None:
        out["metaField"] = meta_field
    if granularity is not None:
        span, round_to = GRANULARITIES[granularity]
        if max_span is not None and max_span != span:
            raise QueryError("InvalidOptions", _not_configurable("bucketMaxSpanSeconds", span))
        if rounding is not None and rounding != round_to:
            raise QueryError("InvalidOptions", _not_configurable("bucketRoundingSeconds", round_to))
        out.update(granularity=granularity, bucketMaxSpanSeconds=span)
    elif max_span is not None or rounding is not None:
        if max_span is None or rounding is None:
            raise QueryError(
                "InvalidOptions",
                "Timeseries 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' need to be set "
                "alongside each other",
            )
        if max_span != rounding:
            raise QueryError(
                "InvalidOptions",
                "Timeseries 'bucketRoundingSeconds' needs to be equal to 'bucketMaxSpanSeconds'",
            )
        out.update(bucketRoundingSeconds=rounding, bucketMaxSpanSeconds=max_span)
    else:
        out.update(granularity="seconds", bucketMaxSpanSeconds=GRANULARITIES["seconds"][0])
    return out


def _not_configurable(name: str, default: int) -> str:
    return (
        f"Timeseries '{name}' is not configurable to a value other than the default of "
        f"{default} for the provided granularity"
    )


def with_granularity(ts: Mapping[str, Any], granularity: str) -> dict[str, Any] | None:
    """The timeseries option after collMod's `timeseries: {granularity}` (None: no change).
    Only a coarser granularity is allowed (72 InvalidOptions); collections created with bucket
    parameters instead of a granularity cannot be given one (238 NotImplemented in ebbdb)."""
    if granularity not in GRANULARITIES:
        raise QueryError(
            "BadValue",
            f"Enumeration value '{granularity}' for field 'collMod.timeseries.granularity' is not "
            "a valid value.",
        )
    current = ts.get("granularity")
    if current is None:
        raise QueryError(
            "NotImplemented",
            "changing a time series collection created with bucket parameters to a granularity "
            "is not supported",
        )
    if granularity == current:
        return None
    if granularity not in _COARSER[current]:
        raise QueryError(
            "InvalidOptions",
            "Invalid transition for timeseries.granularity. Can only transition from 'seconds' "
            "to 'minutes' or 'minutes' to 'hours'.",
        )
    out = dict(ts)
    out["granularity"] = granularity
    out["bucketMaxSpanSeconds"] = GRANULARITIES[granularity][0]
    return out


def default_index(ts: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The index MongoDB 7 builds on a new time series collection with a metaField:
    (name, key) for {metaField: 1, timeField: 1}; None without a metaField."""
    meta, time_field = ts.get("metaField"), ts["timeField"]
    if meta is None:
        return None
    return f"{meta}_1_{time_field}_1", {meta: 1, time_field: 1}


def time_ms(ts: Mapping[str, Any], doc: Mapping[str, Any]) -> int | None:
    """The measurement's time (its timeField, a Date) in ms; None if it has none."""
    value = doc.get(ts["timeField"])
    if value is None or rank(value) != RANK_DATE:
        return None
    return date_ms(value)


def prepare_measurement(
    coll: CollectionInfo, raw: bytes, doc: dict[str, Any]
) -> tuple[bytes, dict[str, Any]]:
    """A measurement as it is stored: its timeField must be a Date (2 BadValue, MongoDB's
    message); its fields are put in the order MongoDB's bucket unpacking returns them."""
    ts = coll.options[OPTION]
    time_field, meta = ts["timeField"], ts.get("metaField")
    if time_ms(ts, doc) is None:
        raise QueryError(
            "BadValue",
            f"'{time_field}' must be present and contain a valid BSON UTC datetime value",
        )
    front = [time_field] + ([meta] if meta is not None and meta in doc else [])
    if list(doc)[: len(front)] == front:
        return raw, doc
    ordered = {name: doc[name] for name in front}
    ordered.update((k, v) for k, v in doc.items() if k not in ordered)
    return bson.encode(ordered, codec_options=CODEC), ordered


# -- updates ---------------------------------------------------------------------------------------
# MongoDB 7.0 runs deletes with any filter on a time series collection, but updates only as in
# 5.1 to 6.3: multi, no upsert, a filter and $-operators on the metaField only.


def check_update_options(ts: Mapping[str, Any], multi: bool, upsert: bool) -> None:
    """Raise QueryError (72 InvalidOptions, MongoDB 7.0's messages) for an update statement a
    time series collection refuses whatever its filter and update: without a metaField, not
    multi, or an upsert. Checked before the statement's filter is parsed; check_update after."""
    if ts.get("metaField") is None:
        raise QueryError(
            "InvalidOptions",
            "Cannot perform an update on a time-series collection that does not have a metaField",
        )
    if not multi:
        raise QueryError(
            "InvalidOptions", "Cannot perform a non-multi update on a time-series collection"
        )
    if upsert:
        raise QueryError("InvalidOptions", "Cannot perform an upsert on a time-series collection")


def check_update(ts: Mapping[str, Any], query: ParsedFilter, u: Any) -> None:
    """Raise QueryError (72 InvalidOptions, MongoDB 7.0's messages) for an update statement,
    its options already checked (check_update_options), that a time series collection refuses
    for its parsed filter (a field other than the metaField, or `$expr`) or its update (a
    pipeline, a replacement, a field other than the metaField)."""
    meta = ts["metaField"]
    _check_query(query.tree, meta)
    if isinstance(u, list):
        raise QueryError(
            "InvalidOptions",
            "Cannot perform an update on a time-series collection using a pipeline update",
        )
    if not u or not next(iter(u)).startswith("$"):
        raise QueryError(
            "InvalidOptions",
            "Cannot perform an update on a time-series collection using a replacement document",
        )
    for op, fields in u.items():
        for name, value in fields.items() if isinstance(fields, Mapping) else ():
            targets = [name] + ([value] if op == "$rename" else [])
            if not all(isinstance(t, str) and _on_meta(t, meta) for t in targets):
                raise QueryError(
                    "InvalidOptions",
                    "Cannot perform an update on a time-series collection which updates a field "
                    f"that is not the metaField '{meta}'",
                )


def _on_meta(path: str, meta: str) -> bool:
    return path == meta or path.startswith(meta + ".")


def _check_query(node: Node, meta: str) -> None:
    """The filter's conditions, in order: each on the metaField (or a DBRef's `$ref`, `$id`,
    `$db`), or pathless ($jsonSchema, $alwaysTrue, ...) but not `$expr`."""
    from ebbdb.storage.query.match_tree import And, Expr, Nor, Or, path_of

    if isinstance(node, (And, Or, Nor)):
        for child in node.children:
            _check_query(child, meta)
    elif isinstance(node, Expr):
        raise QueryError(
            "InvalidOptions",
            "Cannot use $expr when performing an update or delete on a time-series collection",
        )
    else:
        path = path_of(node)
        if path is not None and not path.startswith("$") and not _on_meta(path, meta):
            raise QueryError(
                "InvalidOptions",
                "Cannot perform an update or delete on a time-series collection when querying on "
                f"a field that is not the metaField '{meta}'",
            )
