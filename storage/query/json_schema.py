"""`$jsonSchema`: MongoDB's JSON Schema dialect (draft 4 with `bsonType`), parsed once with
MongoDB's refusals (codes and messages), and checked against a document so that the failures come
out as MongoDB 5+ reports them in a DocumentValidationFailure's `errInfo.details`.

A keyword that applies to one type (minimum to numbers, minLength to strings, properties to
objects, ...) holds for a value of another type, as JSON Schema says; `type`/`bsonType` is the one
check of the type. Keywords are checked, and reported, in MongoDB's order."""

from __future__ import annotations

import decimal
import operator
from collections.abc import Callable, Mapping
from typing import Any

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import (
    IntegerError,
    is_number,
    parse_integer,
    render_element,
    type_name,
)
from ebbdb.storage.query.compare import BSON_TYPE_CODES, compare
from ebbdb.storage.query.match_leaves import range_test, regex_test, type_code

Errors = list[dict[str, Any]]

#: Keywords MongoDB names and refuses.
_UNSUPPORTED = frozenset({"$ref", "$schema", "default", "definitions", "format", "id"})
_KEYWORDS = frozenset(
    {
        "additionalItems",
        "additionalProperties",
        "allOf",
        "anyOf",
        "bsonType",
        "dependencies",
        "description",
        "encrypt",
        "encryptMetadata",
        "enum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "items",
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "minItems",
        "minLength",
        "minProperties",
        "minimum",
        "multipleOf",
        "not",
        "oneOf",
        "pattern",
        "patternProperties",
        "properties",
        "required",
        "title",
        "type",
        "uniqueItems",
    }
)
_NUMBERS = frozenset({1, 16, 18, 19})
_STRING, _OBJECT, _ARRAY = 2, 3, 4
#: JSON Schema's own type names (the `type` keyword).
_JSON_TYPES: dict[str, frozenset[int]] = {
    "object": frozenset({_OBJECT}),
    "array": frozenset({_ARRAY}),
    "number": _NUMBERS,
    "boolean": frozenset({8}),
    "string": frozenset({_STRING}),
    "null": frozenset({10}),
}
#: BSON's type names (the `bsonType` keyword), "number" standing for the four numeric types.
_BSON_TYPES: dict[str, frozenset[int]] = {
    **{name: frozenset({code}) for name, code in BSON_TYPE_CODES.items()},
    "number": _NUMBERS,
}
_DECIMAL = decimal.Context(prec=34, traps=[])

# A check of a present value: its failures, empty when it holds.
_Check = Callable[[Any], Errors]


def _fail(code: str, message: str) -> QueryError:
    return QueryError(code, message)


def _annotations(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A subschema's title and description, which MongoDB copies into the failures it reports."""
    return {k: schema[k] for k in ("title", "description") if k in schema}


def _same(a: Any, b: Any) -> bool:
    """Equality as `enum` and `uniqueItems` see it: BSON equality, objects' field order aside."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(map(_same, a, b))
    return compare(a, b) == 0


class Schema:
    """One parsed (sub)schema. `root` says it judges the document itself (only object keywords
    apply; a type without "object" matches nothing)."""

    def __init__(self, spec: Any, root: bool) -> None:
        if not isinstance(spec, Mapping):
            raise _fail("TypeMismatch", "$jsonSchema must be an object")
        self.spec = spec
        self.root = root
        self.annotations = _annotations(spec)
        self._checks: list[_Check] = []
        self._never = False
        for key in spec:
            if key not in _KEYWORDS:
                if key in _UNSUPPORTED:
                    raise _fail(
                        "FailedToParse", f"$jsonSchema keyword '{key}' is not currently supported"
                    )
                raise _fail("FailedToParse", f"Unknown $jsonSchema keyword: {key}")
        for key in ("description", "title"):
            if key in spec and not isinstance(spec[key], str):
                raise _fail("TypeMismatch", f"$jsonSchema keyword '{key}' must be of type string")
        if "type" in spec and "bsonType" in spec:
            raise _fail(
                "FailedToParse", "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'"
            )
        if "encrypt" in spec or "encryptMetadata" in spec:
            raise _fail(
                "QueryFeatureNotAllowed",
                "Encryption-related validator keywords are not allowed in this context",
            )
        self._type_kw = "type" if "type" in spec else "bsonType" if "bsonType" in spec else None
        self._types: frozenset[int] | None = None
        if self._type_kw is not None:
            aliases = _JSON_TYPES if self._type_kw == "type" else _BSON_TYPES
            self._types = _parse_types(self._type_kw, spec[self._type_kw], aliases)
        self._scalar_keywords()
        self._array_keywords()
        self._object_keywords()
        self._logical_keywords()
        if root and self._types is not None and _OBJECT not in self._types:
            self._never = True  # MongoDB stores only objects

    # -- checking ---------------------------------------------------------------------------------

    def errors(self, value: Any) -> Errors:
        """The failures of a present value (the document, for the root), in MongoDB's order."""
        if self._never:
            return [self._never_detail()]
        out: Errors = []
        for check in self._checks:
            out += check(value)
        if not self.root and self._types is not None and type_code(value) not in self._types:
            assert self._type_kw is not None
            out.append(
                {
                    "operatorName": self._type_kw,
                    "specifiedAs": {self._type_kw: self.spec[self._type_kw]},
                    "reason": "type did not match",
                    "consideredValue": value,
                    "consideredType": type_name(value),
                }
            )
        return out

    def matches(self, doc: Any) -> bool:
        return not self.errors(doc)

    def _never_detail(self) -> dict[str, Any]:
        return {
            "operatorName": "$jsonSchema",
            "specifiedAs": {"$jsonSchema": self.spec},
            "reason": "expression always evaluates to false",
        }

    def details(self, doc: Any) -> dict[str, Any]:
        """errInfo.details for a root document that fails the schema."""
        if self._never:
            return self._never_detail()
        return {
            "operatorName": "$jsonSchema",
            **self.annotations,
            "schemaRulesNotSatisfied": self.errors(doc),
        }

    def _add(self, applies: frozenset[int], check: _Check) -> None:
        """A keyword check that judges only values of the types `applies` names."""

        def restricted(value: Any) -> Errors:
            return check(value) if type_code(value) in applies else []

        self._checks.append(restricted)

    # -- keywords ---------------------------------------------------------------------------------

    def _scalar_keywords(self) -> None:
        spec = self.spec
        if "pattern" in spec:
            pattern = spec["pattern"]
            if not isinstance(pattern, str):
                raise _fail("TypeMismatch", "$jsonSchema keyword 'pattern' must be a string")
            test = regex_test(pattern, "")
            self._leaf(
                _STRING, "pattern", lambda v: not test(v), "regular expression did not match"
            )
        for kw, too_far in (("maxLength", operator.gt), ("minLength", operator.lt)):
            if kw in spec:
                limit = _length(kw, spec[kw])
                self._leaf(
                    _STRING,
                    kw,
                    _length_fails(too_far, limit),
                    "specified string length was not satisfied",
                )
        if "multipleOf" in spec:
            m = spec["multipleOf"]
            if not is_number(m):
                raise _fail("TypeMismatch", "$jsonSchema keyword 'multipleOf' must be a number")
            divisor = _DECIMAL.create_decimal(str(m))
            if divisor.is_signed() or divisor.is_zero():
                raise _fail(
                    "FailedToParse", "$jsonSchema keyword 'multipleOf' must have a positive value"
                )
            self._leaf(
                None,
                "multipleOf",
                lambda v: _DECIMAL.remainder(_DECIMAL.create_decimal(str(v)), divisor) != 0,
                "considered value is not a multiple of the specified value",
            )
        for kw, exclusive_kw, strict, loose in (
            ("maximum", "exclusiveMaximum", "$lt", "$lte"),
            ("minimum", "exclusiveMinimum", "$gt", "$gte"),
        ):
            if kw not in spec:
                if exclusive_kw in spec:
                    raise _fail(
                        "FailedToParse",
                        f"$jsonSchema keyword '{kw}' must be a present if {exclusive_kw} is present",
                    )
                continue
            exclusive = spec.get(exclusive_kw, False)
            if not isinstance(exclusive, bool):
                raise _fail(
                    "TypeMismatch", f"$jsonSchema keyword '{exclusive_kw}' must be a boolean"
                )
            bound = spec[kw]
            if not is_number(bound):
                raise _fail("TypeMismatch", f"$jsonSchema keyword '{kw}' must be a number")
            test = range_test(bound, strict if exclusive else loose)
            shown = {kw: bound, exclusive_kw: True} if exclusive else {kw: bound}
            self._leaf(None, kw, _negated(test), "comparison failed", specified=shown)

    def _leaf(
        self,
        applies: int | None,
        kw: str,
        fails: Callable[[Any], bool],
        reason: str,
        specified: dict[str, Any] | None = None,
    ) -> None:
        """A keyword on one value, reported with its reason and the value considered."""
        if self.root:
            return  # it judges strings or numbers, and the root is a document
        shown = {kw: self.spec[kw]} if specified is None else specified

        def check(v: Any) -> Errors:
            if not fails(v):
                return []
            return [
                {"operatorName": kw, "specifiedAs": shown, "reason": reason, "consideredValue": v}
            ]

        self._add(_NUMBERS if applies is None else frozenset({applies}), check)

    def _array_keywords(self) -> None:
        spec = self.spec
        arrays = frozenset({_ARRAY})
        for kw, too_far in (("minItems", operator.lt), ("maxItems", operator.gt)):
            if kw in spec:
                limit = _length(kw, spec[kw])
                if not self.root:
                    self._add(arrays, _count_check(kw, spec[kw], limit, too_far))
        if "uniqueItems" in spec:
            if not isinstance(spec["uniqueItems"], bool):
                raise _fail("TypeMismatch", "$jsonSchema keyword 'uniqueItems' must be a boolean")
            if spec["uniqueItems"] and not self.root:
                self._add(arrays, _unique_check(spec["uniqueItems"]))
        start: int | None = None
        if "items" in spec:
            items = spec["items"]
            if isinstance(items, list):
                for sub in items:
                    if not isinstance(sub, Mapping):
                        raise _fail(
                            "TypeMismatch",
                            "$jsonSchema keyword 'items' requires that each element of the array "
                            f"is an object, but found a {type_name(sub)}",
                        )
                subs = [Schema(sub, False) for sub in items]
                start = len(subs)
                if not self.root:
                    self._add(arrays, _items_array_check(subs))
            elif isinstance(items, Mapping):
                sub = Schema(items, False)
                if not self.root:
                    self._add(arrays, _items_check("items", sub, 0))
            else:
                raise _fail(
                    "TypeMismatch",
                    "$jsonSchema keyword 'items' must be an array or an object, not "
                    f"{type_name(items)}",
                )
        if "additionalItems" in spec:
            extra = spec["additionalItems"]
            if isinstance(extra, bool):
                if start is not None and not extra and not self.root:
                    self._add(arrays, _no_additional_items(start))
            elif isinstance(extra, Mapping):
                sub = Schema(extra, False)
                if start is not None and not self.root:
                    self._add(arrays, _items_check("additionalItems", sub, start))
            else:
                raise _fail(
                    "TypeMismatch",
                    "$jsonSchema keyword 'additionalItems' must be either an object or a "
                    f"boolean, but got a {type_name(extra)}",
                )

    def _object_keywords(self) -> None:
        spec = self.spec
        objects = frozenset({_OBJECT})
        required = _required(spec["required"]) if "required" in spec else []
        if "properties" in spec:
            props = spec["properties"]
            if not isinstance(props, Mapping):
                raise _fail("TypeMismatch", "$jsonSchema keyword 'properties' must be an object")
            subs: dict[str, Schema] = {}
            for name, sub in props.items():
                if not isinstance(sub, Mapping):
                    raise _fail(
                        "TypeMismatch",
                        f"Nested schema for $jsonSchema property '{name}' must be an object",
                    )
                subs[name] = Schema(sub, False)
            self._object_check(objects, _properties_check(subs))
        if "patternProperties" in spec or "additionalProperties" in spec:
            self._object_check(objects, self._allowed_properties())
        if required:
            shown = {"required": spec["required"]}
            missing_sorted = sorted(required)

            def check_required(obj: Any) -> Errors:
                missing = [p for p in missing_sorted if p not in obj]
                if not missing:
                    return []
                return [
                    {
                        "operatorName": "required",
                        "specifiedAs": shown,
                        "missingProperties": missing,
                    }
                ]

            self._object_check(objects, check_required)
        for kw, too_far in (
            ("minProperties", operator.lt),
            ("maxProperties", operator.gt),
        ):
            if kw in spec:
                limit = _length(kw, spec[kw])
                self._object_check(objects, _count_check(kw, spec[kw], limit, too_far))
        if "dependencies" in spec:
            self._object_check(objects, self._dependencies(spec["dependencies"]))

    def _object_check(self, objects: frozenset[int], check: _Check) -> None:
        if self.root:
            self._checks.append(check)
        else:
            self._add(objects, check)

    def _allowed_properties(self) -> _Check:
        spec = self.spec
        names = frozenset(spec.get("properties", {}))
        patterns: list[tuple[str, Callable[[Any], bool], Schema]] = []
        if "patternProperties" in spec:
            pp = spec["patternProperties"]
            if not isinstance(pp, Mapping):
                raise _fail(
                    "TypeMismatch", "$jsonSchema keyword 'patternProperties' must be an object"
                )
            for regex, sub in pp.items():
                if not isinstance(sub, Mapping):
                    raise _fail(
                        "TypeMismatch",
                        f"$jsonSchema keyword 'patternProperties' has property '{regex}' which is "
                        "not an object",
                    )
                patterns.append((regex, regex_test(regex, ""), Schema(sub, False)))
        extra = spec.get("additionalProperties", True)
        extra_schema: Schema | None = None
        if isinstance(extra, Mapping):
            extra_schema = Schema(extra, False)
        elif not isinstance(extra, bool):
            raise _fail(
                "TypeMismatch",
                "$jsonSchema keyword 'additionalProperties' must be an object or a boolean",
            )

        def check(obj: Any) -> Errors:
            additional = [
                k for k in obj if k not in names and not any(t(k) for _p, t, _s in patterns)
            ]
            out: Errors = []
            if extra is False and additional:
                out.append(
                    {
                        "operatorName": "additionalProperties",
                        "specifiedAs": {"additionalProperties": False},
                        "additionalProperties": additional,
                    }
                )
            elif extra_schema is not None:
                for k in additional:
                    errs = extra_schema.errors(obj[k])
                    if errs:
                        out.append(
                            {
                                "operatorName": "additionalProperties",
                                **extra_schema.annotations,
                                "reason": "at least one additional property did not match the "
                                "subschema",
                                "failingProperty": k,
                                "details": errs,
                            }
                        )
                        break
            failing = []
            for regex, test, sub in patterns:
                for k in obj:
                    if test(k):
                        errs = sub.errors(obj[k])
                        if errs:
                            failing.append(
                                {
                                    "propertyName": k,
                                    **sub.annotations,
                                    "regexMatched": regex,
                                    "details": errs,
                                }
                            )
                            break
            if failing:
                out.append({"operatorName": "patternProperties", "details": failing})
            return out

        return check

    def _dependencies(self, deps: Any) -> _Check:
        if not isinstance(deps, Mapping):
            raise _fail("TypeMismatch", "$jsonSchema keyword 'dependencies' must be an object")
        rules: list[tuple[str, Schema | list[str]]] = []
        for name, dep in deps.items():
            if isinstance(dep, Mapping):
                rules.append((name, Schema(dep, self.root)))
            elif isinstance(dep, list):
                rules.append((name, _property_dependency(name, dep)))
            elif isinstance(dep, str) and name in ("title", "description"):
                continue
            else:
                raise _fail(
                    "TypeMismatch",
                    f"property '{name}' in $jsonSchema keyword 'dependencies' must be either an "
                    "object or an array",
                )
        shown = _annotations(deps)

        def check(obj: Any) -> Errors:
            failing = []
            for name, rule in rules:
                if name not in obj:
                    continue
                if isinstance(rule, Schema):
                    errs = rule.errors(obj)
                    if errs:
                        failing.append({"conditionalProperty": name, "details": errs})
                else:
                    missing = [p for p in rule if p not in obj]
                    if missing:
                        failing.append({"conditionalProperty": name, "missingProperties": missing})
            if not failing:
                return []
            return [{"operatorName": "dependencies", **shown, "failingDependencies": failing}]

        return check

    def _logical_keywords(self) -> None:
        spec = self.spec
        for kw in ("allOf", "anyOf", "oneOf"):
            if kw in spec:
                self._checks.append(_logical_check(kw, self._subschemas(kw, spec[kw])))
        if "not" in spec:
            if not isinstance(spec["not"], Mapping):
                raise _fail(
                    "TypeMismatch",
                    "$jsonSchema keyword 'not' must be an object, but found an element of type "
                    f"{type_name(spec['not'])}",
                )
            negated = Schema(spec["not"], self.root)

            def check_not(v: Any) -> Errors:
                if negated.errors(v):
                    return []
                return [{"operatorName": "not", "reason": "child expression matched"}]

            self._checks.append(check_not)
        if "enum" in spec:
            self._checks.append(self._enum(spec["enum"]))

    def _subschemas(self, kw: str, value: Any) -> list[Schema]:
        if not isinstance(value, list):
            raise _fail("TypeMismatch", f"$jsonSchema keyword '{kw}' must be an array")
        if not value:
            raise _fail("BadValue", f"$jsonSchema keyword '{kw}' must be a non-empty array")
        for sub in value:
            if not isinstance(sub, Mapping):
                raise _fail(
                    "TypeMismatch",
                    f"$jsonSchema keyword '{kw}' must be an array of objects, but found an "
                    f"element of type {type_name(sub)}",
                )
        return [Schema(sub, self.root) for sub in value]

    def _enum(self, values: Any) -> _Check:
        if not isinstance(values, list):
            raise _fail(
                "TypeMismatch",
                "$jsonSchema keyword 'enum' must be an array, but found an element of type "
                f"{type_name(values)}",
            )
        if not values:
            raise _fail("FailedToParse", "$jsonSchema keyword 'enum' cannot be an empty array")
        for i, v in enumerate(values):
            if any(_same(v, w) for w in values[:i]):
                raise _fail(
                    "FailedToParse",
                    "$jsonSchema keyword 'enum' array cannot contain duplicate values.",
                )
        shown = {"enum": values}
        # At the root only objects count: MongoDB stores nothing else.
        allowed = [v for v in values if isinstance(v, Mapping)] if self.root else values

        def check(v: Any) -> Errors:
            if not allowed:
                return [
                    {
                        "operatorName": "enum",
                        "specifiedAs": shown,
                        "reason": "expression always evaluates to false",
                    }
                ]
            if any(_same(v, w) for w in allowed):
                return []
            return [
                {
                    "operatorName": "enum",
                    "specifiedAs": shown,
                    "reason": "value was not found in enum",
                    "consideredValue": v,
                }
            ]

        return check


# -- keyword helpers -------------------------------------------------------------------------------


def _parse_types(kw: str, spec: Any, aliases: Mapping[str, frozenset[int]]) -> frozenset[int]:
    if isinstance(spec, str):
        names = [spec]
    elif isinstance(spec, list):
        names = []
        for name in spec:
            if not isinstance(name, str):
                raise _fail(
                    "TypeMismatch", f"$jsonSchema keyword '{kw}' array elements must be strings"
                )
            if name in names:
                raise _fail(
                    "FailedToParse", f"$jsonSchema keyword '{kw}' has duplicate value: {name}"
                )
            names.append(name)
    else:
        raise _fail(
            "TypeMismatch",
            f"$jsonSchema keyword '{kw}' must be either a string or an array of strings",
        )
    codes: set[int] = set()
    for name in names:
        if name == "integer":
            raise _fail("FailedToParse", "$jsonSchema type 'integer' is not currently supported.")
        found = aliases.get(name)
        if found is None:
            raise _fail("BadValue", f"Unknown type name alias: {name}")
        codes |= found
    if not codes:
        raise _fail("FailedToParse", f"$jsonSchema keyword '{kw}' must name at least one type")
    return frozenset(codes)


def _length_fails(too_far: Callable[[int, int], bool], limit: int) -> Callable[[Any], bool]:
    return lambda v: too_far(len(v), limit)


def _negated(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: not test(v)


def _length(kw: str, value: Any) -> int:
    try:
        return parse_integer(value, render_element(kw, value), non_negative=True)
    except IntegerError as exc:
        raise _fail("FailedToParse", exc.reason) from None


def _strings(
    values: list[Any], wrong_type: Callable[[Any], str], duplicate: Callable[[str], str]
) -> list[str]:
    """A list of distinct names (required, a property dependency), refused as MongoDB words it."""
    out: list[str] = []
    for name in values:
        if not isinstance(name, str):
            raise _fail("TypeMismatch", wrong_type(name))
        if name in out:
            raise _fail("FailedToParse", duplicate(name))
        out.append(name)
    return out


def _required(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise _fail(
            "TypeMismatch",
            "$jsonSchema keyword 'required' must be an array, but found an element of type "
            f"{type_name(value)}",
        )
    names = _strings(
        value,
        lambda v: (
            "$jsonSchema keyword 'required' must be an array of strings, but found an "
            f"element of type: {type_name(v)}"
        ),
        lambda _n: "$jsonSchema keyword 'required' array cannot contain duplicate values",
    )
    if not names:
        raise _fail("FailedToParse", "$jsonSchema keyword 'required' cannot be an empty array")
    return names


def _property_dependency(name: str, names: list[Any]) -> list[str]:
    if not names:
        raise _fail(
            "FailedToParse",
            f"property '{name}' in $jsonSchema keyword 'dependencies' cannot be an empty array",
        )
    where = f"array '{name}' in $jsonSchema keyword 'dependencies'"
    return _strings(
        names,
        lambda v: f"{where} can only contain strings, but found element of type: {type_name(v)}",
        lambda n: f"{where} contains duplicate element: {n}",
    )


def _count_check(kw: str, shown: Any, limit: int, too_far: Callable[[int, int], bool]) -> _Check:
    """minItems/maxItems (on an array) and minProperties/maxProperties (on an object)."""
    arrays = kw.endswith("Items")
    reason = (
        "array did not match specified length"
        if arrays
        else "specified number of properties was not satisfied"
    )

    def check(v: Any) -> Errors:
        if not too_far(len(v), limit):
            return []
        out: dict[str, Any] = {"operatorName": kw, "specifiedAs": {kw: shown}, "reason": reason}
        if arrays:
            out.update(consideredValue=v, numberOfItems=len(v))
        else:
            out["numberOfProperties"] = len(v)
        return [out]

    return check


def _unique_check(shown: Any) -> _Check:
    def check(v: Any) -> Errors:
        for i, item in enumerate(v):
            if any(_same(item, earlier) for earlier in v[:i]):
                return [
                    {
                        "operatorName": "uniqueItems",
                        "specifiedAs": {"uniqueItems": shown},
                        "reason": "found a duplicate item",
                        "consideredValue": v,
                        "duplicatedValue": item,
                    }
                ]
        return []

    return check


def _items_check(kw: str, sub: Schema, start: int) -> _Check:
    reason = (
        "At least one item did not match the sub-schema"
        if kw == "items"
        else "At least one additional item did not match the sub-schema"
    )

    def check(v: Any) -> Errors:
        for i in range(start, len(v)):
            errs = sub.errors(v[i])
            if errs:
                return [
                    {
                        "operatorName": kw,
                        **sub.annotations,
                        "reason": reason,
                        "itemIndex": i,
                        "details": errs,
                    }
                ]
        return []

    return check


def _items_array_check(subs: list[Schema]) -> _Check:
    def check(v: Any) -> Errors:
        failing = []
        for i, sub in enumerate(subs[: len(v)]):
            errs = sub.errors(v[i])
            if errs:
                failing.append({"itemIndex": i, "details": errs})
        return [{"operatorName": "items", "details": failing}] if failing else []

    return check


def _no_additional_items(start: int) -> _Check:
    def check(v: Any) -> Errors:
        if len(v) <= start:
            return []
        return [
            {
                "operatorName": "additionalItems",
                "specifiedAs": {"additionalItems": False},
                "reason": "found additional items",
                "additionalItems": v[start:],
            }
        ]

    return check


def _properties_check(subs: dict[str, Schema]) -> _Check:
    def check(obj: Any) -> Errors:
        failing = []
        for name, sub in subs.items():
            if name in obj:
                errs = sub.errors(obj[name])
                if errs:
                    failing.append({"propertyName": name, **sub.annotations, "details": errs})
        return (
            [{"operatorName": "properties", "propertiesNotSatisfied": failing}] if failing else []
        )

    return check


def _logical_check(kw: str, subs: list[Schema]) -> _Check:
    def check(v: Any) -> Errors:
        results = [s.errors(v) for s in subs]
        failing = [
            {"index": i, **s.annotations, "details": errs}
            for i, (s, errs) in enumerate(zip(subs, results))
            if errs
        ]
        if kw == "allOf":
            ok = not failing
        elif kw == "anyOf":
            ok = len(failing) < len(subs)
        else:
            matching = [i for i, errs in enumerate(results) if not errs]
            if len(matching) > 1:
                return [
                    {
                        "operatorName": kw,
                        "reason": "more than one subschema matched",
                        "matchingSchemaIndexes": matching,
                    }
                ]
            ok = len(matching) == 1
        return [] if ok else [{"operatorName": kw, "schemasNotSatisfied": failing}]

    return check


def parse(spec: Any) -> Schema:
    """A `$jsonSchema` operand as a Schema. Raises QueryError (TypeMismatch, FailedToParse,
    BadValue) for what MongoDB refuses, with its message."""
    return Schema(spec, True)


__all__ = ["Schema", "parse"]
