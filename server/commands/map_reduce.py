"""The mapReduce command, as MongoDB 4.4+ runs it: translated into an aggregation pipeline
($match, $sort, $limit, the map as a $function emitting [{k, v}], $unwind, $group pushing the
values, the reduce and the finalize as $function, then $out or $merge), run by the aggregate
command's machinery, so maxTimeMS, killOp, output writing and its errors are the pipeline's.

As mongod 4.4+: reduce is called for every key, even one with a single value, with the values in
the reverse of their emitting order; `out: {reduce: ...}` reduces a new value with the stored one
(reduce(key, [stored, new])), then finalizes; the reply has no counts or timing (`verbose` is
accepted and ignored)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import bson
from bson import Code
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

from ebbdb.server.arguments import COMMAND_VALUE, Kind, arg
from ebbdb.server.commands.aggregate import AggregateParams, aggregate
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.javascript import require_engine

#: A source that already defines a function (anything else is a function's body).
_FUNCTION = re.compile(r"^\s*(async\s+)?function\b|^\s*(\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>")
_RAW: CodecOptions[RawBSONDocument] = CodecOptions(document_class=RawBSONDocument)
#: The largest first batch: an inline result is one reply.
_ALL = 2**31 - 1


@dataclass(frozen=True)
class MapReduceParams:
    collection: Any = arg(COMMAND_VALUE, Kind.ANY, required=True)
    map: Any = arg("map", Kind.ANY, required=True)
    reduce: Any = arg("reduce", Kind.ANY, required=True)
    out: Any = arg("out", Kind.ANY, required=True)
    finalize: Any = arg("finalize", Kind.ANY)
    query: dict[str, Any] | None = arg("query", Kind.DOC)
    sort: dict[str, Any] | None = arg("sort", Kind.DOC)
    limit: int | None = arg("limit", Kind.INT)
    scope: dict[str, Any] | None = arg("scope", Kind.DOC)
    js_mode: bool = arg("jsMode", Kind.BOOL, False)
    verbose: bool = arg("verbose", Kind.BOOL, False)
    bypass_document_validation: bool = arg("bypassDocumentValidation", Kind.BOOL, False)
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)


def _writes(body: Mapping[str, Any]) -> bool:
    out = body.get("out")
    return not (isinstance(out, Mapping) and "inline" in out)


def _source(name: str, value: Any) -> str:
    """A map, reduce or finalize function's source (a string or Code)."""
    if isinstance(value, (str, Code)):
        return str(value)
    raise CommandError(
        ErrorCode.TypeMismatch,
        f"BSON field 'mapReduce.{name}' is the wrong type '{_type(value)}', expected types "
        "'[javascript, string]'",
    )


def _type(value: Any) -> str:
    from ebbdb.storage.core.values import type_name

    return type_name(value)


def _as_function(source: str) -> str:
    """The source as a function expression to embed (a body is wrapped in one)."""
    source = source.strip().rstrip(";")
    return source if _FUNCTION.match(source) else f"function() {{ {source}\n}}"


def _with_scope(params: str, body: str) -> str:
    """A $function body that sees the command's scope variables (its last argument) as globals
    would: `with` is the one construct that puts an object's fields in scope."""
    return f"function({params}__scope) {{ with (__scope) {{ {body} }} }}"


def _map_function(source: str) -> str:
    # emit is a variable of the wrapper, so the map function (defined inside it) sees it.
    return _with_scope(
        "__doc, ",
        "var __out = []; var emit = function (k, v) { if (arguments.length !== 2) "
        "throw __ebbNative(31220, 'emit takes 2 args'); "
        "__out.push({k: k === undefined ? null : k, v: v}); }; "
        f"var __map = ({_as_function(source)}\n); __map.call(__doc); return __out;",
    )


def _reduce_function(source: str, reverse: bool) -> str:
    values = "__values.slice().reverse()" if reverse else "__values"
    return _with_scope("__key, __values, ", f"return ({_as_function(source)}\n)(__key, {values});")


def _finalize_function(source: str) -> str:
    return _with_scope("__key, __value, ", f"return ({_as_function(source)}\n)(__key, __value);")


def _function(body: str, *args: Any) -> dict[str, Any]:
    return {"$function": {"body": Code(body), "args": list(args), "lang": "js"}}


@dataclass(frozen=True)
class _Out:
    mode: str  # "inline", "replace", "merge" or "reduce"
    collection: str = ""
    db: str | None = None


def _parse_out(out: Any) -> _Out:
    """`out` as MongoDB's parseOutputOptions reads it (13606, 13522)."""
    if isinstance(out, str):
        return _Out("replace", out)
    if not isinstance(out, Mapping):
        raise QueryError("Location13606", "'out' has to be a string or an object")
    db = out.get("db")
    for mode in ("normal", "replace", "merge", "reduce"):
        if mode in out:
            name = out[mode]
            if not isinstance(name, str):
                raise CommandError(ErrorCode.TypeMismatch, f"'out.{mode}' must be a string")
            return _Out("replace" if mode == "normal" else mode, name, db)
    if "inline" in out:
        return _Out("inline")
    raise QueryError(
        "Location13522", "please specify one of [replace|merge|reduce|inline] in 'out' object"
    )


@REGISTRY.command("mapReduce", params=MapReduceParams, writes=_writes)
async def map_reduce(ctx: CommandContext, p: MapReduceParams) -> dict[str, Any]:
    """Run a map-reduce over a collection (JavaScript map, reduce and finalize functions)."""
    if not isinstance(p.collection, str):
        raise CommandError(
            ErrorCode.InvalidNamespace, f"Invalid input namespace {ctx.db}.{p.collection}"
        )
    out = _parse_out(p.out)
    require_engine("mapReduce")
    scope = {"$literal": p.scope or {}}
    reduce_source = _source("reduce", p.reduce)
    finalize = None if p.finalize is None or p.finalize is False else p.finalize
    stages: list[dict[str, Any]] = []
    if p.query is not None:
        stages.append({"$match": p.query})
    if p.sort is not None:
        stages.append({"$sort": p.sort})
    if p.limit is not None and p.limit != 0:
        if p.limit < 0:
            raise QueryError("Location15958", "The limit specified to mapReduce must be positive")
        stages.append({"$limit": p.limit})
    stages += [
        {
            "$project": {
                "_id": 0,
                "emits": _function(_map_function(_source("map", p.map)), "$$ROOT", scope),
            }
        },
        {"$unwind": "$emits"},
        {"$group": {"_id": "$emits.k", "__values": {"$push": "$emits.v"}}},
        {
            "$project": {
                "value": _function(
                    _reduce_function(reduce_source, True), "$_id", "$__values", scope
                )
            }
        },
    ]
    finishing: list[dict[str, Any]] = []
    if finalize is not None:
        finishing.append(
            {
                "$project": {
                    "value": _function(
                        _finalize_function(_source("finalize", finalize)), "$_id", "$value", scope
                    )
                }
            }
        )
    stages += finishing
    target = {"db": out.db or ctx.db, "coll": out.collection}
    if out.mode == "replace":
        stages.append({"$out": target})
    elif out.mode == "merge":
        stages.append(
            {
                "$merge": {
                    "into": target,
                    "on": "_id",
                    "whenMatched": "replace",
                    "whenNotMatched": "insert",
                }
            }
        )
    elif out.mode == "reduce":
        reduce_stored = {
            "$project": {
                "value": _function(
                    _reduce_function(reduce_source, False), "$_id", ["$value", "$$new.value"], scope
                )
            }
        }
        stages.append(
            {
                "$merge": {
                    "into": target,
                    "on": "_id",
                    "whenMatched": [reduce_stored, *finishing],
                    "whenNotMatched": "insert",
                }
            }
        )
    params = AggregateParams(
        target=p.collection,
        pipeline=stages,
        cursor={"batchSize": _ALL},
        collation=p.collation,
        bypass_document_validation=p.bypass_document_validation,
    )
    try:
        reply = await aggregate(ctx, params)
    except QueryError as exc:
        if exc.code_name == "Location31264":  # the first JavaScript is the map's emit
            raise QueryError("Location31246", exc.message) from None
        raise
    if out.mode == "inline":
        # The aggregate reply's cursor is stored BSON (server/raw_reply.py): its documents go
        # out as they are.
        cursor = bson.decode(reply["cursor"].raw, _RAW)
        if cursor["id"]:
            raise QueryError("BSONObjectTooLarge", "too much data for in memory map/reduce")
        return {"results": cursor["firstBatch"]}
    if out.db is not None:
        return {"result": {"db": out.db, "collection": out.collection}}
    return {"result": out.collection}


__all__ = ["MapReduceParams", "map_reduce"]
