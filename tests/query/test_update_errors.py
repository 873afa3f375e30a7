"""Update errors with MongoDB's codeNames and messages, table-driven: those parse_update raises for
a malformed update or array filter, and those apply raises for a document the update cannot change
(types, non-viable paths, the immutable `_id`, positional paths that resolve to nothing)."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64

from ebbdb.storage.core.errors import InvalidIdField, QueryError
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.update import parse_update
from tests.helpers import cases, errors_test, query_error

Doc = dict[str, Any]
NOW = 1_700_000_000_123
REPLACE_HINT = (
    "is not allowed in the context of an update's replacement document. Consider using an "
    "aggregation pipeline with $replaceWith."
)

# (id, update, arrayFilters, codeName, message)
PARSE_ERRORS: list[tuple[str, Doc, list[Any] | None, str, str]] = [
    # -- the update document ------------------------------------------------------------------------
    (
        "unknown modifier",
        {"$foo": {"a": 1}},
        None,
        "FailedToParse",
        "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update "
        "specified as an array",
    ),
    (
        "a plain field after a modifier",
        {"$set": {"a": 1}, "b": 1},
        None,
        "FailedToParse",
        "Unknown modifier: b. Expected a valid update modifier or pipeline-style update "
        "specified as an array",
    ),
    (
        "a modifier that is not a document",
        {"$set": 1},
        None,
        "FailedToParse",
        "Modifiers operate on fields but we found type int instead. For example: "
        "{$mod: {<field>: ...}} not {$set: 1}",
    ),
    (
        "a modifier after a plain field",
        {"a": 1, "$set": {"b": 1}},
        None,
        "DollarPrefixedFieldName",
        f"The dollar ($) prefixed field '$set' in '$set' {REPLACE_HINT}",
    ),
    # -- paths --------------------------------------------------------------------------------------
    ("empty path", {"$set": {"": 1}}, None, "EmptyFieldName", "An empty update path is not valid."),
    (
        "empty part",
        {"$set": {"a..b": 1}},
        None,
        "EmptyFieldName",
        "The update path 'a..b' contains an empty field name, which is not allowed.",
    ),
    (
        "trailing dot",
        {"$unset": {"a.": 1}},
        None,
        "EmptyFieldName",
        "The update path 'a.' contains an empty field name, which is not allowed.",
    ),
    (
        "positional first",
        {"$set": {"$": 1}},
        None,
        "BadValue",
        "Cannot have positional (i.e. '$') element in the first position in path '$'",
    ),
    (
        "two positionals",
        {"$set": {"a.$.b.$": 1}},
        None,
        "BadValue",
        "Too many positional (i.e. '$') elements found in path 'a.$.b.$'",
    ),
    (
        "identifier first",
        {"$set": {"$[].a": 1}},
        None,
        "BadValue",
        "Cannot have array filter identifier (i.e. '$[<id>]') element in the first position in "
        "path '$[].a'",
    ),
    # -- conflicts ----------------------------------------------------------------------------------
    (
        "same path, two modifiers",
        {"$set": {"a": 1}, "$unset": {"a": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'a' would create a conflict at 'a'",
    ),
    (
        "child then parent",
        {"$set": {"a.b": 1}, "$inc": {"a": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'a' would create a conflict at 'a'",
    ),
    (
        "parent then child",
        {"$set": {"a": 1, "a.b": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'a.b' would create a conflict at 'a'",
    ),
    (
        "deep conflict",
        {"$set": {"a.b": 1}, "$push": {"a.b.c": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'a.b.c' would create a conflict at 'a.b'",
    ),
    (
        "rename target",
        {"$rename": {"a": "b"}, "$set": {"b": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'b' would create a conflict at 'b'",
    ),
    (
        "rename source",
        {"$rename": {"a": "b"}, "$set": {"a": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'a' would create a conflict at 'a'",
    ),
    (
        "array update and a field",
        {"$set": {"a.$[]": 1, "a.b": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'a.b' would create a conflict at 'a'",
    ),
    (
        "positional twice",
        {"$set": {"a.$": 1}, "$inc": {"a.$": 1}},
        None,
        "ConflictingUpdateOperators",
        "Updating the path 'a.$' would create a conflict at 'a.$'",
    ),
    # -- array filters ------------------------------------------------------------------------------
    (
        "identifier without a filter",
        {"$set": {"a.$[x]": 1}},
        None,
        "BadValue",
        "No array filter found for identifier 'x' in path 'a.$[x]'",
    ),
    (
        "unused filter",
        {"$set": {"a": 1}},
        [{"x": 1}],
        "FailedToParse",
        "The array filter for identifier 'x' was not used in the update { $set: { a: 1 } }",
    ),
    (
        "unused filter among used ones",
        {"$set": {"a.$[i]": 5.0}},
        [{"i": 0}, {"j": 0}],
        "FailedToParse",
        "The array filter for identifier 'j' was not used in the update { $set: { a.$[i]: 5.0 } }",
    ),
    (
        "two filters, one identifier",
        {"$set": {"a.$[x]": 1}},
        [{"x": 1}, {"x": 2}],
        "FailedToParse",
        "Found multiple array filters with the same top-level field name x",
    ),
    (
        "a filter over two fields",
        {"$set": {"a.$[x]": 1}},
        [{"x": 1, "y": 2}],
        "FailedToParse",
        "Error parsing array filter :: caused by :: Expected a single top-level field name, "
        "found 'x' and 'y'",
    ),
    (
        "a filter over two fields under $or",
        {"$set": {"a.$[x]": 1}},
        [{"$or": [{"x": 1}, {"y.b": 2}]}],
        "FailedToParse",
        "Error parsing array filter :: caused by :: Expected a single top-level field name, "
        "found 'x' and 'y'",
    ),
    (
        "an identifier must start lowercase",
        {"$set": {"a.$[X]": 1}},
        [{"X": 1}],
        "BadValue",
        "Error parsing array filter :: caused by :: The top-level field name must be an "
        "alphanumeric string beginning with a lowercase letter, found 'X'",
    ),
    (
        "an empty filter",
        {"$set": {"a.$[]": 1}},
        [{}],
        "FailedToParse",
        "Cannot use an expression without a top-level field name in arrayFilters",
    ),
    (
        "a filter that is not a document",
        {"$set": {"a.$[]": 1}},
        [1],
        "TypeMismatch",
        "BSON field 'arrayFilters.0' is the wrong type 'int', expected type 'object'",
    ),
    (
        "a malformed filter",
        {"$set": {"a.$[x]": 1}},
        [{"x": {"$foo": 1}}],
        "BadValue",
        "Error parsing array filter :: caused by :: unknown operator: $foo",
    ),
    # -- arguments ----------------------------------------------------------------------------------
    (
        "inc by a string",
        {"$inc": {"a": "x"}},
        None,
        "TypeMismatch",
        'Cannot increment with non-numeric argument: {a: "x"}',
    ),
    (
        "mul by a bool",
        {"$mul": {"a.b": True}},
        None,
        "TypeMismatch",
        "Cannot multiply with non-numeric argument: {a.b: true}",
    ),
    (
        "inc by a document",
        {"$inc": {"a": {"b": 1}}},
        None,
        "TypeMismatch",
        "Cannot increment with non-numeric argument: {a: { b: 1 }}",
    ),
    (
        "currentDate of a number",
        {"$currentDate": {"a": 1}},
        None,
        "BadValue",
        "int is not valid type for $currentDate. Please use a boolean ('true') or a $type "
        "expression ({$type: 'timestamp/date'}).",
    ),
    (
        "currentDate of an unknown type",
        {"$currentDate": {"a": {"$type": "x"}}},
        None,
        "BadValue",
        "The '$type' string field is required to be 'date' or 'timestamp': "
        "{$currentDate: {field : {$type: 'date'}}}",
    ),
    (
        "currentDate option",
        {"$currentDate": {"a": {"foo": 1}}},
        None,
        "BadValue",
        "Unrecognized $currentDate option: foo",
    ),
    (
        "push clause",
        {"$push": {"a": {"$each": [1], "$foo": 1}}},
        None,
        "BadValue",
        "Unrecognized clause in $push: $foo",
    ),
    (
        "push $each of a number",
        {"$push": {"a": {"$each": 1}}},
        None,
        "BadValue",
        "The argument to $each in $push must be an array but it was of type: int",
    ),
    (
        "push $slice of a fraction",
        {"$push": {"a": {"$each": [1], "$slice": 1.5}}},
        None,
        "BadValue",
        "The value for $slice must be an integer value but was given type: double",
    ),
    (
        "push $slice of a string",
        {"$push": {"a": {"$each": [1], "$slice": "1"}}},
        None,
        "BadValue",
        "The value for $slice must be an integer value but was given type: string",
    ),
    (
        "push $position of a fraction",
        {"$push": {"a": {"$each": [1], "$position": 1.5}}},
        None,
        "BadValue",
        "The value for $position must be an integer value, not of type: double",
    ),
    (
        "push $sort of 2",
        {"$push": {"a": {"$each": [1], "$sort": 2}}},
        None,
        "BadValue",
        "The $sort element value must be either 1 or -1",
    ),
    (
        "push $sort of {}",
        {"$push": {"a": {"$each": [1], "$sort": {}}}},
        None,
        "BadValue",
        "The $sort pattern is empty when it should be a set of fields.",
    ),
    (
        "push $sort of {b: 2}",
        {"$push": {"a": {"$each": [1], "$sort": {"b": 2}}}},
        None,
        "BadValue",
        "The $sort element value must be either 1 or -1",
    ),
    (
        "push $sort of a string",
        {"$push": {"a": {"$each": [1], "$sort": "x"}}},
        None,
        "BadValue",
        "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort "
        "embedded fields",
    ),
    (
        "push $sort field with an empty part",
        {"$push": {"a": {"$each": [1], "$sort": {"b..c": 1}}}},
        None,
        "BadValue",
        "The $sort field is a dotted field but has an empty part: b..c",
    ),
    (
        "addToSet $each of a number",
        {"$addToSet": {"a": {"$each": 1}}},
        None,
        "TypeMismatch",
        "The argument to $each in $addToSet must be an array but it was of type int",
    ),
    (
        "addToSet fields after $each",
        {"$addToSet": {"a": {"$each": [1], "x": 1}}},
        None,
        "BadValue",
        "Found unexpected fields after $each in $addToSet: { $each: [ 1 ], x: 1 }",
    ),
    ("pop 2", {"$pop": {"a": 2}}, None, "FailedToParse", "$pop expects 1 or -1, found: 2"),
    ("pop a string", {"$pop": {"a": "x"}}, None, "FailedToParse", 'Expected a number in: a: "x"'),
    ("pop a fraction", {"$pop": {"a": 1.5}}, None, "FailedToParse", "Expected an integer: a: 1.5"),
    (
        "pullAll of a number",
        {"$pullAll": {"a": 1}},
        None,
        "BadValue",
        "$pullAll requires an array argument but was given a int",
    ),
    (
        "pull with a bad query",
        {"$pull": {"a": {"$foo": 1}}},
        None,
        "BadValue",
        "unknown top level operator: $foo. If you have a field name that starts with a '$' "
        "symbol, consider using $getField or $setField.",
    ),
    (
        "rename to a number",
        {"$rename": {"a": 1}},
        None,
        "BadValue",
        "The 'to' field for $rename must be a string: a: 1",
    ),
    (
        "rename to itself",
        {"$rename": {"a": "a"}},
        None,
        "BadValue",
        'The source and target field for $rename must differ: a: "a"',
    ),
    (
        "rename into itself",
        {"$rename": {"a": "a.b"}},
        None,
        "BadValue",
        'The source and target field for $rename must not be on the same path: a: "a.b"',
    ),
    (
        "rename to a parent",
        {"$rename": {"a.b": "a"}},
        None,
        "BadValue",
        'The source and target field for $rename must not be on the same path: a.b: "a"',
    ),
    (
        "rename from a positional path",
        {"$rename": {"a.$": "b"}},
        None,
        "BadValue",
        "The source field for $rename may not be dynamic: a.$",
    ),
    (
        "rename to an array update",
        {"$rename": {"a": "b.$[]"}},
        None,
        "BadValue",
        "The destination field for $rename may not be dynamic: b.$[]",
    ),
    (
        "rename to an empty path",
        {"$rename": {"a": ""}},
        None,
        "EmptyFieldName",
        "An empty update path is not valid.",
    ),
    (
        "bit of a number",
        {"$bit": {"a": 1}},
        None,
        "BadValue",
        "The $bit modifier is not compatible with a int. You must pass in an embedded document: "
        "{$bit: {field: {and/or/xor: #}}",
    ),
    (
        "bit operator",
        {"$bit": {"a": {"not": 1}}},
        None,
        "BadValue",
        "The $bit modifier only supports 'and', 'or', and 'xor', not 'not' which is an unknown "
        "operator: {not: 1}",
    ),
    (
        "bit of a double",
        {"$bit": {"a": {"and": 1.5}}},
        None,
        "BadValue",
        "The $bit modifier field must be an Integer(32/64 bit); a 'double' is not supported "
        "here: {and: 1.5}",
    ),
    (
        "bit without operations",
        {"$bit": {"a": {}}},
        None,
        "BadValue",
        "You must pass in at least one bitwise operation. The format is: "
        "{$bit: {field: {and/or/xor: #}}",
    ),
]


test_parse_error = errors_test(parse_update, PARSE_ERRORS)


# (id, document, update, arrayFilters, query, codeName, message)
APPLY_ERRORS: list[tuple[str, Doc, Doc, list[Any] | None, Doc | None, str, str]] = [
    # -- types --------------------------------------------------------------------------------------
    (
        "inc a string",
        {"_id": 1, "a": "x"},
        {"$inc": {"a": 1}},
        None,
        None,
        "TypeMismatch",
        "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of "
        "non-numeric type string",
    ),
    (
        "mul an array element",
        {"_id": "k", "a": ["x"]},
        {"$mul": {"a.0": 2}},
        None,
        None,
        "TypeMismatch",
        "Cannot apply $mul to a value of non-numeric type. {_id: \"k\"} has the field '0' of "
        "non-numeric type string",
    ),
    (
        "inc null",
        {"_id": 1, "a": None},
        {"$inc": {"a": 1}},
        None,
        None,
        "TypeMismatch",
        "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of "
        "non-numeric type null",
    ),
    (
        "inc a long past its end",
        {"_id": 1, "a": Int64(2**63 - 1)},
        {"$inc": {"a": 1}},
        None,
        None,
        "BadValue",
        "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for "
        "document {_id: 1}",
    ),
    (
        "mul a long past its end",
        {"_id": 1, "a": Int64(2**62)},
        {"$mul": {"a": 2}},
        None,
        None,
        "BadValue",
        "Failed to apply $mul operations to current value ((NumberLong)4611686018427387904) for "
        "document {_id: 1}",
    ),
    (
        "push to a number",
        {"_id": 1, "a": 1},
        {"$push": {"a": 1}},
        None,
        None,
        "BadValue",
        "The field 'a' must be an array but is of type int in document {_id: 1}",
    ),
    (
        "push to a dotted string",
        {"_id": 1, "a": {"b": "x"}},
        {"$push": {"a.b": 1}},
        None,
        None,
        "BadValue",
        "The field 'a.b' must be an array but is of type string in document {_id: 1}",
    ),
    (
        "addToSet to a number",
        {"_id": 1, "a": 1},
        {"$addToSet": {"a": 1}},
        None,
        None,
        "BadValue",
        "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int",
    ),
    (
        "pop a number",
        {"_id": 1, "a": 1},
        {"$pop": {"a": 1}},
        None,
        None,
        "TypeMismatch",
        "Path 'a' contains an element of non-array type 'int'",
    ),
    (
        "pull from a number",
        {"_id": 1, "a": 1},
        {"$pull": {"a": 1}},
        None,
        None,
        "BadValue",
        "Cannot apply $pull to a non-array value",
    ),
    (
        "pullAll from a document",
        {"_id": 1, "a": {}},
        {"$pullAll": {"a": [1]}},
        None,
        None,
        "BadValue",
        "Cannot apply $pull to a non-array value",
    ),
    (
        "bit on a double",
        {"_id": 1, "a": 1.5},
        {"$bit": {"a": {"and": 1}}},
        None,
        None,
        "BadValue",
        "Cannot apply $bit to a value of non-integral type._id: 1 has the field a of "
        "non-integer type double",
    ),
    # -- paths that cannot be created ---------------------------------------------------------------
    (
        "through a number",
        {"_id": 1, "a": 1},
        {"$set": {"a.b": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot create field 'b' in element {a: 1}",
    ),
    (
        "by name in an array",
        {"_id": 1, "a": [1, 2]},
        {"$set": {"a.b": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot create field 'b' in element {a: [ 1, 2 ]}",
    ),
    (
        "deep, through a number",
        {"_id": 1, "a": {"b": 5}},
        {"$inc": {"a.b.c": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot create field 'c' in element {b: 5}",
    ),
    (
        "through an array element",
        {"_id": 1, "a": [1]},
        {"$set": {"a.0.b": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot create field 'b' in element {0: 1}",
    ),
    (
        "every element is a number",
        {"_id": 1, "a": [1]},
        {"$set": {"a.$[].b": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot create field 'b' in element {0: 1}",
    ),
    (
        "pop through a number",
        {"_id": 1, "a": 1},
        {"$pop": {"a.b": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot use the part (b) of (a.b) to traverse the element ({a: 1})",
    ),
    (
        "pull by name in an array",
        {"_id": 1, "a": [1]},
        {"$pull": {"a.b.c": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot use the part (b) of (a.b.c) to traverse the element ({a: [ 1 ]})",
    ),
    (
        "padding too far",
        {"_id": 1, "a": []},
        {"$set": {"a.1500001": 1}},
        None,
        None,
        "CannotBackfillArray",
        "can't backfill more than 1500000 elements",
    ),
    (
        "a $-prefixed top-level field",
        {"_id": 1},
        {"$set": {"$x": 1}},
        None,
        None,
        "DollarPrefixedFieldName",
        f"The dollar ($) prefixed field '$x' in '$x' {REPLACE_HINT}",
    ),
    # -- _id ----------------------------------------------------------------------------------------
    (
        "set _id",
        {"_id": 1},
        {"$set": {"_id": 2}},
        None,
        None,
        "ImmutableField",
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
    (
        "set _id to an equal value of another type",
        {"_id": 1},
        {"$set": {"_id": 1.0}},
        None,
        None,
        "ImmutableField",
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
    (
        "unset _id",
        {"_id": 1},
        {"$unset": {"_id": 1}},
        None,
        None,
        "ImmutableField",
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
    (
        "inc _id",
        {"_id": 1},
        {"$inc": {"_id": 1}},
        None,
        None,
        "ImmutableField",
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
    (
        "set a field of _id",
        {"_id": {"x": 1}},
        {"$set": {"_id.x": 2}},
        None,
        None,
        "ImmutableField",
        "Performing an update on the path '_id.x' would modify the immutable field '_id'",
    ),
    (
        "add a field to _id",
        {"_id": {"a": 1}},
        {"$set": {"_id.b": 1}},
        None,
        None,
        "ImmutableField",
        "Updating the path '_id' to _id: { a: 1, b: 1 } would modify the immutable field '_id'",
    ),
    (
        "add a field to a scalar _id",
        {"_id": 1},
        {"$set": {"_id.b": 1}},
        None,
        None,
        "PathNotViable",
        "Cannot create field 'b' in element {_id: 1}",
    ),
    (
        "rename _id away",
        {"_id": 1},
        {"$rename": {"_id": "x"}},
        None,
        None,
        "ImmutableField",
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
    (
        "rename onto _id",
        {"_id": 1, "x": 2},
        {"$rename": {"x": "_id"}},
        None,
        None,
        "ImmutableField",
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
    (
        "replace _id",
        {"_id": 1, "a": 1},
        {"_id": 2, "a": 1},
        None,
        None,
        "ImmutableField",
        "After applying the update, the (immutable) field '_id' was found to have been altered "
        "to _id: 2",
    ),
    # -- $rename ------------------------------------------------------------------------------------
    (
        "rename from an array element",
        {"_id": 1, "a": [{"b": 1}]},
        {"$rename": {"a.0.b": "c"}},
        None,
        None,
        "BadValue",
        "The source field cannot be an array element, 'a.0.b' in doc with _id: 1 has an array "
        "field called 'a'",
    ),
    (
        "rename into an array element",
        {"_id": 1, "a": 1, "b": [{}]},
        {"$rename": {"a": "b.0.c"}},
        None,
        None,
        "BadValue",
        "The destination field cannot be an array element, 'b.0.c' in doc with _id: 1 has an "
        "array field called 'b'",
    ),
    (
        "rename over an array element",
        {"_id": 1, "a": 1, "b": [5]},
        {"$rename": {"a": "b.0"}},
        None,
        None,
        "BadValue",
        "The destination field cannot be an array element, 'b.0' in doc with _id: 1 has an "
        "array field called 'b'",
    ),
    (
        "rename through a number",
        {"_id": 1, "a": 1},
        {"$rename": {"a.b": "c"}},
        None,
        None,
        "PathNotViable",
        "cannot use the part (a of a.b) to traverse the element ({a: 1})",
    ),
    (
        "rename to below a number",
        {"_id": 1, "a": 1, "b": 2},
        {"$rename": {"a": "b.c"}},
        None,
        None,
        "PathNotViable",
        "Cannot create field 'c' in element {b: 2}",
    ),
    # -- positional paths ---------------------------------------------------------------------------
    (
        "positional without a query",
        {"_id": 1, "a": [1]},
        {"$set": {"a.$": 1}},
        None,
        None,
        "BadValue",
        "The positional operator did not find the match needed from the query.",
    ),
    (
        "positional, query on no array",
        {"_id": 1, "a": [1]},
        {"$set": {"a.$": 1}},
        None,
        {"_id": 1},
        "BadValue",
        "The positional operator did not find the match needed from the query.",
    ),
    (
        "positional and its index",
        {"_id": 1, "a": [0, 5]},
        {"$set": {"a.$": 1, "a.1": 2}},
        None,
        {"a": 5},
        "ConflictingUpdateOperators",
        "Update created a conflict at 'a.1'",
    ),
    (
        "array update of a missing field",
        {"_id": 1},
        {"$set": {"a.$[]": 1}},
        None,
        None,
        "BadValue",
        "The path 'a' must exist in the document in order to apply array updates.",
    ),
    (
        "array update below a missing field",
        {"_id": 1},
        {"$set": {"x.a.$[e]": 1}},
        [{"e": 1}],
        None,
        "BadValue",
        "The path 'x.a' must exist in the document in order to apply array updates.",
    ),
    (
        "array update of a number",
        {"_id": 1, "a": 1},
        {"$set": {"a.$[]": 1}},
        None,
        None,
        "BadValue",
        "Cannot apply array updates to non-array element a: 1",
    ),
    (
        "$[] and $[x] on one element",
        {"_id": 1, "a": [1]},
        {"$set": {"a.$[]": 1, "a.$[x]": 2}},
        [{"x": 1}],
        None,
        "ConflictingUpdateOperators",
        "Update created a conflict at 'a.0'",
    ),
    (
        "two identifiers, one field of one element",
        {"_id": 1, "a": [{"b": 1}]},
        {"$set": {"a.$[x].b": 1, "a.$[y].b": 2}},
        [{"x.b": 1}, {"y.b": {"$gt": 0}}],
        None,
        "ConflictingUpdateOperators",
        "Update created a conflict at 'a.0.b'",
    ),
]


@cases(("doc", "spec", "filters", "query", "code", "message"), APPLY_ERRORS)
def test_apply_error(
    doc: Doc, spec: Doc, filters: list[Any] | None, query: Doc | None, code: str, message: str
) -> None:
    update = parse_update(spec, filters)
    parsed = None if query is None else parse_filter(query)
    assert query_error(update.apply, doc, now_ms=NOW, query=parsed) == (code, message)


def test_failed_update_leaves_the_document() -> None:
    doc = {"_id": 1, "a": 1, "b": "x"}
    with pytest.raises(QueryError):
        parse_update({"$inc": {"a": 1, "b": 1}}).apply(doc, now_ms=NOW)
    assert doc == {"_id": 1, "a": 1, "b": "x"}


def test_inserted_id_must_be_storable() -> None:
    update = parse_update({"$set": {"_id": [1]}})
    with pytest.raises(InvalidIdField) as info:
        update.apply({}, now_ms=NOW, inserting=True)
    assert info.value.message == "The '_id' value cannot be of type array"
