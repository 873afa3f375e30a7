"""The matcher, table-driven: (filter, document, matches?) with MongoDB's rules for paths through
arrays, null and missing fields, type bracketing and NaN in range operators, and the logical
operators; malformed filters raise QueryError."""

from __future__ import annotations

import datetime

import pytest
from bson import Decimal128, Int64, MaxKey, MinKey, ObjectId
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases

NAN = float("nan")
OID = ObjectId(b"\x01" * 12)

CASES: list[tuple[str, dict, dict, bool]] = [
    # -- equality, top level ---------------------------------------------------------------------
    ("empty filter", {}, {"a": 1}, True),
    ("eq int", {"a": 5}, {"a": 5}, True),
    ("eq other value", {"a": 5}, {"a": 6}, False),
    ("eq across numeric types", {"a": 5}, {"a": 5.0}, True),
    ("eq Int64", {"a": Int64(5)}, {"a": 5}, True),
    ("eq Decimal128", {"a": Decimal128("5.0")}, {"a": 5}, True),
    ("eq string", {"a": "x"}, {"a": "x"}, True),
    ("eq string is case-sensitive", {"a": "x"}, {"a": "X"}, False),
    ("string is not number", {"a": "5"}, {"a": 5}, False),
    ("bool is not number", {"a": True}, {"a": 1}, False),
    ("eq missing field", {"a": 5}, {"b": 5}, False),
    ("eq ObjectId", {"_id": OID}, {"_id": OID}, True),
    ("eq date forms", {"d": datetime.datetime(1970, 1, 1, 0, 0, 1)}, {"d": DatetimeMS(1000)}, True),
    ("two fields both hold", {"a": 1, "b": 2}, {"a": 1, "b": 2}, True),
    ("two fields one fails", {"a": 1, "b": 2}, {"a": 1, "b": 3}, False),
    # -- equality on objects ---------------------------------------------------------------------
    ("eq object exact", {"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 2}}, True),
    ("eq object field order matters", {"a": {"b": 1, "c": 2}}, {"a": {"c": 2, "b": 1}}, False),
    ("eq object extra field", {"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, False),
    ("eq empty object", {"a": {}}, {"a": {}}, True),
    ("eq empty object vs non-empty", {"a": {}}, {"a": {"b": 1}}, False),
    # -- dotted paths ----------------------------------------------------------------------------
    ("dotted", {"a.b": 1}, {"a": {"b": 1}}, True),
    ("dotted deep", {"a.b.c": "x"}, {"a": {"b": {"c": "x"}}}, True),
    ("dotted through scalar", {"a.b": 1}, {"a": 1}, False),
    ("dotted into array of docs", {"a.b": 2}, {"a": [{"b": 1}, {"b": 2}]}, True),
    ("dotted into array of docs, no match", {"a.b": 3}, {"a": [{"b": 1}, {"b": 2}]}, False),
    ("dotted reaches an array leaf", {"a.b": 2}, {"a": {"b": [1, 2]}}, True),
    ("dotted array of docs with arrays", {"a.b": 4}, {"a": [{"b": [1, 2]}, {"b": [3, 4]}]}, True),
    ("nested arrays are not searched for fields", {"a.b": 5}, {"a": [[{"b": 5}]]}, False),
    ("numeric key on a document", {"a.0": 5}, {"a": {"0": 5}}, True),
    # -- array index paths ------------------------------------------------------------------------
    ("index 0", {"a.0": 5}, {"a": [5, 6]}, True),
    ("index 1", {"a.1": 6}, {"a": [5, 6]}, True),
    ("index wrong element", {"a.1": 5}, {"a": [5, 6]}, False),
    ("index out of range", {"a.5": 5}, {"a": [5, 6]}, False),
    ("index then field", {"a.0.b": 1}, {"a": [{"b": 1}, {"b": 2}]}, True),
    ("index then field, other element", {"a.0.b": 2}, {"a": [{"b": 1}, {"b": 2}]}, False),
    ("index 1 then field", {"a.1.b": 2}, {"a": [{"b": 1}, {"b": 2}]}, True),
    # An element reached by an index is tested as it is: MongoDB does not search a nested array there.
    ("index reaches an array, not searched", {"a.0": 5}, {"a": [[5], 6]}, False),
    ("index reaches an array, whole", {"a.0": [5]}, {"a": [[5], 6]}, True),
    # -- arrays ------------------------------------------------------------------------------------
    ("element match", {"a": 5}, {"a": [5, 6]}, True),
    ("element match, no element", {"a": 7}, {"a": [5, 6]}, False),
    ("whole array", {"a": [5, 6]}, {"a": [5, 6]}, True),
    ("whole array, order matters", {"a": [5, 6]}, {"a": [6, 5]}, False),
    ("whole array as an element", {"a": [5, 6]}, {"a": [[5, 6], 7]}, True),
    ("array query vs scalar", {"a": [5]}, {"a": 5}, False),
    ("only one level of nesting", {"a": 5}, {"a": [[5]]}, False),
    ("empty array", {"a": []}, {"a": []}, True),
    ("empty array as element", {"a": []}, {"a": [[], 1]}, True),
    ("empty array vs non-empty", {"a": []}, {"a": [1]}, False),
    # -- null and missing --------------------------------------------------------------------------
    ("null matches null", {"a": None}, {"a": None}, True),
    ("null matches missing", {"a": None}, {"b": 1}, True),
    ("null does not match a value", {"a": None}, {"a": 0}, False),
    ("null matches null element", {"a": None}, {"a": [1, None]}, True),
    ("null vs empty array", {"a": None}, {"a": []}, False),
    ("dotted null, missing parent", {"a.b": None}, {"c": 1}, True),
    ("dotted null, missing in one element", {"a.b": None}, {"a": [{"b": 1}, {"c": 1}]}, True),
    ("dotted null, present everywhere", {"a.b": None}, {"a": [{"b": 1}, {"b": 2}]}, False),
    # -- $eq / $ne ---------------------------------------------------------------------------------
    ("$eq", {"a": {"$eq": 5}}, {"a": 5}, True),
    ("$eq element", {"a": {"$eq": 5}}, {"a": [4, 5]}, True),
    ("$eq object", {"a": {"$eq": {"b": 1}}}, {"a": {"b": 1}}, True),
    ("$eq null missing", {"a": {"$eq": None}}, {}, True),
    ("$ne", {"a": {"$ne": 5}}, {"a": 6}, True),
    ("$ne equal", {"a": {"$ne": 5}}, {"a": 5.0}, False),
    ("$ne missing", {"a": {"$ne": 5}}, {}, True),
    ("$ne array containing", {"a": {"$ne": 5}}, {"a": [5, 6]}, False),
    ("$ne array not containing", {"a": {"$ne": 5}}, {"a": [6, 7]}, True),
    ("$ne null on missing", {"a": {"$ne": None}}, {}, False),
    ("$ne null on null", {"a": {"$ne": None}}, {"a": None}, False),
    ("$ne null on value", {"a": {"$ne": None}}, {"a": 0}, True),
    ("$ne whole array", {"a": {"$ne": [1, 2]}}, {"a": [1, 2]}, False),
    ("$ne dotted through array", {"a.b": {"$ne": 1}}, {"a": [{"b": 1}, {"b": 2}]}, False),
    # -- ranges ------------------------------------------------------------------------------------
    ("$gt", {"a": {"$gt": 5}}, {"a": 6}, True),
    ("$gt equal", {"a": {"$gt": 5}}, {"a": 5}, False),
    ("$gte equal", {"a": {"$gte": 5}}, {"a": 5.0}, True),
    ("$lt", {"a": {"$lt": 5}}, {"a": 4.5}, True),
    ("$lt equal", {"a": {"$lt": 5}}, {"a": Int64(5)}, False),
    ("$lte", {"a": {"$lte": 5}}, {"a": Decimal128("5")}, True),
    ("$lte above", {"a": {"$lte": 5}}, {"a": 5.0001}, False),
    ("$gt missing", {"a": {"$gt": 5}}, {}, False),
    ("$lt missing", {"a": {"$lt": 5}}, {}, False),
    ("$lt null", {"a": {"$lt": 5}}, {"a": None}, False),
    ("$gt string vs number", {"a": {"$gt": 5}}, {"a": "x"}, False),
    ("$lt string vs number", {"a": {"$lt": "z"}}, {"a": 5}, False),
    ("$gt string", {"a": {"$gt": "a"}}, {"a": "b"}, True),
    ("$gt string prefix", {"a": {"$gt": "ab"}}, {"a": "a"}, False),
    ("$gt bool", {"a": {"$gt": False}}, {"a": True}, True),
    ("$lt bool vs number", {"a": {"$lt": True}}, {"a": 0}, False),
    ("$gt date", {"a": {"$gt": DatetimeMS(0)}}, {"a": DatetimeMS(1)}, True),
    ("$gt date vs number", {"a": {"$gt": DatetimeMS(0)}}, {"a": 5}, False),
    ("$gt object", {"a": {"$gt": {}}}, {"a": {"b": 1}}, True),
    ("$gt array whole", {"a": {"$gt": [1]}}, {"a": [2]}, True),
    ("$gt array element", {"a": {"$gt": 5}}, {"a": [1, 10]}, True),
    ("$gt array no element", {"a": {"$gt": 5}}, {"a": [1, 2]}, False),
    ("range split across elements", {"a": {"$gt": 1, "$lt": 5}}, {"a": [0, 10]}, True),
    ("range on one element", {"a": {"$gt": 1, "$lt": 5}}, {"a": 3}, True),
    ("range outside", {"a": {"$gt": 1, "$lt": 5}}, {"a": 7}, False),
    ("$gte null matches null", {"a": {"$gte": None}}, {"a": None}, True),
    ("$gte null matches missing", {"a": {"$gte": None}}, {}, True),
    ("$lte null matches missing", {"a": {"$lte": None}}, {}, True),
    ("$gt null matches nothing", {"a": {"$gt": None}}, {"a": 1}, False),
    ("$gt null not null", {"a": {"$gt": None}}, {"a": None}, False),
    ("$lt null matches nothing", {"a": {"$lt": None}}, {"a": None}, False),
    ("$gte null not a value", {"a": {"$gte": None}}, {"a": 1}, False),
    ("$gt MinKey", {"a": {"$gt": MinKey()}}, {"a": 5}, True),
    ("$lt MaxKey", {"a": {"$lt": MaxKey()}}, {"a": "x"}, True),
    ("$gt MaxKey", {"a": {"$gt": MaxKey()}}, {"a": 5}, False),
    ("$lt MinKey", {"a": {"$lt": MinKey()}}, {"a": None}, False),
    ("dotted range", {"a.b": {"$gte": 2}}, {"a": [{"b": 1}, {"b": 2}]}, True),
    # NaN: equal to NaN, otherwise outside every range (MongoDB's special case in
    # ComparisonMatchExpressionBase::compare).
    ("$eq NaN", {"a": {"$eq": NAN}}, {"a": NAN}, True),
    ("$eq NaN decimal", {"a": NAN}, {"a": Decimal128("NaN")}, True),
    ("$gte NaN on NaN", {"a": {"$gte": NAN}}, {"a": NAN}, True),
    ("$lte NaN on NaN", {"a": {"$lte": NAN}}, {"a": NAN}, True),
    ("$gt NaN on NaN", {"a": {"$gt": NAN}}, {"a": NAN}, False),
    ("$lt 5 on NaN", {"a": {"$lt": 5}}, {"a": NAN}, False),
    ("$lte 5 on NaN", {"a": {"$lte": 5}}, {"a": NAN}, False),
    ("$lt -inf on NaN", {"a": {"$lt": float("-inf")}}, {"a": NAN}, False),
    ("$gt NaN on 5", {"a": {"$gt": NAN}}, {"a": 5}, False),
    ("$gte NaN on 5", {"a": {"$gte": NAN}}, {"a": 5}, False),
    ("$gt decimal NaN on 5", {"a": {"$gt": Decimal128("NaN")}}, {"a": 5}, False),
    ("$gt 5 on NaN", {"a": {"$gt": 5}}, {"a": NAN}, False),
    ("$lt decimal on NaN", {"a": {"$lt": Decimal128("1")}}, {"a": NAN}, False),
    (
        "$lt decimal on decimal NaN",
        {"a": {"$lt": Decimal128("1")}},
        {"a": Decimal128("NaN")},
        False,
    ),
    ("$gte decimal NaN on NaN", {"a": {"$gte": Decimal128("NaN")}}, {"a": NAN}, True),
    # -- $in / $nin --------------------------------------------------------------------------------
    ("$in", {"a": {"$in": [1, 2]}}, {"a": 2}, True),
    ("$in none", {"a": {"$in": [1, 2]}}, {"a": 3}, False),
    ("$in numeric types", {"a": {"$in": [Int64(2)]}}, {"a": 2.0}, True),
    ("$in array element", {"a": {"$in": [1, 2]}}, {"a": [5, 2]}, True),
    ("$in whole array", {"a": {"$in": [[1, 2]]}}, {"a": [1, 2]}, True),
    ("$in empty", {"a": {"$in": []}}, {"a": 1}, False),
    ("$in null matches missing", {"a": {"$in": [None, 5]}}, {}, True),
    ("$in null matches null", {"a": {"$in": [None]}}, {"a": None}, True),
    ("$in mixed types", {"a": {"$in": ["1", True]}}, {"a": 1}, False),
    ("$nin", {"a": {"$nin": [1, 2]}}, {"a": 3}, True),
    ("$nin member", {"a": {"$nin": [1, 2]}}, {"a": 1}, False),
    ("$nin array with member", {"a": {"$nin": [1, 2]}}, {"a": [3, 1]}, False),
    ("$nin missing", {"a": {"$nin": [1, 2]}}, {}, True),
    ("$nin null on missing", {"a": {"$nin": [None]}}, {}, False),
    ("$nin empty", {"a": {"$nin": []}}, {"a": 1}, True),
    # -- $exists -----------------------------------------------------------------------------------
    ("$exists true", {"a": {"$exists": True}}, {"a": 1}, True),
    ("$exists true on null", {"a": {"$exists": True}}, {"a": None}, True),
    ("$exists true missing", {"a": {"$exists": True}}, {"b": 1}, False),
    ("$exists false missing", {"a": {"$exists": False}}, {"b": 1}, True),
    ("$exists false present", {"a": {"$exists": False}}, {"a": None}, False),
    ("$exists 1", {"a": {"$exists": 1}}, {"a": 0}, True),
    ("$exists 0", {"a": {"$exists": 0}}, {}, True),
    ("$exists dotted through array", {"a.b": {"$exists": True}}, {"a": [1, {"b": 2}]}, True),
    ("$exists dotted none", {"a.b": {"$exists": True}}, {"a": [1, {"c": 2}]}, False),
    ("$exists false dotted", {"a.b": {"$exists": False}}, {"a": [{"b": 1}, {"c": 2}]}, False),
    ("$exists index", {"a.1": {"$exists": True}}, {"a": [1, 2]}, True),
    ("$exists index out of range", {"a.1": {"$exists": True}}, {"a": [1]}, False),
    ("$exists with $ne null", {"a": {"$exists": True, "$ne": None}}, {"a": None}, False),
    # -- logical -----------------------------------------------------------------------------------
    ("$and", {"$and": [{"a": 1}, {"b": 2}]}, {"a": 1, "b": 2}, True),
    ("$and fails", {"$and": [{"a": 1}, {"b": 2}]}, {"a": 1, "b": 3}, False),
    ("$and same field", {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 3}}]}, {"a": 2}, True),
    ("$or first", {"$or": [{"a": 1}, {"b": 2}]}, {"a": 1}, True),
    ("$or second", {"$or": [{"a": 1}, {"b": 2}]}, {"b": 2}, True),
    ("$or neither", {"$or": [{"a": 1}, {"b": 2}]}, {"a": 2, "b": 1}, False),
    ("$nor", {"$nor": [{"a": 1}, {"b": 2}]}, {"a": 2}, True),
    ("$nor one holds", {"$nor": [{"a": 1}, {"b": 2}]}, {"b": 2}, False),
    ("$nor missing", {"$nor": [{"a": 1}]}, {}, True),
    ("nested logical", {"$or": [{"$and": [{"a": 1}, {"b": 1}]}, {"c": 1}]}, {"a": 1, "b": 1}, True),
    ("logical and field", {"a": 1, "$or": [{"b": 1}, {"c": 1}]}, {"a": 1, "c": 1}, True),
    ("logical and field fails", {"a": 1, "$or": [{"b": 1}, {"c": 1}]}, {"a": 2, "c": 1}, False),
    ("$comment is ignored", {"$comment": "why", "a": 1}, {"a": 1}, True),
]


@cases(("flt", "doc", "expected"), CASES)
def test_match(flt: dict, doc: dict, expected: bool) -> None:
    assert compile_filter(flt)(doc) is expected


def test_none_filter_matches_everything() -> None:
    pred = compile_filter(None)
    assert pred({}) and pred({"a": 1})


BAD_FILTERS = [
    ("unknown operator", {"a": {"$foo": 1}}),
    ("unknown operator after a known one", {"a": {"$gt": 1, "$bar": 2}}),
    ("plain field after an operator", {"a": {"$gt": 1, "b": 2}}),
    ("unknown top-level operator", {"$foo": [{"a": 1}]}),
    ("$and not an array", {"$and": {"a": 1}}),
    ("$or empty", {"$or": []}),
    ("$nor entry not an object", {"$nor": [1]}),
    ("$in not an array", {"a": {"$in": 1}}),
    ("$nin not an array", {"a": {"$nin": {"b": 1}}}),
    ("unknown operator inside $and", {"$and": [{"a": {"$nope": 1}}]}),
]


@pytest.mark.parametrize("flt", [b[1] for b in BAD_FILTERS], ids=[b[0] for b in BAD_FILTERS])
def test_malformed_filters_raise_bad_value(flt: dict) -> None:
    with pytest.raises(QueryError) as excinfo:
        compile_filter(flt)
    assert excinfo.value.code_name == "BadValue"


def test_unknown_operator_messages() -> None:
    with pytest.raises(QueryError, match=r"^unknown operator: \$foo$"):
        compile_filter({"a": {"$foo": 1}})
    with pytest.raises(QueryError, match=r"^unknown top level operator: \$foo"):
        compile_filter({"$foo": 1})
