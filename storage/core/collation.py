"""Collations (MongoDB's ICU string comparison): parsing and validating a collation document with
MongoDB's codes and messages, its normalised form (what listIndexes and listCollections show), and
the one translation everything else uses: a string becomes its ICU sort key, so that comparing keys
is comparing the strings under the collation.

The simple collation is None everywhere: code that meets None does exactly what it did before
collations existed, so only a non-simple collation pays for one. A key is the ICU sort key's bytes
as a latin-1 `str` (one character per byte): it stays a string to the matcher, the sort and the
index key encoding, and its code point order is the sort key's byte order.

PyICU is imported by the first collation that is not the simple one, not at start; a filter's
comparisons are built under a collation as it is parsed (storage/query/match_leaves.py)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from bson.raw_bson import RawBSONDocument

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import render, type_name

#: The collator version MongoDB 7.0 reports (its bundled ICU's); a collation document asking for
#: another version is refused, as MongoDB refuses one its ICU cannot give.
VERSION = "57.1"

#: MongoDB's strengths, caseFirst and alternate values: the names of ICU's attribute values.
_STRENGTHS = {1: "PRIMARY", 2: "SECONDARY", 3: "TERTIARY", 4: "QUATERNARY", 5: "IDENTICAL"}
_CASE_FIRST = {"upper": "UPPER_FIRST", "lower": "LOWER_FIRST", "off": "OFF"}
_ALTERNATE = {"non-ignorable": "NON_IGNORABLE", "shifted": "SHIFTED"}
_FIELDS = (
    "locale",
    "caseLevel",
    "caseFirst",
    "strength",
    "numericOrdering",
    "alternate",
    "maxVariable",
    "normalization",
    "backwards",
    "version",
)


class _Icu(NamedTuple):
    """PyICU, with MongoDB's options as ICU's attribute values and back."""

    icu: Any
    attribute: Any  # icu.UCollAttribute
    value: Any  # icu.UCollAttributeValue
    strengths: dict[int, Any]
    strength_of: dict[int, int]
    case_first: dict[str, Any]
    case_first_of: dict[int, str]
    alternate: dict[str, Any]
    alternate_of: dict[int, str]


@functools.cache
def _icu() -> _Icu:
    """PyICU, imported here by the first collation that needs it."""
    import icu

    v = icu.UCollAttributeValue

    def values(names: Mapping[Any, str]) -> dict[Any, Any]:
        return {option: getattr(v, name) for option, name in names.items()}

    strengths, case_first, alternate = values(_STRENGTHS), values(_CASE_FIRST), values(_ALTERNATE)
    return _Icu(
        icu,
        icu.UCollAttribute,
        v,
        strengths,
        {int(x): k for k, x in strengths.items()},
        case_first,
        {int(x): k for k, x in case_first.items()},
        alternate,
        {int(x): k for k, x in alternate.items()},
    )


@dataclass(frozen=True)
class Collation:
    """A non-simple collation, every option resolved (the locale's defaults for those not given)."""

    locale: str
    case_level: bool
    case_first: str
    strength: int
    numeric_ordering: bool
    alternate: str
    max_variable: str
    normalization: bool
    backwards: bool

    def document(self) -> dict[str, Any]:
        """The collation as MongoDB echoes it: every field, in its order, with the version."""
        return dict(zip(_FIELDS, (*dataclasses.astuple(self), VERSION)))

    @functools.cached_property
    def _sort_key(self) -> Any:
        return _make_collator(self).getSortKey

    def key(self, s: str) -> str:
        """The string's sort key: equal keys for strings the collation finds equal, and keys in
        the collation's order. The trailing NUL ICU adds is left out (the order is the same)."""
        key: bytes = self._sort_key(s)
        return key[:-1].decode("latin-1")

    def collate(self, value: Any) -> Any:
        """`value` with every string in it (in documents and arrays, not field names) replaced
        by its key: values compare under the collation as their collated forms compare under
        the simple one."""
        t = type(value)
        if t is str:
            return self.key(value)
        if t is dict or t is RawBSONDocument:
            return {k: self.collate(v) for k, v in value.items()}
        if t is list:
            return [self.collate(v) for v in value]
        return value


def _make_collator(c: Collation) -> Any:
    t = _icu()
    a = t.attribute
    name = c.locale
    if c.max_variable == "space":
        # PyICU has no setMaxVariable; ICU takes it as the locale keyword `kv`.
        name += (";" if "@" in name else "@") + "kv=space"
    collator = t.icu.Collator.createInstance(t.icu.Locale.createFromName(name))
    on_off = {True: t.value.ON, False: t.value.OFF}
    collator.setAttribute(a.CASE_LEVEL, on_off[c.case_level])
    collator.setAttribute(a.CASE_FIRST, t.case_first[c.case_first])
    collator.setAttribute(a.STRENGTH, t.strengths[c.strength])
    collator.setAttribute(a.NUMERIC_COLLATION, on_off[c.numeric_ordering])
    collator.setAttribute(a.ALTERNATE_HANDLING, t.alternate[c.alternate])
    collator.setAttribute(a.NORMALIZATION_MODE, on_off[c.normalization])
    collator.setAttribute(a.FRENCH_COLLATION, on_off[c.backwards])
    return collator


# -- parsing ----------------------------------------------------------------------------------------


def _wrong_type(name: str, expected: str, value: Any) -> QueryError:
    return QueryError(
        "TypeMismatch",
        f'"{name}" had the wrong type. Expected {expected}, found {type_name(value)}',
    )


def _bool(spec: Mapping[str, Any], name: str, default: bool) -> bool:
    if name not in spec:
        return default
    value = spec[name]
    if type(value) is not bool:
        raise _wrong_type(name, "bool", value)
    return value


def _choice(spec: Mapping[str, Any], name: str, default: str, allowed: tuple[str, ...]) -> str:
    if name not in spec:
        return default
    value = spec[name]
    if type(value) is not str:
        raise _wrong_type(name, "string", value)
    if value not in allowed:
        quoted = [f"'{a}'" for a in allowed]
        wording = (
            f"{', '.join(quoted[:-1])}, or {quoted[-1]}" if len(quoted) > 2 else " or ".join(quoted)
        )
        raise QueryError("FailedToParse", f"Field '{name}' must be {wording}. Got: {value}")
    return value


def _strength(spec: Mapping[str, Any], default: int) -> int:
    if "strength" not in spec:
        return default
    value = spec["strength"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if type(value).__name__ not in ("Int64", "Decimal128"):
            raise QueryError(
                "TypeMismatch",
                f'Expected field "strength" to have numeric type, but found {type_name(value)}',
            )
    try:
        n = int(value.to_decimal() if hasattr(value, "to_decimal") else value)
        exact = n == (value.to_decimal() if hasattr(value, "to_decimal") else value)
    except (ValueError, OverflowError):
        exact = False
    if not exact:
        raise QueryError(
            "BadValue",
            'Expected field "strength" to have a value exactly representable as a 64-bit '
            f"integer, but found strength: {render(value)}",
        )
    if n not in _STRENGTHS:
        raise QueryError(
            "FailedToParse", f"Field 'strength' must be an integer 1 through 5. Got: {n}"
        )
    return n


def _locale(spec: Mapping[str, Any]) -> str:
    if "locale" not in spec:
        raise QueryError("NoSuchKey", 'Missing expected field "locale"')
    locale = spec["locale"]
    if type(locale) is not str:
        raise _wrong_type("locale", "string", locale)
    if "\x00" in locale:
        raise QueryError(
            "BadValue", f"Field 'locale' cannot contain null byte. Collation spec: {render(spec)}"
        )
    return locale


def parse_collation(spec: Mapping[str, Any]) -> Collation | None:
    """The collation a non-empty collation document asks for; None for the simple one
    (`{locale: "simple"}`). Raises QueryError with MongoDB's codes: NoSuchKey (no locale),
    TypeMismatch, BadValue (an unknown or non-canonical locale, a strength that is not an
    integer, options that cannot go together), FailedToParse (an option's value, an unknown
    field), IncompatibleCollationVersion (a version other than the one reported)."""
    try:
        cache_key: Any = tuple((k, type(v), v) for k, v in spec.items())
        hash(cache_key)
    except TypeError:
        return _parse(spec)
    if cache_key in _PARSED:
        return _PARSED[cache_key]
    found = _parse(spec)
    if len(_PARSED) >= 1024:
        _PARSED.clear()
    _PARSED[cache_key] = found
    return found


#: Collation documents already parsed (a client sends the same few over and over); emptied when
#: it grows past 1024, so a client inventing documents cannot grow it for ever.
_PARSED: dict[Any, Collation | None] = {}


def _parse(spec: Mapping[str, Any]) -> Collation | None:
    locale = _locale(spec)
    if locale == "simple":
        if len(spec) > 1:
            raise QueryError(
                "FailedToParse",
                f"If locale=simple, no other fields should be present in: {render(spec)}",
            )
        return None
    if not locale:
        raise QueryError(
            "BadValue", f"Field 'locale' cannot be the empty string in: {render(spec)}"
        )
    t = _icu()
    a = t.attribute
    icu_locale = t.icu.Locale.createFromName(locale)
    if icu_locale.isBogus():
        raise QueryError("BadValue", f"Field 'locale' is not valid in: {render(spec)}")
    collator = t.icu.Collator.createInstance(icu_locale)
    valid = collator.getLocale(t.icu.ULocDataLocaleType.VALID_LOCALE).getName()
    if valid != locale:
        # ICU would have used another locale (or the root one): MongoDB names it, if any.
        hint = f". Did you mean '{valid}'?" if valid and valid != "root" else ""
        raise QueryError("BadValue", f"Field 'locale' is invalid in: {render(spec)}{hint}")
    on = int(t.value.ON)
    case_level = _bool(spec, "caseLevel", int(collator.getAttribute(a.CASE_LEVEL)) == on)
    case_first = _choice(
        spec,
        "caseFirst",
        t.case_first_of[int(collator.getAttribute(a.CASE_FIRST))],
        ("upper", "lower", "off"),
    )
    strength = _strength(spec, t.strength_of[int(collator.getAttribute(a.STRENGTH))])
    numeric = _bool(spec, "numericOrdering", int(collator.getAttribute(a.NUMERIC_COLLATION)) == on)
    alternate = _choice(
        spec,
        "alternate",
        t.alternate_of[int(collator.getAttribute(a.ALTERNATE_HANDLING))],
        ("non-ignorable", "shifted"),
    )
    max_variable = _choice(spec, "maxVariable", "punct", ("punct", "space"))
    normalization = _bool(
        spec, "normalization", int(collator.getAttribute(a.NORMALIZATION_MODE)) == on
    )
    backwards = _bool(spec, "backwards", int(collator.getAttribute(a.FRENCH_COLLATION)) == on)
    if "version" in spec:
        version = spec["version"]
        if type(version) is not str:
            raise _wrong_type("version", "string", version)
        if version != VERSION:
            raise QueryError(
                "IncompatibleCollationVersion",
                f"Requested collation version {version} but the only available collator version "
                f"was {VERSION}. Requested collation spec: {render(spec)}",
            )
    if any(k not in _FIELDS for k in spec):
        raise QueryError(
            "FailedToParse",
            f"Collation spec contains unknown field. Collation spec: {render(spec)}",
        )
    c = Collation(
        locale,
        case_level,
        case_first,
        strength,
        numeric,
        alternate,
        max_variable,
        normalization,
        backwards,
    )
    if backwards and strength == 1:
        raise QueryError(
            "BadValue", f"'backwards' is invalid with 'strength' of 1 in: {render(c.document())}"
        )
    if case_first != "off" and not case_level and strength <= 2:
        raise QueryError(
            "BadValue",
            "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 "
            f"in: {render(c.document())}",
        )
    return c


class _HasCollation(Protocol):
    @property
    def collation(self) -> Collation | None: ...


def resolve(given: Mapping[str, Any] | None, coll: _HasCollation | None) -> Collation | None:
    """The collation an operation runs with: the one it gives (an empty document gives none),
    else the default of `coll` (its CollectionInfo; None: no such collection, simple)."""
    if given:
        return parse_collation(given)
    return None if coll is None else coll.collation


def normalise(given: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a collection or an index stores for a collation document: the normalised document,
    or None for the simple collation."""
    c = parse_collation(given)
    return None if c is None else c.document()


# -- values ------------------------------------------------------------------------------------------


def has_string(value: Any) -> bool:
    """Whether a value holds a string anywhere (only such values compare differently under
    different collations)."""
    t = type(value)
    if t is str:
        return True
    if isinstance(value, Mapping):
        return any(has_string(v) for v in value.values())
    if t is list:
        return any(has_string(v) for v in value)
    return False
