"""Command arguments: each command declares a frozen dataclass whose fields say which BSON field
they come from, of what kind, and what rules their values follow (unsupported, refused unless
default, non-negative, a valid collation, ...); `extract` is the one place a command document
becomes that object, and so the one place that answers 40415, 40414, 14 and those rules' refusals."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import bson
from bson import Code, Decimal128, Int64

from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.storage.core.collation import parse_collation
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_decimal, type_name

#: Fields every command may carry that the extractor lets through: sessions, concerns, read
#: preference, API versioning, comments, server-side timeouts, driver metadata. The dispatcher acts
#: on some before extraction: the write concern (server/write_concern.py) and a session's
#: transaction fields, which a standalone server refuses (server/transactions.py).
GENERIC_FIELDS = frozenset(
    {
        "$db",
        "lsid",
        "$clusterTime",
        "txnNumber",
        "autocommit",
        "startTransaction",
        # A statement's id in its transaction, and a write command's statements' ids (mongod's
        # drivers' own retries use them; here accepted and ignored, a statement's index being
        # its id).
        "stmtId",
        "stmtIds",
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
    """What a field holds: the BSON types it takes (14 TypeMismatch for others) and how its value
    is converted."""

    ANY = "any"
    STRING = "string"
    #: The collection a command names (its own value), as MongoDB's IDL parses one: another type
    #: is 2 BadValue "collection name has invalid type <type>".
    COLLECTION = "collection name"
    #: The same for the commands mongod parses by hand (count, distinct, validate, collStats,
    #: convertToCapped, cloneCollectionAsCapped): 73 InvalidNamespace with that message.
    COLLECTION_BY_HAND = "collection name, parsed by hand"
    INT = "int"  # any number, as a Python int (fractions truncated, as MongoDB's IDL does)
    NUMBER = "number"  # any number, as given
    BOOL = "bool"  # bool or number, as MongoDB's "safeBool"
    STRICT_BOOL = "strict bool"  # a bool, nothing else
    DOC = "object"
    DOCS = "array of objects, decoded"
    RAW_DOCS = "array of objects, as BSON bytes"
    ARRAY = "array"
    STRING_OR_DOC = "string or object"
    #: A string, an object, or an array of strings (an index by name, key pattern or names).
    STRING_OR_DOC_OR_STRINGS = "string, object or array of strings"
    #: A collation document (checked by storage/core/collation.py: MongoDB's codes for a bad one).
    COLLATION = "collation"
    CURSOR_ID = "long"  # a cursor id: a long, kept as an Int64
    CURSOR_IDS = "array of longs"


_EXPECTED = {
    Kind.STRING: "type 'string'",
    Kind.COLLECTION: "type 'string'",
    Kind.COLLECTION_BY_HAND: "type 'string'",
    Kind.INT: "types '[long, int, decimal, double]'",
    Kind.NUMBER: "types '[long, int, decimal, double]'",
    Kind.BOOL: "types '[bool, long, int, decimal, double]'",
    Kind.STRICT_BOOL: "type 'bool'",
    Kind.DOC: "type 'object'",
    Kind.DOCS: "type 'array'",
    Kind.RAW_DOCS: "type 'array'",
    Kind.ARRAY: "type 'array'",
    Kind.STRING_OR_DOC: "types '[string, object]'",
    Kind.STRING_OR_DOC_OR_STRINGS: "types '[string, object, array]'",
    Kind.COLLATION: "type 'object'",
    Kind.CURSOR_ID: "type 'long'",
    Kind.CURSOR_IDS: "type 'array'",
}

#: How MongoDB's IDL words a value of the wrong type (14 TypeMismatch): {field} is the field's path,
#: {found} the value's BSON type, {expected} the kind's.
IDL_MISMATCH = "BSON field '{field}' is the wrong type '{found}', expected {expected}"
#: The same without the type found: the wording clients have always had from ebbdb for some
#: fields (cursor ids, collMod's index, dropIndexes' index), kept as they see it.
TERSE_MISMATCH = "BSON field '{field}' is the wrong type, expected {expected}"


class DocSequence(list):  # type: ignore[type-arg]
    """An OP_MSG kind-1 document sequence merged into the arguments: a list of raw BSON documents."""


class Check:
    """A rule on a given field's value, run once the whole command is extracted (so unknown
    fields, missing ones and wrong types are reported first), in the order the fields are
    declared. A refused value raises `code` with `message`, in which {field} is the field's name,
    {command} the command's (or, in a nested document, the path to it: `collMod.index`), {value}
    the value and {count} its number of items."""

    code: ErrorCode
    message: str

    def refuses(self, value: Any, default: Any) -> bool:
        raise NotImplementedError

    def error(self, command: str, field: str, value: Any) -> CommandError:
        count = len(value) if isinstance(value, (list, tuple)) else None
        message = self.message.format(command=command, field=field, value=value, count=count)
        return CommandError(self.code, message)


@dataclasses.dataclass(frozen=True)
class Unsupported(Check):
    """An option ebbdb does not implement (238 NotImplemented): refused whenever the command
    gives it, unless its value is one of `accept`."""

    message: str
    accept: tuple[Any, ...] = ()
    code: ErrorCode = ErrorCode.NotImplemented

    def refuses(self, value: Any, default: Any) -> bool:
        return value not in self.accept


@dataclasses.dataclass(frozen=True)
class RefusedUnlessDefault(Unsupported):
    """An option ebbdb does not implement, accepted when given its default value (`tailable:
    false`, or one of `accept`), refused otherwise (238 NotImplemented)."""

    def refuses(self, value: Any, default: Any) -> bool:
        return bool(value != default) and value not in self.accept


@dataclasses.dataclass(frozen=True)
class NonNegative(Check):
    """A number that must not be negative. Commands word this differently (find's skip, count's
    skip), so each field says how."""

    message: str
    code: ErrorCode = ErrorCode.BadValue

    def refuses(self, value: Any, default: Any) -> bool:
        return value is not None and bool(value < 0)


@dataclasses.dataclass(frozen=True)
class OneOf(Check):
    """A value that must be one of `values`."""

    values: tuple[Any, ...]
    message: str
    code: ErrorCode = ErrorCode.FailedToParse

    def refuses(self, value: Any, default: Any) -> bool:
        return value not in self.values


@dataclasses.dataclass(frozen=True)
class ItemCount(Check):
    """An array of `low` to `high` items."""

    low: int
    high: int
    message: str
    code: ErrorCode = ErrorCode.BadValue

    def refuses(self, value: Any, default: Any) -> bool:
        return not self.low <= len(value) <= self.high


class _ValidCollation(Check):
    """A collation document MongoDB accepts (storage/core/collation.py says which, with its codes);
    `{}` gives none."""

    code = ErrorCode.BadValue
    message = ""

    def refuses(self, value: Any, default: Any) -> bool:
        return bool(value) and self._failure(value) is not None

    def error(self, command: str, field: str, value: Any) -> CommandError:
        exc = self._failure(value)
        assert exc is not None
        return CommandError(ErrorCode[exc.code_name], exc.message)

    @staticmethod
    def _failure(value: Any) -> QueryError | None:
        try:
            parse_collation(value)
        except QueryError as exc:
            return exc
        return None


#: The checks a kind brings with it, before any the field declares.
_KIND_CHECKS: dict[Kind, tuple[Check, ...]] = {Kind.COLLATION: (_ValidCollation(),)}


@dataclasses.dataclass(frozen=True)
class Arg:
    name: str
    kind: Kind
    required: bool = False
    #: null is accepted whatever the kind (the field's value is then None).
    nullable: bool = False
    #: The message for a value of the wrong type (IDL_MISMATCH, TERSE_MISMATCH or MongoDB's own).
    mismatch: str = IDL_MISMATCH
    check: Check | None = None
    #: For the REST field: the only names it collects (others are unknown fields, 40415).
    only: frozenset[str] | None = None
    #: For a DOC or DOCS field: the params class each document is extracted into (its fields'
    #: paths are `command.field.name`).
    of: type | None = None


def arg(
    name: str,
    kind: Kind,
    default: Any = None,
    *,
    required: bool = False,
    nullable: bool = False,
    mismatch: str = IDL_MISMATCH,
    check: Check | None = None,
    only: Collection[str] | None = None,
    of: type | None = None,
) -> Any:
    """Declare a parameter field: `name` is the BSON field (COMMAND_VALUE for the command's value,
    REST for a dict of the fields no other one declares, or of the `only` ones), `kind` its type
    and conversion, `check` a rule on its value (unsupported, refused unless default,
    non-negative, one of, how many items), run after the whole command is extracted, and `of`
    the params class of a nested document (or of each one of an array)."""
    only_names = None if only is None else frozenset(only)
    a = Arg(name, kind, required, nullable, mismatch, check, only_names, of)
    return dataclasses.field(default=default, metadata={"arg": a})


def group(of: type) -> Any:
    """Declare a group of fields that several commands share (create's and collMod's validation
    options), declared once as a params class `of`: its fields are read as the command's own, in
    the group's place among them (same names, conversions and checks, in that order), into one
    `of` object; given none of them, the command's field is `of()`."""
    return dataclasses.field(default=of(), metadata={"group": of})


P = TypeVar("P")


def _to_int(v: Any) -> int:
    return int(to_decimal(v))  # truncated; raises ValueError for NaN, OverflowError for infinity


def type_mismatch(field: str, value: Any, kind: Kind, wording: str = IDL_MISMATCH) -> CommandError:
    """14 TypeMismatch for `value` at the path `field`, which should be of `kind`."""
    return CommandError(
        ErrorCode.TypeMismatch,
        wording.format(field=field, found=type_name(value), expected=_EXPECTED[kind]),
    )


def _wrong_type(command: str, a: Arg, value: Any) -> CommandError:
    field = a.name if a.name != COMMAND_VALUE else command
    return type_mismatch(f"{command}.{field}", value, a.kind, a.mismatch)


def _as_any(command: str, a: Arg, value: Any) -> Any:
    return value


_Converter = Callable[[str, Arg, Any], Any]


def _of_types(*types: type) -> Callable[[str, Arg, Any], Any]:
    """The converter for a kind whose values are taken as they are: those of `types` (the first
    one tested first, by exact type: what drivers send). BSON's JavaScript code is no string,
    though pymongo's Code is a str subclass."""
    exact = types[0]

    def convert(command: str, a: Arg, value: Any) -> Any:
        if type(value) is exact or (isinstance(value, types) and not isinstance(value, Code)):
            return value
        raise _wrong_type(command, a, value)

    return convert


def _collection_name(code: ErrorCode) -> _Converter:
    """The converter of a collection name: a string (BSON's JavaScript code is not one, though
    pymongo decodes it as a str subclass), else `code` with mongod's message."""

    def convert(command: str, a: Arg, value: Any) -> Any:
        if type(value) is str:
            return value
        raise CommandError(code, f"collection name has invalid type {type_name(value)}")

    return convert


def _as_int(command: str, a: Arg, value: Any) -> Any:
    if type(value) is int:  # what drivers send
        return value
    if type(value) is Int64:
        return int(value)
    if is_number(value):
        try:
            result = _to_int(value)
        except (ValueError, OverflowError):
            raise CommandError(
                ErrorCode.BadValue, f"BSON field '{command}.{a.name}' must be a finite number"
            ) from None
        # Past the 64-bit range, MongoDB's safeNumberLong gives its nearest bound.
        return min(max(result, -(2**63)), 2**63 - 1)
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


def _as_number(command: str, a: Arg, value: Any) -> Any:
    if is_number(value):
        return value
    raise _wrong_type(command, a, value)


def _as_cursor_ids(command: str, a: Arg, value: Any) -> Any:
    if not isinstance(value, list):
        raise _wrong_type(command, a, value)
    if {Int64}.issuperset(map(type, value)):  # at C speed: killCursors may name 500,000
        return value
    for item in value:
        if not isinstance(item, Int64):
            # Every item's error names the array, in the words ebbdb has always used.
            raise type_mismatch(f"{command}.{a.name}", item, Kind.CURSOR_ID, TERSE_MISMATCH)
    return value


def _as_string_or_doc_or_strings(command: str, a: Arg, value: Any) -> Any:
    if isinstance(value, list):
        if not all(type(item) is str for item in value):
            raise CommandError(
                ErrorCode.TypeMismatch, f"{command} '{a.name}' array must contain only strings"
            )
        return value
    if type(value) is str or isinstance(value, Mapping):
        return value
    raise _wrong_type(command, a, value)


def _as_documents(command: str, a: Arg, value: Any) -> Any:
    if isinstance(value, list):
        return _documents(command, a, value)
    raise _wrong_type(command, a, value)


#: One converter per kind: checks the type (14 TypeMismatch) and converts as MongoDB's IDL does.
_CONVERTERS: dict[Kind, _Converter] = {
    Kind.ANY: _as_any,
    Kind.STRING: _of_types(str),
    Kind.COLLECTION: _collection_name(ErrorCode.BadValue),
    Kind.COLLECTION_BY_HAND: _collection_name(ErrorCode.InvalidNamespace),
    Kind.INT: _as_int,
    Kind.NUMBER: _as_number,
    Kind.BOOL: _as_bool,
    Kind.STRICT_BOOL: _of_types(bool),
    Kind.DOC: _of_types(dict, Mapping),
    Kind.DOCS: _as_documents,
    Kind.RAW_DOCS: _as_documents,
    Kind.ARRAY: _of_types(list),
    Kind.STRING_OR_DOC: _of_types(str, Mapping),
    Kind.STRING_OR_DOC_OR_STRINGS: _as_string_or_doc_or_strings,
    Kind.COLLATION: _of_types(dict, Mapping),
    Kind.CURSOR_ID: _of_types(Int64),
    Kind.CURSOR_IDS: _as_cursor_ids,
}


def _nullable(convert: _Converter) -> _Converter:
    def converter(command: str, a: Arg, value: Any) -> Any:
        return None if value is None else convert(command, a, value)

    return converter


def _nested(convert: _Converter) -> _Converter:
    """The converter of a field declared `of` a params class: each document is extracted."""

    def converter(command: str, a: Arg, value: Any) -> Any:
        value = convert(command, a, value)
        assert a.of is not None
        path = f"{command}.{a.name}"
        if a.kind is Kind.DOC:
            return _extract(a.of, path, value, True, False)
        return tuple(_extract(a.of, path, doc, True, False) for doc in value)

    return converter


_ONLY_BYTES = frozenset({bytes})


def _documents(command: str, a: Arg, items: list[Any]) -> tuple[Any, ...]:
    raw = a.kind is Kind.RAW_DOCS
    if raw and type(items) is DocSequence and _ONLY_BYTES.issuperset(map(type, items)):
        return tuple(items)  # a wire document sequence's items: BSON bytes already
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
            raise type_mismatch(f"{command}.{a.name}.{i}", item, Kind.DOC)
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
    #: The declared checks, in declaration order: (attribute, field name, check, default).
    checks: tuple[tuple[str, str, Check, Any], ...]
    checked: frozenset[str]  # the attributes that have checks
    #: The field groups (see `group`): (attribute, params class). Their fields' attributes above
    #: are "attribute.field"; extract builds each group's object from them.
    groups: tuple[tuple[str, type], ...]
    #: Every field's default, when all have plain ones and nothing runs after __init__: the object
    #: is then built from these and the values given, without the frozen __init__ (which sets
    #: every field, given or not, one object.__setattr__ at a time). None: build through __init__.
    defaults: dict[str, Any] | None


_TABLES: dict[type, _Table] = {}


def _table(cls: type) -> _Table:
    found = _TABLES.get(cls)
    if found is None:
        by_name: dict[str, _Entry] = {}
        checks: list[tuple[str, str, Check, Any]] = []
        groups: list[tuple[str, type]] = []
        defaults: dict[str, Any] | None = {}
        for f in dataclasses.fields(cls):
            members = [(f.name, f)]
            if "group" in f.metadata:
                groups.append((f.name, f.metadata["group"]))
                members = [
                    (f"{f.name}.{m.name}", m) for m in dataclasses.fields(f.metadata["group"])
                ]
            for attr, member in members:
                a = member.metadata.get("arg")
                if a is None:
                    continue
                convert = _CONVERTERS[a.kind]
                if a.of is not None:
                    convert = _nested(convert)
                if a.nullable:
                    convert = _nullable(convert)
                by_name[a.name] = (attr, a, convert)
                for check in (*_KIND_CHECKS.get(a.kind, ()), *((a.check,) if a.check else ())):
                    checks.append((attr, a.name, check, member.default))
            if defaults is not None and f.init and f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            else:
                defaults = None
        if hasattr(cls, "__post_init__") or "__slots__" in vars(cls):
            defaults = None
        required = tuple((attr, a) for attr, a, _ in by_name.values() if a.required)
        found = _Table(
            by_name,
            by_name.get(COMMAND_VALUE),
            by_name.get(REST),
            required,
            tuple(checks),
            frozenset(attr for attr, *_ in checks),
            tuple(groups),
            defaults,
        )
        _TABLES[cls] = found
    return found


_SENTINELS = frozenset({COMMAND_VALUE, REST})


def extract(cls: type[P], command: str, body: Mapping[str, Any], *, nested: bool = False) -> P:
    """Build `cls` from a command document (or, `nested`, from a document inside one, such as an
    update statement, where `command` is the path to it and no field is the command's own).
    Raises CommandError: 40415 for an unknown field, 40414 for a missing required one,
    14 TypeMismatch for a value of the wrong type; then, once all fields are read, whatever the
    first failing declared check raises (238 NotImplemented for an unsupported option,
    MongoDB's codes for a bad collation document, a field's own code and message for a value
    out of range)."""
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
        # A client's field named like a sentinel ("$command", "*") is an ordinary field.
        entry = None if key in _SENTINELS else by_name.get(key)
        if entry is None:
            if lenient or key in GENERIC_FIELDS:
                continue
            rest = table.rest
            if rest is not None and (rest[1].only is None or key in rest[1].only):
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
    if not table.checked.isdisjoint(values):  # most commands give no checked field
        for attr, name, check, default in table.checks:
            if attr in values:
                value = values[attr]
                if check.refuses(value, default):
                    raise check.error(command, name, value)
    for attr, of in table.groups:
        prefix = f"{attr}."
        given = {k[len(prefix) :]: values.pop(k) for k in list(values) if k.startswith(prefix)}
        if given:
            values[attr] = of(**given)
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


#: The most statements (or documents) one write command may carry; hello reports it.
MAX_WRITE_BATCH_SIZE = 100_000
