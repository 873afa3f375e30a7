"""Server-side JavaScript through pymongo ($where, $function, $accumulator, mapReduce): MongoDB's
documented examples give MongoDB's documented results, with mongod's errors (codes and messages)
for what it refuses, and every call bounded: a runaway function ends with 50 under maxTimeMS and
with 11601 under killOp, while the server goes on answering."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Code, Decimal128, Int64, ObjectId
from bson.datetime_ms import DatetimeMS
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import OperationFailure

PLAYERS = [
    {"_id": 1, "name": "Miss Cheevous", "scores": [10, 5, 10]},
    {"_id": 2, "name": "Miss Ann Thrope", "scores": [10, 10, 10]},
    {"_id": 3, "name": "Mrs. Eppie Delta ", "scores": [9, 8, 8]},
]
ANN = "15b0a220baa16331e8d80e15367677ad"  # hex_md5("Miss Ann Thrope"), from MongoDB's docs


def _fails(code: int, fn: Any) -> OperationFailure:
    with pytest.raises(OperationFailure) as info:
        fn()
    assert info.value.code == code, info.value.details
    return info.value


# -- $where ----------------------------------------------------------------------------------------


def test_where_documented_examples(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.players.insert_many(PLAYERS)
    where = Code(f"function() {{ return (hex_md5(this.name) == '{ANN}') }}")
    assert list(mongo_db.players.find({"$where": where})) == [PLAYERS[1]]
    expr = {
        "$function": {
            "body": Code(f"function(name) {{ return hex_md5(name) == '{ANN}'; }}"),
            "args": ["$name"],
            "lang": "js",
        }
    }
    assert list(mongo_db.players.find({"$expr": expr})) == [PLAYERS[1]]


def test_where_this_and_obj(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_many(
        [
            {"_id": 1, "credits": 5, "debits": 5, "active": True},
            {"_id": 2, "credits": 1, "debits": 5, "active": True},
            {"_id": 3, "credits": 9, "debits": 5, "active": False},
        ]
    )

    def ids(flt: dict[str, Any]) -> list[int]:
        return [d["_id"] for d in mongo_db.c.find(flt).sort("_id", 1)]

    assert ids({"$where": "this.credits == this.debits"}) == [1]
    assert ids({"$where": "obj.credits == obj.debits"}) == [1]
    assert ids({"$where": Code("function() { return (this.credits == this.debits) }")}) == [1]
    assert ids({"$where": Code("function() { return obj.credits == obj.debits; }")}) == [1]
    assert ids({"$where": "this.credits == this.debits || this.credits > this.debits"}) == [1, 3]
    assert ids({"active": True, "$where": "this.credits - this.debits < 0"}) == [2]
    assert ids({"$where": Code("this.credits > limit", {"limit": 4})}) == [1, 3]
    assert ids({"$where": "return true;"}) == [1, 2, 3]
    # The count command runs it; count_documents is a pipeline, whose $match refuses it.
    assert mongo_db.command("count", "c", query={"$where": "this.credits >= 5"})["n"] == 2
    assert mongo_db.c.distinct("_id", {"$where": "this.credits >= 5"}) == [1, 3]
    assert mongo_db.c.delete_many({"$where": "this.credits < 5"}).deleted_count == 1
    assert mongo_db.c.update_many({"$where": "this.active"}, {"$set": {"x": 1}}).modified_count == 1


def test_where_errors(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1})
    err = _fails(139, lambda: list(mongo_db.c.find({"$where": "throw new Error('boom')"})))
    assert err.details is not None
    assert err.details["codeName"] == "JSInterpreterFailure"
    assert err.details["errmsg"].startswith("Error: boom :\n")
    err = _fails(139, lambda: list(mongo_db.c.find({"$where": "nosuch.x == 1"})))
    assert err.details is not None
    assert err.details["errmsg"].startswith("ReferenceError: nosuch is not defined :\n")
    err = _fails(2, lambda: list(mongo_db.c.find({"$where": 5})))
    assert err.details is not None and err.details["errmsg"] == "$where got bad type"
    err = _fails(2, lambda: list(mongo_db.c.find({"a": {"$elemMatch": {"$where": "true"}}})))
    assert err.details is not None
    assert err.details["errmsg"] == "$where can only be applied to the top-level document"
    err = _fails(2, lambda: mongo_db.create_collection("v", validator={"$where": "true"}))
    assert err.details is not None
    assert err.details["errmsg"] == (
        "Parsing of collection validator failed :: caused by :: "
        "$where is not allowed in this context"
    )


# -- $function -------------------------------------------------------------------------------------


def test_function_documented_example(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.players.insert_many(PLAYERS)
    out = list(
        mongo_db.players.aggregate(
            [
                {
                    "$addFields": {
                        "isFound": {
                            "$function": {
                                "body": Code(
                                    f"function(name) {{ return hex_md5(name) == '{ANN}' }}"
                                ),
                                "args": ["$name"],
                                "lang": "js",
                            }
                        },
                        "message": {
                            "$function": {
                                "body": Code(
                                    "function(name, scores) { let total = Array.sum(scores);"
                                    " return `Hello ${name}.  Your total score is ${total}.` }"
                                ),
                                "args": ["$name", "$scores"],
                                "lang": "js",
                            }
                        },
                    }
                },
                {"$sort": {"_id": 1}},
            ]
        )
    )
    assert out == [
        {
            **PLAYERS[0],
            "isFound": False,
            "message": "Hello Miss Cheevous.  Your total score is 25.",
        },
        {
            **PLAYERS[1],
            "isFound": True,
            "message": "Hello Miss Ann Thrope.  Your total score is 30.",
        },
        {
            **PLAYERS[2],
            "isFound": False,
            "message": "Hello Mrs. Eppie Delta .  Your total score is 25.",
        },
    ]


def test_function_errors(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1, "a": [1, 2]})

    def project(spec: Any) -> Any:
        return lambda: list(mongo_db.c.aggregate([{"$project": {"x": spec}}]))

    body = Code("function(a) { return a }")
    for spec, code, message in [
        (5, 31260, "$function requires an object as an argument, found: int"),
        ({"args": [], "lang": "js"}, 31261, "The body function must be specified."),
        (
            {"body": "$a", "args": [], "lang": "js"},
            31432,
            "The body function must be a constant expression",
        ),
        (
            {"body": 5, "args": [], "lang": "js"},
            31262,
            "The body function must evaluate to type string or code",
        ),
        ({"body": body, "lang": "js"}, 31263, "The args field must be specified."),
        ({"body": body, "args": []}, 31418, "The lang field must be specified."),
        (
            {"body": body, "args": [], "lang": "py"},
            31419,
            "Currently the only supported language specifier is 'js'.",
        ),
        (
            {"body": body, "args": "$_id", "lang": "js"},
            31266,
            "The args field must be of type array",
        ),
    ]:
        err = _fails(code, project({"$function": spec}))
        assert err.details is not None and err.details["errmsg"] == message
    thrown = {"body": "function() { throw new TypeError('bad') }", "args": [], "lang": "js"}
    err = _fails(139, project({"$function": thrown}))
    assert err.details is not None and err.details["errmsg"].startswith("TypeError: bad :\n")


def test_function_values_both_ways(mongo_db: Database[dict[str, Any]]) -> None:
    oid = ObjectId("5f0c8c0e2f8fb814b56fa181")
    doc = {
        "_id": 1,
        "i": 7,
        "l": Int64(2**40),
        "d": 1.5,
        "m": Decimal128("1.25"),
        "t": DatetimeMS(86_400_000),
        "o": oid,
        "s": "é",
        "n": None,
        "a": [1, {"b": True}],
    }
    mongo_db.c.insert_one(doc)
    types = Code(
        "function(i, l, d, m, t, o, s, n, a, missing) { return [typeof i, l instanceof NumberLong,"
        " typeof d, m instanceof NumberDecimal, t instanceof Date, o instanceof ObjectId, s, n,"
        " Array.isArray(a), missing, o.str, t.getTime(), l.toString()] }"
    )
    back = Code(
        "function(i, l, d, m, t, o, a) { return {i: i, l: l, d: d, m: m, t: t, o: o, a: a,"
        f" int: NumberInt(3), long: NumberLong(5), u: undefined, oid: ObjectId('{oid}')}} }}"
    )
    args = ["$i", "$l", "$d", "$m", "$t", "$o", "$s", "$n", "$a", "$missing"]
    (out,) = mongo_db.c.aggregate(
        [
            {
                "$project": {
                    "types": {"$function": {"body": types, "args": args, "lang": "js"}},
                    "back": {
                        "$function": {
                            "body": back,
                            "args": ["$i", "$l", "$d", "$m", "$t", "$o", "$a"],
                            "lang": "js",
                        }
                    },
                }
            }
        ]
    )
    assert out["types"] == [
        "number", True, "number", True, True, True, "é", None, True, None,
        str(oid), 86_400_000.0, "NumberLong(1099511627776)",
    ]  # fmt: skip
    back_doc = out["back"]
    assert back_doc["i"] == 7.0 and type(back_doc["i"]) is float  # a JS number is a double
    assert back_doc["l"] == 2**40 and type(back_doc["l"]) is Int64
    assert back_doc["d"] == 1.5
    assert back_doc["m"] == Decimal128("1.25")
    assert back_doc["t"].timestamp() == 86_400
    assert back_doc["o"] == oid
    assert back_doc["a"] == [1.0, {"b": True}]
    assert back_doc["int"] == 3 and type(back_doc["int"]) is int  # NumberInt: an int32
    assert back_doc["long"] == 5 and type(back_doc["long"]) is Int64
    assert back_doc["oid"] == oid


# -- $accumulator ----------------------------------------------------------------------------------

BOOKS = [
    {"_id": 8751, "title": "The Banquet", "author": "Dante", "copies": 2},
    {"_id": 8752, "title": "Divine Comedy", "author": "Dante", "copies": 1},
    {"_id": 8645, "title": "Eclogues", "author": "Dante", "copies": 2},
    {"_id": 7000, "title": "The Odyssey", "author": "Homer", "copies": 10},
    {"_id": 7020, "title": "Iliad", "author": "Homer", "copies": 10},
]

RESTAURANTS = [
    {"_id": 1, "name": "Food Fury", "city": "Bettles", "cuisine": "American"},
    {"_id": 2, "name": "Meal Macro", "city": "Bettles", "cuisine": "Chinese"},
    {"_id": 3, "name": "Big Crisp", "city": "Bettles", "cuisine": "Latin"},
    {"_id": 4, "name": "The Wrap", "city": "Onida", "cuisine": "American"},
    {"_id": 5, "name": "Spice Attack", "city": "Onida", "cuisine": "Latin"},
    {"_id": 6, "name": "Soup City", "city": "Onida", "cuisine": "Chinese"},
    {"_id": 7, "name": "Crave", "city": "Pyote", "cuisine": "American"},
    {"_id": 8, "name": "The Gala", "city": "Pyote", "cuisine": "Chinese"},
]


def test_accumulator_documented_avg(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.books.insert_many(BOOKS)
    avg = {
        "$accumulator": {
            "init": Code("function() { return { count: 0, sum: 0 } }"),
            "accumulate": Code(
                "function(state, numCopies) {"
                " return { count: state.count + 1, sum: state.sum + numCopies } }"
            ),
            "accumulateArgs": ["$copies"],
            "merge": Code(
                "function(state1, state2) { return { count: state1.count + state2.count,"
                " sum: state1.sum + state2.sum } }"
            ),
            "finalize": Code("function(state) { return (state.sum / state.count) }"),
            "lang": "js",
        }
    }
    out = list(
        mongo_db.books.aggregate(
            [{"$group": {"_id": "$author", "avgCopies": avg}}, {"$sort": {"_id": 1}}]
        )
    )
    assert out == [
        {"_id": "Dante", "avgCopies": 1.6666666666666667},
        {"_id": "Homer", "avgCopies": 10.0},
    ]


@pytest.mark.parametrize(
    ("city", "expected"),
    [
        ("Bettles", [["Food Fury", "Meal Macro", "Big Crisp"], ["The Wrap"], ["Crave"]]),
        ("Onida", [["Food Fury"], ["The Wrap", "Spice Attack", "Soup City"], ["Crave"]]),
        ("Pyote", [["Food Fury"], ["The Wrap"], ["Crave", "The Gala"]]),
        ("Elsewhere", [["Food Fury"], ["The Wrap"], ["Crave"]]),
    ],
)
def test_accumulator_documented_init_args(
    mongo_db: Database[dict[str, Any]], city: str, expected: list[list[str]]
) -> None:
    # The documented example; its finalize returns the names (the page's listing shows the
    # state's object, from an example missing the comma before `lang`).
    mongo_db.restaurants.insert_many(RESTAURANTS)
    acc = {
        "$accumulator": {
            "init": Code(
                "function(city, userProfileCity) {"
                " return { max: city === userProfileCity ? 3 : 1, restaurants: [] } }"
            ),
            "initArgs": ["$city", city],
            "accumulate": Code(
                "function(state, restaurantName) {"
                " if (state.restaurants.length < state.max) {"
                " state.restaurants.push(restaurantName); } return state; }"
            ),
            "accumulateArgs": ["$name"],
            "merge": Code(
                "function(state1, state2) { return { max: state1.max, restaurants:"
                " state1.restaurants.concat(state2.restaurants).slice(0, state1.max) } }"
            ),
            "finalize": Code("function(state) { return state.restaurants }"),
            "lang": "js",
        }
    }
    out = list(
        mongo_db.restaurants.aggregate(
            [
                {"$sort": {"_id": 1}},
                {"$group": {"_id": {"city": "$city"}, "restaurants": acc}},
                {"$sort": {"_id.city": 1}},
            ]
        )
    )
    assert out == [
        {"_id": {"city": c}, "restaurants": names}
        for c, names in zip(["Bettles", "Onida", "Pyote"], expected, strict=True)
    ]


def test_accumulator_errors(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1})
    f = Code("function() { return 0 }")
    full = {"init": f, "accumulate": f, "accumulateArgs": [], "merge": f, "lang": "js"}

    def group(spec: Any) -> Any:
        return lambda: list(mongo_db.c.aggregate([{"$group": {"_id": 1, "x": spec}}]))

    for spec, code, message in [
        ({"$accumulator": 5}, 4544703, "$accumulator expects an object as an argument; found: int"),
        (
            {"$accumulator": {**full, "init": 5}},
            4544702,
            "$accumulator 'init' must be a String or Code",
        ),
        (
            {"$accumulator": {**full, "init": "$x"}},
            4544701,
            "$accumulator 'init' must be a constant expression",
        ),
        (
            {"$accumulator": {**full, "lang": 1}},
            4544704,
            "$accumulator lang must be a string; found: int",
        ),
        (
            {"$accumulator": {**full, "lang": "py"}},
            4544705,
            "$accumulator only supports lang: 'js'",
        ),
        (
            {"$accumulator": {**full, "other": 1}},
            4544706,
            "$accumulator got an unexpected field: other",
        ),
        (
            {"$accumulator": {k: v for k, v in full.items() if k != "init"}},
            4544707,
            "$accumulator missing required argument 'init'",
        ),
        (
            {"$accumulator": {k: v for k, v in full.items() if k != "accumulate"}},
            4544708,
            "$accumulator missing required argument 'accumulate'",
        ),
        (
            {"$accumulator": {k: v for k, v in full.items() if k != "merge"}},
            4544709,
            "$accumulator missing required argument 'merge'",
        ),
        (
            {"$accumulator": {k: v for k, v in full.items() if k != "accumulateArgs"}},
            4544710,
            "$accumulator missing required argument 'accumulateArgs'",
        ),
        (
            {"$accumulator": {**full, "initArgs": 5}},
            4544711,
            "$accumulator initArgs must evaluate to an array: 5",
        ),
        (
            {"$accumulator": {**full, "accumulateArgs": "abc"}},
            4544712,
            '$accumulator accumulateArgs must evaluate to an array: "abc"',
        ),
    ]:
        err = _fails(code, group(spec))
        assert err.details is not None and err.details["errmsg"] == message, spec


# -- mapReduce -------------------------------------------------------------------------------------


def _orders() -> list[dict[str, Any]]:
    def day(d: int) -> DatetimeMS:
        return DatetimeMS(1583020800000 + (d - 1) * 86_400_000)  # 2020-03-<d>

    def item(sku: str, qty: int, price: float) -> dict[str, Any]:
        return {"sku": sku, "qty": qty, "price": price}

    rows = [
        (1, "Ant O. Knee", 1, 25, [item("oranges", 5, 2.5), item("apples", 5, 2.5)]),
        (2, "Ant O. Knee", 8, 70, [item("oranges", 8, 2.5), item("chocolates", 5, 10)]),
        (3, "Busby Bee", 8, 50, [item("oranges", 10, 2.5), item("pears", 10, 2.5)]),
        (4, "Busby Bee", 18, 25, [item("oranges", 10, 2.5)]),
        (5, "Busby Bee", 19, 50, [item("chocolates", 5, 10)]),
        (6, "Cam Elot", 19, 35, [item("carrots", 10, 1.0), item("apples", 10, 2.5)]),
        (7, "Cam Elot", 20, 25, [item("oranges", 10, 2.5)]),
        (8, "Don Quis", 20, 75, [item("chocolates", 5, 10), item("apples", 10, 2.5)]),
        (
            9,
            "Don Quis",
            20,
            55,
            [item("carrots", 5, 1.0), item("apples", 10, 2.5), item("oranges", 10, 2.5)],
        ),
        (10, "Don Quis", 23, 25, [item("oranges", 10, 2.5)]),
    ]
    return [
        {"_id": i, "cust_id": c, "ord_date": day(d), "price": p, "items": items, "status": "A"}
        for i, c, d, p, items in rows
    ]


MAP1 = Code("function() { emit(this.cust_id, this.price); }")
REDUCE1 = Code("function(keyCustId, valuesPrices) { return Array.sum(valuesPrices); }")
MAP2 = Code(
    "function() { for (var idx = 0; idx < this.items.length; idx++) {"
    " var key = this.items[idx].sku; var value = { count: 1, qty: this.items[idx].qty };"
    " emit(key, value); } }"
)
REDUCE2 = Code(
    "function(keySKU, countObjVals) { reducedVal = { count: 0, qty: 0 };"
    " for (var idx = 0; idx < countObjVals.length; idx++) {"
    " reducedVal.count += countObjVals[idx].count; reducedVal.qty += countObjVals[idx].qty; }"
    " return reducedVal; }"
)
FINALIZE2 = Code(
    "function (key, reducedVal) { reducedVal.avg = reducedVal.qty/reducedVal.count;"
    " return reducedVal; }"
)
TOTALS = [
    {"_id": "Ant O. Knee", "value": 95.0},
    {"_id": "Busby Bee", "value": 125.0},
    {"_id": "Cam Elot", "value": 60.0},
    {"_id": "Don Quis", "value": 155.0},
]


def test_map_reduce_documented_total_price(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.orders.insert_many(_orders())
    reply = mongo_db.command(
        {"mapReduce": "orders", "map": MAP1, "reduce": REDUCE1, "out": "map_reduce_example"}
    )
    assert reply == {"result": "map_reduce_example", "ok": 1.0}
    assert list(mongo_db.map_reduce_example.find().sort("_id", 1)) == TOTALS
    inline = mongo_db.command(
        {"mapReduce": "orders", "map": MAP1, "reduce": REDUCE1, "out": {"inline": 1}}
    )
    assert sorted(inline["results"], key=lambda d: d["_id"]) == TOTALS
    assert set(inline) == {"results", "ok"}


def test_map_reduce_documented_finalize_merge(mongo_db: Database[dict[str, Any]]) -> None:
    # MongoDB's second example: its query keeps every order from 2020-03-01 on; the numbers are
    # the page's aggregation alternative's, which reads the same documents (the page's
    # mapReduce listing shows counts from an older version of the data).
    mongo_db.orders.insert_many(_orders())
    mongo_db.map_reduce_example2.insert_one({"_id": "kiwis", "value": {"count": 1}})
    reply = mongo_db.command(
        {
            "mapReduce": "orders",
            "map": MAP2,
            "reduce": REDUCE2,
            "out": {"merge": "map_reduce_example2"},
            "query": {"ord_date": {"$gte": DatetimeMS(1583020800000)}},
            "finalize": FINALIZE2,
        }
    )
    assert reply == {"result": "map_reduce_example2", "ok": 1.0}
    assert list(mongo_db.map_reduce_example2.find().sort("_id", 1)) == [
        {"_id": "apples", "value": {"count": 4.0, "qty": 35.0, "avg": 8.75}},
        {"_id": "carrots", "value": {"count": 2.0, "qty": 15.0, "avg": 7.5}},
        {"_id": "chocolates", "value": {"count": 3.0, "qty": 15.0, "avg": 5.0}},
        {"_id": "kiwis", "value": {"count": 1}},
        {"_id": "oranges", "value": {"count": 7.0, "qty": 63.0, "avg": 9.0}},
        {"_id": "pears", "value": {"count": 1.0, "qty": 10.0, "avg": 10.0}},
    ]


def test_map_reduce_out_reduce_db_scope_sort_limit(
    mongo_db: Database[dict[str, Any]], mongo_client: MongoClient[dict[str, Any]]
) -> None:
    mongo_db.orders.insert_many(_orders())
    other = mongo_client["js_mr_other"]
    try:
        other.totals.insert_one({"_id": "Ant O. Knee", "value": 5.0})
        reply = mongo_db.command(
            {
                "mapReduce": "orders",
                "map": Code("function() { emit(this.cust_id, this.price * factor); }"),
                "reduce": REDUCE1,
                "out": {"reduce": "totals", "db": "js_mr_other"},
                "scope": {"factor": 2},
                "sort": {"_id": 1},
                "limit": 2,
                "jsMode": True,
                "verbose": True,
            }
        )
        assert reply == {"result": {"db": "js_mr_other", "collection": "totals"}, "ok": 1.0}
        # Orders 1 and 2 (Ant O. Knee, 25 and 70, doubled), reduced with the stored 5.
        assert list(other.totals.find()) == [{"_id": "Ant O. Knee", "value": 195.0}]
    finally:
        mongo_client.drop_database("js_mr_other")


def test_map_reduce_reduce_sees_every_key_values_reversed(
    mongo_db: Database[dict[str, Any]],
) -> None:
    mongo_db.c.insert_many([{"_id": i, "k": "a" if i < 3 else "b"} for i in range(4)])
    reply = mongo_db.command(
        {
            "mapReduce": "c",
            "map": "function() { emit(this.k, this._id); }",
            "reduce": "function(k, vs) { return vs.join(','); }",
            "out": {"inline": 1},
            "sort": {"_id": 1},
        }
    )
    assert sorted(reply["results"], key=lambda d: d["_id"]) == [
        {"_id": "a", "value": "2,1,0"},
        {"_id": "b", "value": "3"},
    ]


def test_map_reduce_errors(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1})
    base = {"mapReduce": "c", "map": MAP1, "reduce": REDUCE1}
    for extra, code, message in [
        ({"out": 5}, 13606, "'out' has to be a string or an object"),
        (
            {"out": {"nowhere": "x"}},
            13522,
            "please specify one of [replace|merge|reduce|inline] in 'out' object",
        ),
        (
            {"out": {"inline": 1}, "limit": -1},
            15958,
            "The limit specified to mapReduce must be positive",
        ),
    ]:
        err = _fails(code, lambda extra=extra: mongo_db.command({**base, **extra}))
        assert err.details is not None and err.details["errmsg"] == message
    err = _fails(40414, lambda: mongo_db.command(base))
    err = _fails(
        31220,
        lambda: mongo_db.command({**base, "map": "function() { emit(1) }", "out": {"inline": 1}}),
    )
    assert err.details is not None and err.details["errmsg"] == "emit takes 2 args"
    err = _fails(
        139,
        lambda: mongo_db.command(
            {**base, "reduce": "function() { throw new Error('no') }", "out": {"inline": 1}}
        ),
    )
    assert err.details is not None and err.details["errmsg"].startswith("Error: no :\n")


def test_where_is_not_allowed_in_a_pipeline(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1})
    err = _fails(2, lambda: list(mongo_db.c.aggregate([{"$match": {"$where": "true"}}])))
    assert err.details is not None
    assert err.details["errmsg"] == "$where is not allowed in this context"


def test_function_is_not_allowed_in_a_validator(mongo_db: Database[dict[str, Any]]) -> None:
    body = {"$function": {"body": "function() { return true }", "args": [], "lang": "js"}}
    err = _fails(
        4660800,
        lambda: mongo_db.create_collection("v", validator={"$expr": {"$and": [body]}}),
    )
    assert err.details is not None
    assert err.details["errmsg"] == (
        "Parsing of collection validator failed :: caused by :: "
        "$function cannot be used inside a validator."
    )
