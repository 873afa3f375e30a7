"""Typed command parameters: each command declares a frozen dataclass whose fields say which BSON field
they come from and of what kind; `extract` is the one place a command document becomes that object."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any, TypeVar

import bson
from bson import Decimal128, Int64

from server.errors import CommandError, ErrorCode
from storage.documents import CODEC

#: Fields every command may carry that ebbdb accepts and does not act on (sessions, concerns,
#: read preference, API versioning, comments, server-side timeouts, driver metadata).
GENERIC_FIELDS = frozenset(
    {
        "$db",
        "lsid",
        "$clusterTime",
        "txnNumber",
        "autocommit",
        "startTransaction",
        "readConcern",
        "writeConcern",
        "$readPreference",
        "apiVersion",
        "apiStrict",
        "apiDeprecationErrors",
        "comment",
        "maxTimeMS",
        "$client",
        "$audit",
        "mayBypassWriteBlocking",
        "$queryOptions",
        "bypassDocumentValidation",
        "$configServerState",
        "$topologyTime",
    }
)

#: The argument name that stands for the value of the command's own (first) field.
COMMAND_VALUE = "$command"
#: The argument name of a field that collects every other field, as a dict (getParameter & co).
REST = "*"


class Kind(enum.Enum):
    ANY = "any"
    STRING = "string"
    INT = "int"  # any number, as a Python int (fractions truncated, as MongoDB's IDL does)
    BOOL = "bool"  # bool or number, as MongoDB's "safeBool"
    DOC = "object"
    DOCS = "array of objects, decoded"
    RAW_DOCS = "array of objects, as BSON bytes"
    ARRAY = "array"
    STRING_OR_DOC = "string or object"


_TYPE_NAMES = {
    bool: "bool",
    int: "int",
    Int64: "long",
    float: "double",
    str: "string",
    dict: "object",
    list: "array",
    Decimal128: "decimal",
    type(None): "null",
}

_EXPECTED = {
    Kind.STRING: "type 'string'",
    Kind.INT: "types '[long, int, decimal, double]'",
    Kind.BOOL: "types '[bool, long, int, decimal, double]'",
    Kind.DOC: "type 'object'",
    Kind.DOCS: "type 'array'",
    Kind.RAW_DOCS: "type 'array'",
    Kind.ARRAY: "type 'array'",
    Kind.STRING_OR_DOC: "types '[string, object]'",
}


class DocSequence(list):  # type: ignore[type-arg]
    """An OP_MSG kind-1 document sequence merged into the arguments: a list of raw BSON documents."""


def bson_type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


@dataclasses.dataclass(frozen=True)
class Arg:
    name: str
    kind: Kind
    required: bool = False


def arg(name: str, kind: Kind, default: Any = None, *, required: bool = False) -> Any:
    """Declare a parameter field: `name` is the BSON field (COMMAND_VALUE for the command's value)."""
    return dataclasses.field(default=default, metadata={"arg": Arg(name, kind, required)})


P = TypeVar("P")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, Decimal128)) and not isinstance(v, bool)


def _to_int(v: Any) -> int:
    if isinstance(v, Decimal128):
        v = v.to_decimal()
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError
    return int(v)


def _convert(command: str, a: Arg, value: Any) -> Any:
    kind = a.kind
    ok = True
    if kind is Kind.ANY:
        return value
    if kind is Kind.STRING:
        ok = isinstance(value, str)
    elif kind is Kind.INT:
        if _is_number(value):
            try:
                return _to_int(value)
            except (ValueError, OverflowError):
                raise CommandError(
                    ErrorCode.BadValue, f"BSON field '{command}.{a.name}' must be a finite number"
                ) from None
        ok = False
    elif kind is Kind.BOOL:
        if isinstance(value, bool):
            return value
        if isinstance(value, Decimal128):
            d = value.to_decimal()
            return bool(d.is_nan() or d != 0)
        if _is_number(value):
            return bool(value != 0)
        ok = False
    elif kind is Kind.DOC:
        ok = isinstance(value, Mapping)
    elif kind is Kind.STRING_OR_DOC:
        ok = isinstance(value, (str, Mapping))
    elif kind is Kind.ARRAY:
        ok = isinstance(value, list)
    elif kind in (Kind.DOCS, Kind.RAW_DOCS):
        if not isinstance(value, list):
            ok = False
        else:
            return _documents(command, a, value)
    if not ok:
        field = a.name if a.name != COMMAND_VALUE else command
        raise CommandError(
            ErrorCode.TypeMismatch,
            f"BSON field '{command}.{field}' is the wrong type '{bson_type_name(value)}', "
            f"expected {_EXPECTED[kind]}",
        )
    return value


def _documents(command: str, a: Arg, items: list[Any]) -> tuple[Any, ...]:
    raw = a.kind is Kind.RAW_DOCS
    out: list[Any] = []
    for i, item in enumerate(items):
        if isinstance(item, (bytes, bytearray)):
            if raw:
                out.append(bytes(item))
            else:
                try:
                    out.append(bson.decode(item, CODEC))
                except Exception:
                    raise CommandError(
                        ErrorCode.InvalidBSON, f"{command}.{a.name}.{i} is not valid BSON"
                    ) from None
        elif isinstance(item, Mapping):
            out.append(bson.encode(item, codec_options=CODEC) if raw else item)
        else:
            raise CommandError(
                ErrorCode.TypeMismatch,
                f"BSON field '{command}.{a.name}.{i}' is the wrong type "
                f"'{bson_type_name(item)}', expected type 'object'",
            )
    return tuple(out)


_ARGS: dict[type, dict[str, tuple[str, Arg]]] = {}


def _args_of(cls: type) -> dict[str, tuple[str, Arg]]:
    """BSON field name -> (attribute, Arg) for a params class, computed once per class."""
    found = _ARGS.get(cls)
    if found is None:
        found = {}
        for f in dataclasses.fields(cls):
            a = f.metadata.get("arg")
            if a is not None:
                found[a.name] = (f.name, a)
        _ARGS[cls] = found
    return found


def extract(cls: type[P], command: str, body: Mapping[str, Any], *, nested: bool = False) -> P:
    """Build `cls` from a command document (or, `nested`, from a document inside one, such as an
    update statement, where `command` is the path to it and no field is the command's own).
    Raises CommandError: 40415 for an unknown field, 40414 for a missing required one,
    14 TypeMismatch for a value of the wrong type."""
    by_name = _args_of(cls)
    values: dict[str, Any] = {}
    first = not nested
    for key, value in body.items():
        if first:
            first = False
            entry = by_name.get(COMMAND_VALUE)
            if entry is not None:
                values[entry[0]] = _convert(command, entry[1], value)
            continue
        entry = by_name.get(key)
        if entry is None:
            if key in GENERIC_FIELDS:
                continue
            rest = by_name.get(REST)
            if rest is not None:
                values.setdefault(rest[0], {})[key] = value
                continue
            raise CommandError(
                ErrorCode.Location40415, f"BSON field '{command}.{key}' is an unknown field."
            )
        values[entry[0]] = _convert(command, entry[1], value)
    for attr, a in by_name.values():
        if a.required and attr not in values:
            raise CommandError(
                ErrorCode.Location40414,
                f"BSON field '{command}.{a.name}' is missing but a required field",
            )
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class NoParams:
    """For commands that take nothing but their own field (and the generic ones); extra fields are
    ignored, as MongoDB does for its simple diagnostic commands."""


def extract_lenient(cls: type[P], command: str, body: Mapping[str, Any]) -> P:
    """Like extract, but unknown fields are ignored (handshake and diagnostic commands, which
    drivers and tools send with fields that vary by version)."""
    known = _args_of(cls)
    trimmed = {
        k: v for i, (k, v) in enumerate(body.items()) if i == 0 or k in known or k in GENERIC_FIELDS
    }
    return extract(cls, command, trimmed)
