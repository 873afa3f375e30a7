"""The one extractor of stage arguments. A stage declares its specification's fields as a class of
`Arguments` (each field's BSON name, kind, whether it is required, how its value is parsed, and the
stage's own error for a wrong type), and `extract` reads a specification into it: field by field in
the order given, then the required ones, with MongoDB's IDL errors (40415 unknown field, 40414
missing field, 14 TypeMismatch) wherever the stage has no words of its own.

The commands' extractor (server/arguments.py) answers the same IDL errors for command documents;
storage may not import the server, and a stage parser reports MongoDB's per-stage codes as well.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from decimal import InvalidOperation
from typing import Any, ClassVar, TypeVar, dataclass_transform

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_decimal, type_name


@dataclasses.dataclass(frozen=True)
class Refusal:
    """The error a stage answers for a broken rule: `code` (a number, MongoDB's `Location<code>`;
    or a codeName) and `message`, in which {path} stands for the field's path, {name} for its name,
    {type} for the BSON type of the value found and {expected} for the kind it should have."""

    code: int | str
    message: str

    def error(self, **words: Any) -> QueryError:
        code = self.code
        text = self.message.format(**words)
        return QueryError(f"Location{code}" if isinstance(code, int) else code, text)


#: MongoDB's IDL errors, for a stage that has no words of its own.
UNKNOWN = Refusal(40415, "BSON field '{path}' is an unknown field.")
MISSING_FIELD = Refusal(40414, "BSON field '{path}' is missing but a required field")
WRONG_TYPE = Refusal(
    "TypeMismatch", "BSON field '{path}' is the wrong type '{type}', expected {expected}"
)


def _safe_int(value: Any, path: str) -> int:
    """IDL's safeInt: any number, the fraction dropped; BadValue for NaN and infinities."""
    try:
        return int(to_decimal(value))
    except (ValueError, OverflowError, InvalidOperation):
        raise QueryError("BadValue", f"BSON field '{path}' must be a finite number") from None


class Kind(enum.Enum):
    """What a field takes: `test` says whether a value is of it, `expected` is how MongoDB's IDL
    names it in a 14 TypeMismatch, and `convert` (value, path) -> argument, if set, how the IDL
    converts the value. A string is one by exact type: pymongo's Code (JavaScript) is a str
    subclass."""

    STRING = ("type 'string'", lambda v: type(v) is str)
    OBJECT = ("type 'object'", lambda v: isinstance(v, Mapping))
    ARRAY = ("type 'array'", lambda v: isinstance(v, list))
    BOOL = ("type 'bool'", lambda v: isinstance(v, bool))
    NUMBER = ("types '[long, int, decimal, double]'", is_number)
    INT = ("types '[long, int, decimal, double]'", is_number, _safe_int)  # IDL's safeInt
    STRING_OR_OBJECT = (
        "type 'string or object'",
        lambda v: type(v) is str or isinstance(v, Mapping),
    )
    #: An array of strings; a wrong item is reported as the whole array's wrong type.
    STRINGS = ("type 'array'", lambda v: isinstance(v, list) and all(type(s) is str for s in v))

    def __init__(
        self,
        expected: str,
        test: Callable[[Any], bool],
        convert: Callable[[Any, str], Any] | None = None,
    ) -> None:
        self.expected = expected
        self.test = test
        self.convert = convert


#: How a field's value becomes the argument: (value, the user variables in scope) -> argument.
Parse = Callable[[Any, frozenset[str]], Any]


@dataclasses.dataclass(frozen=True)
class Arg:
    name: str
    kind: Kind | None  # None: any value
    required: bool
    parse: Parse | None
    #: The stage's own error for a value not of `kind` (None: WRONG_TYPE).
    mismatch: Refusal | None
    #: The kind of each item of an array (a wrong one is reported at the array's path).
    items: Kind | None
    #: null counts as not given: the field keeps its default, and a required one is missing.
    null_is_missing: bool
    #: The Arguments class the field's document is read into (its path: the field's).
    of: type[Arguments] | None


def arg(
    name: str,
    kind: Kind | None = None,
    default: Any = None,
    *,
    required: bool = False,
    parse: Parse | None = None,
    mismatch: Refusal | None = None,
    items: Kind | None = None,
    null_is_missing: bool = False,
    of: type[Arguments] | None = None,
) -> Any:
    """Declare an argument: `name` is the BSON field, `kind` the values it takes (its wrong type is
    `mismatch`, or the IDL's 14), `parse` what its value becomes, run when the field is read (so a
    stage's errors come in the order of the fields given, as MongoDB's parsers report them), `of`
    the Arguments class of a nested document."""
    a = Arg(name, kind, required, parse, mismatch, items, null_is_missing, of)
    return dataclasses.field(default=default, metadata={"arg": a})


@dataclass_transform(frozen_default=True)
class Arguments:
    """A stage's specification, parsed: a frozen dataclass of `arg` fields. The class keywords give
    the stage's own errors for a specification that is not a document, an unknown field and a
    missing one (a stage that reports all its required fields together gives one message for
    them), or, `lenient`, unknown fields are ignored."""

    not_document: ClassVar[Refusal] = WRONG_TYPE
    unknown: ClassVar[Refusal] = UNKNOWN
    missing: ClassVar[Refusal] = MISSING_FIELD
    lenient: ClassVar[bool] = False
    _args: ClassVar[dict[str, tuple[str, Arg]]] = {}

    def __init_subclass__(
        cls,
        not_document: Refusal = WRONG_TYPE,
        unknown: Refusal = UNKNOWN,
        missing: Refusal = MISSING_FIELD,
        lenient: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.not_document, cls.unknown, cls.missing = not_document, unknown, missing
        cls.lenient = lenient
        dataclasses.dataclass(frozen=True)(cls)
        cls._args = {
            f.metadata["arg"].name: (f.name, f.metadata["arg"])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        }


A = TypeVar("A", bound=Arguments)


def extract(cls: type[A], path: str, spec: Any, defined: frozenset[str] = frozenset()) -> A:
    """`spec`, the document at `path` (a stage's name, or a path within its specification), read
    into `cls`. Raises QueryError: the class's `not_document` error; then, for each field in
    the order given, the class's `unknown` error, the field's wrong type, or what its `parse`
    raises; then the class's `missing` error for the first required field not given."""
    if not isinstance(spec, Mapping):
        expected = Kind.OBJECT.expected
        raise cls.not_document.error(path=path, type=type_name(spec), expected=expected)
    args = cls._args
    values: dict[str, Any] = {}
    for name, value in spec.items():
        entry = args.get(name)
        if entry is None:
            if cls.lenient:
                continue
            raise cls.unknown.error(path=f"{path}.{name}", name=name)
        attr, a = entry
        if value is None and a.null_is_missing:
            continue
        kind = a.kind
        if kind is not None:
            _check(a, kind, f"{path}.{name}", value)
            if a.items is not None:
                for item in value:
                    _check(a, a.items, f"{path}.{name}", item)
            if kind.convert is not None:
                value = kind.convert(value, f"{path}.{name}")
        if a.of is not None:
            value = extract(a.of, f"{path}.{name}", value, defined)
        values[attr] = value if a.parse is None else a.parse(value, defined)
    for attr, a in args.values():
        if a.required and attr not in values:
            raise cls.missing.error(path=f"{path}.{a.name}", name=a.name)
    return cls(**values)


def _check(a: Arg, kind: Kind, path: str, value: Any) -> None:
    if not kind.test(value):
        refusal = WRONG_TYPE if a.mismatch is None else a.mismatch
        raise refusal.error(path=path, name=a.name, type=type_name(value), expected=kind.expected)
