"""Collations (MongoDB's ICU string comparison): parsing and validating a collation document with
MongoDB's codes and messages, its normalised form (what listIndexes and listCollections show), and
the one translation everything else uses: a string becomes its ICU sort key, so that comparing keys
is comparing the strings under the collation.

The simple collation is None everywhere: code that meets None does exactly what it did before
collations existed, so only a non-simple collation pays for one. A key is the ICU sort key's bytes
as a latin-1 `str` (one character per byte): it stays a string to the matcher, the sort and the
index key encoding, and its code point order is the sort key's byte order."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import icu
from bson.raw_bson import RawBSONDocument

from ebbdb.storage.errors import QueryError
from ebbdb.storage.query.match import (
    elem_match_object_test,
    elem_match_value_test,
    element_test,
    node_predicate,
)
from ebbdb.storage.query.match_leaves import (
    eq_test,
    in_test,
    is_regex,
    range_test,
    regex_source,
    regex_test,
)
from ebbdb.storage.query.match_tree import (
    All,
    And,
    Compare,
    ElemMatchObject,
    ElemMatchValue,
    In,
    Node,
    Nor,
    Not,
    Or,
    ParsedFilter,
)
from ebbdb.storage.values import render, type_name

#: The collator version MongoDB 7.0 reports (its bundled ICU's); a collation document asking for
#: another version is refused, as MongoDB refuses one its ICU cannot give.
VERSION = "57.1"

_A = icu.UCollAttribute
_V = icu.UCollAttributeValue
_STRENGTHS = {1: _V.PRIMARY, 2: _V.SECONDARY, 3: _V.TERTIARY, 4: _V.QUATERNARY, 5: _V.IDENTICAL}
_STRENGTH_OF = {int(v): k for k, v in _STRENGTHS.items()}
_CASE_FIRST = {"upper": _V.UPPER_FIRST, "lower": _V.LOWER_FIRST, "off": _V.OFF}
_CASE_FIRST_OF = {int(v): k for k, v in _CASE_FIRST.items()}
_ALTERNATE = {"non-ignorable": _V.NON_IGNORABLE, "shifted": _V.SHIFTED}
_ALTERNATE_OF = {int(v): k for k, v in _ALTERNATE.items()}
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
    name = c.locale
    if c.max_variable == "space":
        # PyICU has no setMaxVariable; ICU takes it as the locale keyword `kv`.
        name += (";" if "@" in name else "@") + "kv=space"
    collator = icu.Collator.createInstance(icu.Locale.createFromName(name))
    on_off = {True: _V.ON, False: _V.OFF}
    collator.setAttribute(_A.CASE_LEVEL, on_off[c.case_level])
    collator.setAttribute(_A.CASE_FIRST, _CASE_FIRST[c.case_first])
    collator.setAttribute(_A.STRENGTH, _STRENGTHS[c.strength])
    collator.setAttribute(_A.NUMERIC_COLLATION, on_off[c.numeric_ordering])
    collator.setAttribute(_A.ALTERNATE_HANDLING, _ALTERNATE[c.alternate])
    collator.setAttribute(_A.NORMALIZATION_MODE, on_off[c.normalization])
    collator.setAttribute(_A.FRENCH_COLLATION, on_off[c.backwards])
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
    icu_locale = icu.Locale.createFromName(locale)
    if icu_locale.isBogus():
        raise QueryError("BadValue", f"Field 'locale' is not valid in: {render(spec)}")
    collator = icu.Collator.createInstance(icu_locale)
    valid = collator.getLocale(icu.ULocDataLocaleType.VALID_LOCALE).getName()
    if valid != locale:
        # ICU would have used another locale (or the root one): MongoDB names it, if any.
        hint = f". Did you mean '{valid}'?" if valid and valid != "root" else ""
        raise QueryError("BadValue", f"Field 'locale' is invalid in: {render(spec)}{hint}")
    on = int(_V.ON)
    case_level = _bool(spec, "caseLevel", int(collator.getAttribute(_A.CASE_LEVEL)) == on)
    case_first = _choice(
        spec,
        "caseFirst",
        _CASE_FIRST_OF[int(collator.getAttribute(_A.CASE_FIRST))],
        ("upper", "lower", "off"),
    )
    strength = _strength(spec, _STRENGTH_OF[int(collator.getAttribute(_A.STRENGTH))])
    numeric = _bool(spec, "numericOrdering", int(collator.getAttribute(_A.NUMERIC_COLLATION)) == on)
    alternate = _choice(
        spec,
        "alternate",
        _ALTERNATE_OF[int(collator.getAttribute(_A.ALTERNATE_HANDLING))],
        ("non-ignorable", "shifted"),
    )
    max_variable = _choice(spec, "maxVariable", "punct", ("punct", "space"))
    normalization = _bool(
        spec, "normalization", int(collator.getAttribute(_A.NORMALIZATION_MODE)) == on
    )
    backwards = _bool(spec, "backwards", int(collator.getAttribute(_A.FRENCH_COLLATION)) == on)
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


# -- filters ----------------------------------------------------------------------------------------


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


def collate_filter(
    parsed: ParsedFilter, c: Collation, variables: Mapping[str, Any] | None = None
) -> ParsedFilter:
    """The filter with its comparisons ($eq, ranges, $ne, $in, $nin, $all's values, inside
    $elemMatch too) made under the collation; the tree keeps the values as written (for upsert
    seeding and the planner, which collates bounds itself). Regular expressions, $type, $exists
    and the rest do not compare strings, and stay as they are."""
    tree = _collate(parsed.tree, c)
    if tree is parsed.tree:
        return parsed
    return ParsedFilter(parsed.filter, tree, node_predicate(tree, variables))


def _collate(node: Node, c: Collation) -> Node:
    collate = c.collate
    if isinstance(node, Compare):
        if not has_string(node.value):
            return node  # a value without strings compares the same under any collation
        q = collate(node.value)
        base = eq_test(q) if node.op == "$eq" else range_test(q, node.op)
        return replace(node, test=lambda v: base(collate(v)))
    if isinstance(node, In):
        if not any(has_string(v) for v in node.values):
            return node
        plain = in_test([collate(v) for v in node.values if not is_regex(v)])
        regexes = [regex_test(*regex_source(v)) for v in node.values if is_regex(v)]

        def in_values(v: Any) -> bool:
            return plain(collate(v)) or any(r(v) for r in regexes)

        return replace(node, test=in_values)
    if isinstance(node, Not):
        child = _collate(node.child, c)
        return node if child is node.child else Not(child)
    if isinstance(node, (And, Or, Nor, All)):
        children = tuple(_collate(ch, c) for ch in node.children)
        if all(a is b for a, b in zip(children, node.children)):
            return node
        return replace(node, children=children)
    if isinstance(node, (ElemMatchValue, ElemMatchObject)):
        inner = _collate(node.child, c)
        if inner is node.child:
            return node
        if isinstance(node, ElemMatchValue):
            return replace(node, test=elem_match_value_test(element_test(inner)), child=inner)
        return replace(node, test=elem_match_object_test(node_predicate(inner)), child=inner)
    return node
