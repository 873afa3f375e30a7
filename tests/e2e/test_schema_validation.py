"""Schema validation through pymongo: validators of query operators and $jsonSchema on create and
collMod, 121 DocumentValidationFailure with MongoDB 5+'s errInfo (failingDocumentId, details) in
writeErrors (with the statement's index, ordered and unordered) and in findAndModify's error,
validationLevel strict/moderate/off, validationAction error/warn (the server logs mongod's 20294
warning), bypassDocumentValidation, listCollections' options, the refusals of bad validators
(codes and messages), $jsonSchema in queries, and changeStreamPreAndPostImages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient, ReturnDocument
from pymongo.database import Database
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

Db = Database[dict[str, Any]]

STUDENTS = {
    "$jsonSchema": {
        "bsonType": "object",
        "title": "Student Object Validation",
        "required": ["name", "year"],
        "properties": {
            "name": {"bsonType": "string", "description": "must be a string"},
            "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017},
            "gpa": {"bsonType": ["double"]},
        },
    }
}


def options(db: Db, name: str) -> dict[str, Any]:
    (info,) = list(db.list_collections(filter={"name": name}))
    return dict(info["options"])


def write_error(exc: pytest.ExceptionInfo[WriteError]) -> dict[str, Any]:
    details = exc.value.details
    assert details is not None
    return dict(details)


# -- $jsonSchema ----------------------------------------------------------------------------------


def test_json_schema_insert_reports_mongodb_details(mongo_db: Db) -> None:
    mongo_db.create_collection("students", validator=STUDENTS)
    mongo_db.students.insert_one({"_id": 1, "name": "Ann", "year": 2020})
    with pytest.raises(WriteError) as exc:
        mongo_db.students.insert_one({"_id": 2, "name": 7, "year": 2000, "gpa": 3})
    err = write_error(exc)
    assert err["code"] == 121
    assert err["errmsg"] == "Document failed validation"
    assert err["errInfo"] == {
        "failingDocumentId": 2,
        "details": {
            "operatorName": "$jsonSchema",
            "title": "Student Object Validation",
            "schemaRulesNotSatisfied": [
                {
                    "operatorName": "properties",
                    "propertiesNotSatisfied": [
                        {
                            "propertyName": "name",
                            "description": "must be a string",
                            "details": [
                                {
                                    "operatorName": "bsonType",
                                    "specifiedAs": {"bsonType": "string"},
                                    "reason": "type did not match",
                                    "consideredValue": 7,
                                    "consideredType": "int",
                                }
                            ],
                        },
                        {
                            "propertyName": "year",
                            "details": [
                                {
                                    "operatorName": "minimum",
                                    "specifiedAs": {"minimum": 2017},
                                    "reason": "comparison failed",
                                    "consideredValue": 2000,
                                }
                            ],
                        },
                        {
                            "propertyName": "gpa",
                            "details": [
                                {
                                    "operatorName": "bsonType",
                                    "specifiedAs": {"bsonType": ["double"]},
                                    "reason": "type did not match",
                                    "consideredValue": 3,
                                    "consideredType": "int",
                                }
                            ],
                        },
                    ],
                }
            ],
        },
    }
    assert [d["_id"] for d in mongo_db.students.find()] == [1]


def test_json_schema_required_and_object_keywords(mongo_db: Db) -> None:
    mongo_db.create_collection(
        "c",
        validator={
            "$jsonSchema": {
                "required": ["a", "b"],
                "properties": {"_id": {}, "a": {}, "b": {}},
                "additionalProperties": False,
                "minProperties": 3,
            }
        },
    )
    with pytest.raises(WriteError) as exc:
        mongo_db.c.insert_one({"_id": 1, "a": 1, "x": 2, "y": 3})
    assert write_error(exc)["errInfo"]["details"]["schemaRulesNotSatisfied"] == [
        {
            "operatorName": "additionalProperties",
            "specifiedAs": {"additionalProperties": False},
            "additionalProperties": ["x", "y"],
        },
        {
            "operatorName": "required",
            "specifiedAs": {"required": ["a", "b"]},
            "missingProperties": ["b"],
        },
    ]
    with pytest.raises(WriteError) as exc:
        mongo_db.c.insert_one({"_id": 2, "a": 1})
    assert write_error(exc)["errInfo"]["details"]["schemaRulesNotSatisfied"] == [
        {
            "operatorName": "required",
            "specifiedAs": {"required": ["a", "b"]},
            "missingProperties": ["b"],
        },
        {
            "operatorName": "minProperties",
            "specifiedAs": {"minProperties": 3},
            "reason": "specified number of properties was not satisfied",
            "numberOfProperties": 2,
        },
    ]
    mongo_db.c.insert_one({"_id": 3, "a": 1, "b": 2})


KEYWORD_CASES: list[tuple[dict[str, Any], Any, dict[str, Any]]] = [
    (
        {"bsonType": "string", "pattern": "^a"},
        "bc",
        {
            "operatorName": "pattern",
            "specifiedAs": {"pattern": "^a"},
            "reason": "regular expression did not match",
            "consideredValue": "bc",
        },
    ),
    (
        {"maxLength": 2},
        "abc",
        {
            "operatorName": "maxLength",
            "specifiedAs": {"maxLength": 2},
            "reason": "specified string length was not satisfied",
            "consideredValue": "abc",
        },
    ),
    (
        {"multipleOf": 3},
        7,
        {
            "operatorName": "multipleOf",
            "specifiedAs": {"multipleOf": 3},
            "reason": "considered value is not a multiple of the specified value",
            "consideredValue": 7,
        },
    ),
    (
        {"maximum": 5, "exclusiveMaximum": True},
        5,
        {
            "operatorName": "maximum",
            "specifiedAs": {"maximum": 5, "exclusiveMaximum": True},
            "reason": "comparison failed",
            "consideredValue": 5,
        },
    ),
    (
        {"enum": ["x", "y"]},
        "z",
        {
            "operatorName": "enum",
            "specifiedAs": {"enum": ["x", "y"]},
            "reason": "value was not found in enum",
            "consideredValue": "z",
        },
    ),
    (
        {"minItems": 2},
        [1],
        {
            "operatorName": "minItems",
            "specifiedAs": {"minItems": 2},
            "reason": "array did not match specified length",
            "consideredValue": [1],
            "numberOfItems": 1,
        },
    ),
    (
        {"uniqueItems": True},
        [1, 2, 1],
        {
            "operatorName": "uniqueItems",
            "specifiedAs": {"uniqueItems": True},
            "reason": "found a duplicate item",
            "consideredValue": [1, 2, 1],
            "duplicatedValue": 1,
        },
    ),
    (
        {"items": {"bsonType": "int"}},
        [1, "x"],
        {
            "operatorName": "items",
            "reason": "At least one item did not match the sub-schema",
            "itemIndex": 1,
            "details": [
                {
                    "operatorName": "bsonType",
                    "specifiedAs": {"bsonType": "int"},
                    "reason": "type did not match",
                    "consideredValue": "x",
                    "consideredType": "string",
                }
            ],
        },
    ),
    (
        {"items": [{}], "additionalItems": False},
        [1, 2, 3],
        {
            "operatorName": "additionalItems",
            "specifiedAs": {"additionalItems": False},
            "reason": "found additional items",
            "additionalItems": [2, 3],
        },
    ),
    (
        {"oneOf": [{"bsonType": "int"}, {"minimum": 0}]},
        3,
        {
            "operatorName": "oneOf",
            "reason": "more than one subschema matched",
            "matchingSchemaIndexes": [0, 1],
        },
    ),
    (
        {"anyOf": [{"bsonType": "string"}, {"bsonType": "bool"}]},
        3,
        {
            "operatorName": "anyOf",
            "schemasNotSatisfied": [
                {
                    "index": 0,
                    "details": [
                        {
                            "operatorName": "bsonType",
                            "specifiedAs": {"bsonType": "string"},
                            "reason": "type did not match",
                            "consideredValue": 3,
                            "consideredType": "int",
                        }
                    ],
                },
                {
                    "index": 1,
                    "details": [
                        {
                            "operatorName": "bsonType",
                            "specifiedAs": {"bsonType": "bool"},
                            "reason": "type did not match",
                            "consideredValue": 3,
                            "consideredType": "int",
                        }
                    ],
                },
            ],
        },
    ),
    (
        {"not": {"bsonType": "int"}},
        3,
        {"operatorName": "not", "reason": "child expression matched"},
    ),
    (
        {"dependencies": {"a": ["b", "c"]}},
        {"a": 1, "c": 2},
        {
            "operatorName": "dependencies",
            "failingDependencies": [{"conditionalProperty": "a", "missingProperties": ["b"]}],
        },
    ),
    (
        {"type": "number"},
        "1",
        {
            "operatorName": "type",
            "specifiedAs": {"type": "number"},
            "reason": "type did not match",
            "consideredValue": "1",
            "consideredType": "string",
        },
    ),
]


@pytest.mark.parametrize(("schema", "value", "detail"), KEYWORD_CASES)
def test_json_schema_keyword_details(
    mongo_db: Db, schema: dict[str, Any], value: Any, detail: dict[str, Any]
) -> None:
    mongo_db.create_collection("k", validator={"$jsonSchema": {"properties": {"v": schema}}})
    with pytest.raises(WriteError) as exc:
        mongo_db.k.insert_one({"_id": 1, "v": value})
    assert write_error(exc)["errInfo"]["details"]["schemaRulesNotSatisfied"] == [
        {
            "operatorName": "properties",
            "propertiesNotSatisfied": [{"propertyName": "v", "details": [detail]}],
        }
    ]
    assert mongo_db.k.count_documents({}) == 0


def test_json_schema_top_level_type_without_object_matches_nothing(mongo_db: Db) -> None:
    mongo_db.create_collection("c", validator={"$jsonSchema": {"bsonType": "string"}})
    with pytest.raises(WriteError) as exc:
        mongo_db.c.insert_one({"_id": 1})
    assert write_error(exc)["errInfo"]["details"] == {
        "operatorName": "$jsonSchema",
        "specifiedAs": {"$jsonSchema": {"bsonType": "string"}},
        "reason": "expression always evaluates to false",
    }


def test_json_schema_in_queries(mongo_db: Db) -> None:
    mongo_db.c.insert_many([{"_id": 1, "a": 5}, {"_id": 2, "a": "x"}, {"_id": 3}])
    schema = {"$jsonSchema": {"required": ["a"], "properties": {"a": {"bsonType": "int"}}}}
    assert [d["_id"] for d in mongo_db.c.find(schema)] == [1]
    assert [d["_id"] for d in mongo_db.c.find({"$nor": [schema]})] == [2, 3]
    assert mongo_db.c.count_documents(schema) == 1
    assert [d["_id"] for d in mongo_db.c.aggregate([{"$match": schema}])] == [1]


# -- query operator validators ------------------------------------------------------------------


def test_query_operator_validator_one_clause(mongo_db: Db) -> None:
    mongo_db.create_collection("c", validator={"qty": {"$gt": 5}})
    with pytest.raises(WriteError) as exc:
        mongo_db.c.insert_one({"_id": 1, "qty": 3})
    assert write_error(exc)["errInfo"] == {
        "failingDocumentId": 1,
        "details": {
            "operatorName": "$gt",
            "specifiedAs": {"qty": {"$gt": 5}},
            "reason": "comparison failed",
            "consideredValue": 3,
        },
    }


def test_query_operator_validator_clauses(mongo_db: Db) -> None:
    validator = {
        "qty": {"$gt": 5, "$lt": 100},
        "status": {"$in": ["A", "D"]},
        "sku": {"$exists": True},
        "tags": {"$type": "array"},
        "$or": [{"price": {"$lt": 10}}, {"sale": True}],
    }
    mongo_db.create_collection("c", validator=validator)
    with pytest.raises(WriteError) as exc:
        mongo_db.c.insert_one({"_id": 1, "qty": [1, 200], "status": "B", "tags": "x", "price": 20})
    assert write_error(exc)["errInfo"]["details"] == {
        "operatorName": "$and",
        "clausesNotSatisfied": [
            {
                "index": 2,
                "details": {
                    "operatorName": "$in",
                    "specifiedAs": {"status": {"$in": ["A", "D"]}},
                    "reason": "no matching value found in array",
                    "consideredValue": "B",
                },
            },
            {
                "index": 3,
                "details": {
                    "operatorName": "$exists",
                    "specifiedAs": {"sku": {"$exists": True}},
                    "reason": "path does not exist",
                },
            },
            {
                "index": 4,
                "details": {
                    "operatorName": "$type",
                    "specifiedAs": {"tags": {"$type": "array"}},
                    "reason": "type did not match",
                    "consideredValue": "x",
                    "consideredType": "string",
                },
            },
            {
                "index": 5,
                "details": {
                    "operatorName": "$or",
                    "clausesNotSatisfied": [
                        {
                            "index": 0,
                            "details": {
                                "operatorName": "$lt",
                                "specifiedAs": {"price": {"$lt": 10}},
                                "reason": "comparison failed",
                                "consideredValue": 20,
                            },
                        },
                        {
                            "index": 1,
                            "details": {
                                "operatorName": "$eq",
                                "specifiedAs": {"sale": True},
                                "reason": "field was missing",
                            },
                        },
                    ],
                },
            },
        ],
    }
    mongo_db.c.insert_one({"_id": 2, "qty": 6, "status": "A", "sku": 1, "tags": [], "sale": True})


def test_negations_and_expr_details(mongo_db: Db) -> None:
    mongo_db.create_collection(
        "c",
        validator={
            "a": {"$ne": 1, "$not": {"$gt": 5}},
            "$expr": {"$lt": ["$a", "$b"]},
        },
    )
    with pytest.raises(WriteError) as exc:
        mongo_db.c.insert_one({"_id": 1, "a": 7, "b": 2})
    details = write_error(exc)["errInfo"]["details"]
    assert details["operatorName"] == "$and"
    assert details["clausesNotSatisfied"] == [
        {
            "index": 1,
            "details": {
                "operatorName": "$not",
                "details": {
                    "operatorName": "$gt",
                    "specifiedAs": {"a": {"$gt": 5}},
                    "reason": "comparison succeeded",
                    "consideredValue": 7,
                },
            },
        },
        {
            "index": 2,
            "details": {
                "operatorName": "$expr",
                "specifiedAs": {"$expr": {"$lt": ["$a", "$b"]}},
                "reason": "expression did not match",
                "expressionResult": False,
            },
        },
    ]
    with pytest.raises(WriteError) as exc:
        mongo_db.c.insert_one({"_id": 2, "a": 1, "b": 2})
    (only,) = write_error(exc)["errInfo"]["details"]["clausesNotSatisfied"]
    assert only == {
        "index": 0,
        "details": {
            "operatorName": "$ne",
            "specifiedAs": {"a": {"$ne": 1}},
            "reason": "comparison succeeded",
            "consideredValue": 1,
        },
    }


# -- batches, updates, findAndModify ---------------------------------------------------------------


@pytest.mark.parametrize("ordered", [True, False])
def test_batches_report_each_failing_statement(mongo_db: Db, ordered: bool) -> None:
    mongo_db.create_collection("c", validator={"a": {"$type": "int"}})
    with pytest.raises(BulkWriteError) as exc:
        mongo_db.c.insert_many(
            [{"_id": 1, "a": 1}, {"_id": 2, "a": "x"}, {"_id": 3, "a": 3}, {"_id": 4}],
            ordered=ordered,
        )
    result = exc.value.details
    errors = result["writeErrors"]
    assert [(e["index"], e["code"], e["errmsg"]) for e in errors] == (
        [(1, 121, "Document failed validation")]
        if ordered
        else [(1, 121, "Document failed validation"), (3, 121, "Document failed validation")]
    )
    assert errors[0]["errInfo"]["failingDocumentId"] == 2
    assert result["nInserted"] == (1 if ordered else 2)
    assert [d["_id"] for d in mongo_db.c.find()] == ([1] if ordered else [1, 3])


def test_updates_are_validated(mongo_db: Db) -> None:
    mongo_db.create_collection("c", validator={"a": {"$lte": 10}})
    mongo_db.c.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 2}])
    with pytest.raises(WriteError) as exc:
        mongo_db.c.update_one({"_id": 1}, {"$set": {"a": 11}})
    err = write_error(exc)
    assert (err["index"], err["code"]) == (0, 121)
    assert err["errInfo"] == {
        "failingDocumentId": 1,
        "details": {
            "operatorName": "$lte",
            "specifiedAs": {"a": {"$lte": 10}},
            "reason": "comparison failed",
            "consideredValue": 11,
        },
    }
    with pytest.raises(WriteError):
        mongo_db.c.replace_one({"_id": 2}, {"a": 50})
    with pytest.raises(WriteError):
        mongo_db.c.update_one({"_id": 9}, {"$set": {"a": 99}}, upsert=True)
    assert list(mongo_db.c.find()) == [{"_id": 1, "a": 1}, {"_id": 2, "a": 2}]
    result = mongo_db.c.update_many({}, {"$inc": {"a": 1}})
    assert (result.matched_count, result.modified_count) == (2, 2)


def test_find_and_modify_failure_and_bypass(mongo_db: Db) -> None:
    mongo_db.create_collection("c", validator={"a": {"$lte": 10}})
    mongo_db.c.insert_one({"_id": 1, "a": 1})
    with pytest.raises(OperationFailure) as exc:
        mongo_db.c.find_one_and_update({"_id": 1}, {"$set": {"a": 20}})
    assert exc.value.code == 121
    details = exc.value.details
    assert details is not None
    assert details["codeName"] == "DocumentValidationFailure"
    assert details["errmsg"] == "Document failed validation"
    assert details["errInfo"]["failingDocumentId"] == 1
    doc = mongo_db.c.find_one_and_update(
        {"_id": 1},
        {"$set": {"a": 20}},
        return_document=ReturnDocument.AFTER,
        bypassDocumentValidation=True,
    )
    assert doc == {"_id": 1, "a": 20}


def test_bypass_document_validation(mongo_db: Db) -> None:
    mongo_db.create_collection("c", validator={"a": {"$type": "int"}})
    mongo_db.c.insert_one({"_id": 1, "a": "x"}, bypass_document_validation=True)
    mongo_db.c.insert_many([{"_id": 2}], bypass_document_validation=True)
    mongo_db.c.update_one({"_id": 2}, {"$set": {"b": 1}}, bypass_document_validation=True)
    reply = mongo_db.command(
        "update",
        "c",
        updates=[{"q": {"_id": 2}, "u": {"$set": {"b": 2}}}],
        bypassDocumentValidation=True,
    )
    assert (reply["n"], reply["nModified"]) == (1, 1)
    assert mongo_db.c.count_documents({}) == 2


# -- levels and actions ----------------------------------------------------------------------------


def test_moderate_lets_invalid_documents_be_updated(mongo_db: Db) -> None:
    mongo_db.c.insert_many([{"_id": 1, "a": "bad"}, {"_id": 2, "a": 1}])
    mongo_db.command("collMod", "c", validator={"a": {"$type": "int"}}, validationLevel="moderate")
    mongo_db.c.update_one({"_id": 1}, {"$set": {"b": 1}})  # already invalid: not checked
    with pytest.raises(WriteError) as exc:
        mongo_db.c.update_one({"_id": 2}, {"$set": {"a": "x"}})  # valid -> invalid
    assert write_error(exc)["code"] == 121
    with pytest.raises(WriteError):
        mongo_db.c.insert_one({"_id": 3, "a": "x"})  # inserts are always checked
    mongo_db.command("collMod", "c", validationLevel="strict")
    with pytest.raises(WriteError):
        mongo_db.c.update_one({"_id": 1}, {"$set": {"b": 2}})
    mongo_db.command("collMod", "c", validationLevel="off")
    mongo_db.c.insert_one({"_id": 4, "a": "x"})
    assert mongo_db.c.count_documents({}) == 3


def test_warn_writes_and_logs(mongo_client: MongoClient[dict[str, Any]], mongo_db: Db) -> None:
    mongo_db.create_collection("c", validator={"a": {"$type": "int"}}, validationAction="warn")
    mongo_db.c.insert_one({"_id": "warned", "a": "x"})
    assert mongo_db.c.find_one() == {"_id": "warned", "a": "x"}
    lines = [json.loads(line) for line in mongo_client.admin.command("getLog", "global")["log"]]
    (entry,) = [
        e for e in lines if e.get("id") == 20294 and e["attr"]["document"]["_id"] == "warned"
    ]
    assert (entry["s"], entry["c"], entry["msg"]) == (
        "W",
        "STORAGE",
        "Document would fail validation",
    )
    assert entry["attr"]["namespace"] == f"{mongo_db.name}.c"
    assert entry["attr"]["errInfo"]["details"]["operatorName"] == "$type"


# -- options: create, collMod, listCollections ------------------------------------------------------


def test_list_collections_shows_what_was_set(mongo_db: Db) -> None:
    mongo_db.create_collection("plain", validator={"a": 1})
    assert options(mongo_db, "plain") == {"validator": {"a": 1}}
    mongo_db.create_collection(
        "full", validator={"a": 1}, validationLevel="moderate", validationAction="warn"
    )
    assert options(mongo_db, "full") == {
        "validator": {"a": 1},
        "validationLevel": "moderate",
        "validationAction": "warn",
    }
    mongo_db.command(
        "collMod", "full", validator={"b": {"$exists": True}}, validationAction="error"
    )
    assert options(mongo_db, "full") == {
        "validator": {"b": {"$exists": True}},
        "validationLevel": "moderate",
        "validationAction": "error",
    }
    mongo_db.command("collMod", "full", validator={})
    assert options(mongo_db, "full") == {"validationLevel": "moderate", "validationAction": "error"}
    mongo_db.full.insert_one({"_id": 1})


BAD_VALIDATORS: list[tuple[dict[str, Any], int, str]] = [
    ({"$jsonSchema": {"foo": 1}}, 9, "Unknown $jsonSchema keyword: foo"),
    ({"$jsonSchema": {"$ref": "#/a"}}, 9, "$jsonSchema keyword '$ref' is not currently supported"),
    (
        {"$jsonSchema": {"format": "x"}},
        9,
        "$jsonSchema keyword 'format' is not currently supported",
    ),
    (
        {"$jsonSchema": {"type": "integer"}},
        9,
        "$jsonSchema type 'integer' is not currently supported.",
    ),
    ({"$jsonSchema": {"bsonType": "foo"}}, 2, "Unknown type name alias: foo"),
    (
        {"$jsonSchema": {"required": []}},
        9,
        "$jsonSchema keyword 'required' cannot be an empty array",
    ),
    ({"$jsonSchema": {"minimum": "x"}}, 14, "$jsonSchema keyword 'minimum' must be a number"),
    ({"$jsonSchema": {"anyOf": []}}, 2, "$jsonSchema keyword 'anyOf' must be a non-empty array"),
    (
        {"$jsonSchema": {"type": "object", "bsonType": "object"}},
        9,
        "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'",
    ),
    ({"$jsonSchema": 1}, 14, "$jsonSchema must be an object"),
    ({"$where": "this.a"}, 2, "$where is not allowed in this context"),
    ({"$text": {"$search": "x"}}, 2, "$text is not allowed in this context"),
    ({"a": {"$foo": 1}}, 2, "unknown operator: $foo"),
]


@pytest.mark.parametrize(("validator", "code", "message"), BAD_VALIDATORS)
def test_bad_validators_are_refused(
    mongo_db: Db, validator: dict[str, Any], code: int, message: str
) -> None:
    for command in (
        {"create": "c", "validator": validator},
        {"collMod": "existing", "validator": validator},
    ):
        mongo_db.create_collection(
            "existing"
        ) if "existing" not in mongo_db.list_collection_names() else None
        with pytest.raises(OperationFailure) as exc:
            mongo_db.command(command)
        assert exc.value.code == code
        assert str(exc.value.details["errmsg"]) == (
            f"Parsing of collection validator failed :: caused by :: {message}"
        )
    assert "c" not in mongo_db.list_collection_names()


def test_near_is_refused_in_a_validator(mongo_db: Db) -> None:
    with pytest.raises(OperationFailure) as exc:
        mongo_db.create_collection("c", validator={"loc": {"$near": [0, 0]}})
    assert exc.value.code == 5626500


@pytest.mark.parametrize(
    ("field", "value", "code", "message"),
    [
        (
            "validator",
            1,
            14,
            "BSON field 'create.validator' is the wrong type 'int', expected type 'object'",
        ),
        (
            "validationLevel",
            "foo",
            2,
            "Enumeration value 'foo' for field 'create.validationLevel' is not a valid value.",
        ),
        (
            "validationAction",
            "x",
            2,
            "Enumeration value 'x' for field 'create.validationAction' is not a valid value.",
        ),
        (
            "validationLevel",
            1,
            14,
            "BSON field 'create.validationLevel' is the wrong type 'int', expected type 'string'",
        ),
    ],
)
def test_create_option_types(mongo_db: Db, field: str, value: Any, code: int, message: str) -> None:
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command({"create": "c", field: value})
    assert (exc.value.code, exc.value.details["errmsg"]) == (code, message)


def test_collmod_of_a_missing_collection(mongo_db: Db) -> None:
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("collMod", "nope", validator={"a": 1})
    assert exc.value.code == 26


# -- changeStreamPreAndPostImages ----------------------------------------------------------------


def test_change_stream_images_option(mongo_db: Db) -> None:
    mongo_db.create_collection("on", changeStreamPreAndPostImages={"enabled": True})
    assert options(mongo_db, "on") == {"changeStreamPreAndPostImages": {"enabled": True}}
    mongo_db.create_collection("off", changeStreamPreAndPostImages={"enabled": False})
    assert options(mongo_db, "off") == {}
    mongo_db.command("collMod", "off", changeStreamPreAndPostImages={"enabled": True})
    assert options(mongo_db, "off") == {"changeStreamPreAndPostImages": {"enabled": True}}
    mongo_db.command("collMod", "on", changeStreamPreAndPostImages={"enabled": False})
    assert options(mongo_db, "on") == {}
    mongo_db.on.insert_one({"_id": 1})


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        (
            True,
            14,
            "BSON field 'create.changeStreamPreAndPostImages' is the wrong type 'bool', expected type 'object'",
        ),
        (
            {},
            40414,
            "BSON field 'create.changeStreamPreAndPostImages.enabled' is missing but a required field",
        ),
        (
            {"enabled": 1},
            14,
            "BSON field 'create.changeStreamPreAndPostImages.enabled' is the wrong type 'int', expected type 'bool'",
        ),
        (
            {"enabled": True, "x": 1},
            40415,
            "BSON field 'create.changeStreamPreAndPostImages.x' is an unknown field.",
        ),
    ],
)
def test_change_stream_images_refusals(mongo_db: Db, value: Any, code: int, message: str) -> None:
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command({"create": "c", "changeStreamPreAndPostImages": value})
    assert (exc.value.code, exc.value.details["errmsg"]) == (code, message)


def test_validator_survives_a_restart(start_server: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "data")
    srv = start_server(path=path)
    with MongoClient(srv.uri) as client:
        client.db.create_collection(
            "c", validator={"a": {"$gte": Int64(0)}}, validationLevel="strict"
        )
    srv.stop()
    srv = start_server(path=path)
    with MongoClient(srv.uri) as client:
        with pytest.raises(WriteError) as exc:
            client.db.c.insert_one({"_id": 1, "a": -1})
        assert write_error(exc)["code"] == 121
        assert options(client.db, "c")["validationLevel"] == "strict"
