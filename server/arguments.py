"""Command arguments: each command declares a frozen dataclass whose fields say which BSON field
they come from and of what kind; `extract` is the one place a command document becomes that object."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import bson
from bson import Decimal128

from server.errors import CommandError, ErrorCode
from storage.documents import CODEC
from storage.values import is_number, type_name

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


@dataclasses.dataclass(frozen=True)
class Arg:
    name: str
    kind: Kind
    required: bool = False


def arg(name: str, kind: Kind, default: Any = None, *, required: bool = False) -> Any:
    """Declare a parameter field: `name` is the BSON field (COMMAND_VALUE for the command's value)."""
    return dataclasses.field(default=default, metadata={"arg": Arg(name, kind, required)})


P = TypeVar("P")


def _to_int(v: Any) -> int:
    if isinstance(v, Decimal128):
        v = v.to_decimal()
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError
    return int(v)


def _wrong_type(command: str, a: Arg, value: Any) -> CommandError:
    field = a.name if a.name != COMMAND_VALUE else command
    return CommandError(
        ErrorCode.TypeMismatch,
        f"BSON field '{command}.{field}' is the wrong type '{type_name(value)}', "
        f"expected {_EXPECTED[a.kind]}",
    )


def _as_any(command: str, a: Arg, value: Any) -> Any:
    return value


def _as_string(command: str, a: Arg, value: Any) -> Any:
    if type(value) is str or isinstance(value, str):
        return value
    raise _wrong_type(command, a, value)


def _as_int(command: str, a: Arg, value: Any) -> Any:
    if type(value) is int:  # what drivers send
        return value
    if is_number(value):
        try:
            return _to_int(value)
        except (ValueError, OverflowError):
            raise CommandError(
                ErrorCode.BadValue, f"BSON field '{command}.{a.name}' must be a finite number"
            ) from None
    raise _wrong_type(command, a, value)


def _as_bool(command: str, a: Arg, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, Decimal128):
        d = value.to_decimal()
        return bool(d.is_nan() or d != 0)
    if is_number(value):
        return bool(value != 0)
    raise _wrong_type(command, a, value)


def _as_doc(command: str, a: Arg, value: Any) -> Any:
    if type(value) is dict or isinstance(value, Mapping):
        return value
    raise _wrong_type(command, a, value)


def _as_string_or_doc(command: str, a: Arg, value: Any) -> Any:
    if isinstance(value, (str, Mapping)):
        return value
    raise _wrong_type(command, a, value)


def _as_array(command: str, a: Arg, value: Any) -> Any:
    if isinstance(value, list):
        return value
    raise _wrong_type(command, a, value)


def _as_documents(command: str, a: Arg, value: Any) -> Any:
    if isinstance(value, list):
        return _documents(command, a, value)
    raise _wrong_type(command, a, value)


_Converter = Callable[[str, Arg, Any], Any]

#: One converter per kind: checks the type (14 TypeMismatch) and converts as MongoDB's IDL does.
_CONVERTERS: dict[Kind, _Converter] = {
    Kind.ANY: _as_any,
    Kind.STRING: _as_string,
    Kind.INT: _as_int,
    Kind.BOOL: _as_bool,
    Kind.DOC: _as_doc,
    Kind.DOCS: _as_documents,
    Kind.RAW_DOCS: _as_documents,
    Kind.ARRAY: _as_array,
    Kind.STRING_OR_DOC: _as_string_or_doc,
}


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
                f"'{type_name(item)}', expected type 'object'",
            )
    return tuple(out)


#: A declared field: (attribute, Arg, its kind's converter).
_Entry = tuple[str, Arg, _Converter]


@dataclasses.dataclass(frozen=True)
class _Table:
    """What extract needs to know about a params class, computed once per class."""

    by_name: dict[str, _Entry]  # BSON field name -> entry
    command: _Entry | None  # the command's own (first) field
    rest: _Entry | None  # the field collecting unknown ones
    required: tuple[tuple[str, Arg], ...]
    #: Every field's default, when all have plain ones and nothing runs after __init__: the object
    #: is then built from these and the values given, without the frozen __init__ (which sets
    #: every field, given or not, one object.__setattr__ at a time). None: build through __init__.
    defaults: dict[str, Any] | None


_TABLES: dict[type, _Table] = {}


def _table(cls: type) -> _Table:
    found = _TABLES.get(cls)
    if found is None:
        by_name: dict[str, _Entry] = {}
        defaults: dict[str, Any] | None = {}
        for f in dataclasses.fields(cls):
            a = f.metadata.get("arg")
            if a is not None:
                by_name[a.name] = (f.name, a, _CONVERTERS[a.kind])
            if defaults is not None and f.init and f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            else:
                defaults = None
        if hasattr(cls, "__post_init__") or "__slots__" in vars(cls):
            defaults = None
        required = tuple((attr, a) for attr, a, _ in by_name.values() if a.required)
        found = _Table(by_name, by_name.get(COMMAND_VALUE), by_name.get(REST), required, defaults)
        _TABLES[cls] = found
    return found


def extract(cls: type[P], command: str, body: Mapping[str, Any], *, nested: bool = False) -> P:
    """Build `cls` from a command document (or, `nested`, from a document inside one, such as an
    update statement, where `command` is the path to it and no field is the command's own).
    Raises CommandError: 40415 for an unknown field, 40414 for a missing required one,
    14 TypeMismatch for a value of the wrong type."""
    return _extract(cls, command, body, nested, False)


def _extract(cls: type[P], command: str, body: Mapping[str, Any], nested: bool, lenient: bool) -> P:
    table = _table(cls)
    by_name = table.by_name
    values: dict[str, Any] = {}
    items = iter(body.items())
    if not nested:
        for _key, value in items:
            entry = table.command
            if entry is not None:
                values[entry[0]] = entry[2](command, entry[1], value)
            break
    for key, value in items:
        entry = by_name.get(key)
        if entry is None:
            if lenient or key in GENERIC_FIELDS:
                continue
            rest = table.rest
            if rest is not None:
                values.setdefault(rest[0], {})[key] = value
                continue
            raise CommandError(
                ErrorCode.Location40415, f"BSON field '{command}.{key}' is an unknown field."
            )
        values[entry[0]] = entry[2](command, entry[1], value)
    for attr, a in table.required:
        if attr not in values:
            raise CommandError(
                ErrorCode.Location40414,
                f"BSON field '{command}.{a.name}' is missing but a required field",
            )
    defaults = table.defaults
    if defaults is None:
        return cls(**values)
    obj = object.__new__(cls)
    fields = obj.__dict__
    fields.update(defaults)
    fields.update(values)
    return obj


@dataclasses.dataclass(frozen=True)
class NoParams:
    """For commands that take nothing but their own field (and the generic ones); extra fields are
    ignored, as MongoDB does for its simple diagnostic commands."""


def extract_lenient(cls: type[P], command: str, body: Mapping[str, Any]) -> P:
    """Like extract, but unknown fields are ignored (handshake and diagnostic commands, which
    drivers and tools send with fields that vary by version)."""
    return _extract(cls, command, body, False, True)


# -- checks the parameter classes do not declare yet -----------------------------------------------

#: The most statements (or documents) one write command may carry; hello reports it.
MAX_WRITE_BATCH_SIZE = 100_000


def check_write_batch(n: int) -> None:
    """A write command's statements or documents: between 1 and MAX_WRITE_BATCH_SIZE."""
    if not 1 <= n <= MAX_WRITE_BATCH_SIZE:
        raise CommandError(
            ErrorCode.InvalidLength,
            f"Write batch sizes must be between 1 and {MAX_WRITE_BATCH_SIZE}. Got {n} operations.",
        )


def check_collation(collation: Mapping[str, Any] | None) -> None:
    """Only the simple (binary) collation exists in ebbdb."""
    if collation and not (collation.get("locale") == "simple" and len(collation) == 1):
        raise CommandError(ErrorCode.NotImplemented, "only the simple collation is supported")
