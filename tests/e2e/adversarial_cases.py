"""The adversarial cases tests/e2e/test_adversarial.py runs (issue 24, item 3): every aggregation
stage the server knows and the heavy expression operators, each with arguments meant to exhaust
time, memory or the interpreter (huge ranges, deep nesting, large strings and arrays,
self-lookups, infinite JavaScript loops), and the seed data they run over."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bson import Int64

Doc = dict[str, Any]

#: The database the cases run in (the server-side stages run in admin and config).
DB = "adv"

#: The seed: `c` holds documents of about 1 KB (`g` makes 97 groups, `next` chains them into one
#: cycle); `graph` is a small cyclic graph; `arr` holds a few large arrays; `deep` deeply nested
#: documents; `geo` points under a 2dsphere index.
C_DOCS = 2000
PAD = 900
GRAPH_NODES = 300
ARR_DOCS = 10
ARR_LEN = 100_000
DEEP_DOCS = 10
DEEP_LEVELS = 14


def c_doc(i: int) -> Doc:
    return {
        "_id": i,
        "g": i % 97,
        "i": i,
        "next": (i + 1) % C_DOCS,
        "tags": [i % 5, i % 7, i % 11],
        "pad": "x" * PAD + str(i),
    }


def graph_doc(i: int) -> Doc:
    return {"_id": i, "to": [(i + 1) % GRAPH_NODES, (i * 7) % GRAPH_NODES]}


def arr_doc(i: int) -> Doc:
    return {"_id": i, "a": list(range(ARR_LEN, 0, -1)), "s": ["y" * 10] * 1000}


def deep_doc(i: int) -> Doc:
    """A binary tree DEEP_LEVELS deep (2**DEEP_LEVELS leaves), each node with a level."""

    def node(level: int) -> Doc:
        if level == DEEP_LEVELS:
            return {"level": level, "leaf": i}
        return {"level": level, "kids": [node(level + 1), node(level + 1)]}

    return {"_id": i, **node(0)}


def geo_doc(i: int) -> Doc:
    return {"_id": i, "loc": {"type": "Point", "coordinates": [i % 360 - 180, i % 170 - 85]}}


# -- building blocks ---------------------------------------------------------------------------------

#: Ten million: the size of the huge ranges.
HUGE = 10_000_000
RANGE_HUGE: Doc = {"$range": [0, HUGE]}


def big_string(copies: int) -> Doc:
    """`copies` times the document's 1 KB pad, concatenated."""
    return {"$concat": ["$pad"] * copies}


def multiplied(times: int) -> list[Doc]:
    """Stages that turn each document of `c` into `times` of them."""
    return [{"$set": {"r": {"$range": [0, times]}}}, {"$unwind": "$r"}]


def nested_lookups(depth: int) -> list[Doc]:
    """`c` looked up in itself, every document, `depth` deep."""
    inner: list[Doc] = []
    for level in range(depth):
        inner = [{"$lookup": {"from": "c", "pipeline": inner, "as": f"l{level}"}}]
    return inner


def nested_maps(depth: int, width: int) -> Doc:
    """A $map over `width` numbers whose `in` is such a $map, `depth` deep: width**depth values."""
    expr: Doc | str = "$$v0"
    for level in range(depth):
        expr = {"$map": {"input": {"$range": [0, width]}, "as": f"v{level}", "in": expr}}
    assert isinstance(expr, dict)
    return expr


def nested_union(depth: int) -> Doc:
    """$unionWith of `c` whose pipeline is another $unionWith of `c`, `depth` deep."""
    spec: Doc = {"coll": "c", "pipeline": []}
    for _ in range(depth):
        spec = {"coll": "c", "pipeline": [{"$unionWith": spec}] * 3}
    return {"$unionWith": spec}


PUSH_ALL: Doc = {"$group": {"_id": None, "all": {"$push": "$$ROOT"}}}
JS_LOOP = "function() { while (true) {} }"
#: A large argument for the stages ebbdb refuses (NotImplemented): refused before it is looked at.
LARGE_ARGUMENT: Doc = {"x": list(range(100_000))}


# -- the cases ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One adversarial run: `pipeline` aggregated on `collection` of `db` (None: `aggregate: 1`),
    or with `find` set, that filter found in `collection`. `covers` names the stages and operators
    it stands for. A change stream (`first_batch_only`) is never exhausted: its first batch is
    its result."""

    id: str
    covers: frozenset[str]
    pipeline: list[Doc] = field(default_factory=list)
    collection: str | None = "c"
    db: str = DB
    find: Doc | None = None
    first_batch_only: bool = False


def case(id: str, covers: str, pipeline: list[Doc], **kw: Any) -> Case:
    return Case(id, frozenset(covers.split()), pipeline, **kw)


def _unsupported(name: str) -> Case:
    return case(f"unsupported-{name[1:]}", name, [{name: LARGE_ARGUMENT}])


STAGE_CASES: list[Case] = [
    # Reshaping with big values.
    case("addFields-range-huge", "$addFields", [{"$addFields": {"r": RANGE_HUGE}}]),
    case("addFields-big-string", "$addFields", [{"$addFields": {"s": big_string(20_000)}}]),
    case("set-map-range-huge", "$set", [{"$set": {"m": {"$map": {"input": RANGE_HUGE, "in": 1}}}}]),
    case(
        "project-many-big-fields",
        "$project",
        [{"$project": {f"f{k}": big_string(50) for k in range(2000)}}],
    ),
    case("project-nested-maps", "$project", [{"$project": {"m": nested_maps(8, 10)}}]),
    case(
        "unset-many-deep-paths",
        "$unset",
        [{"$unset": [".".join(f"p{k}" for k in range(j % 90 + 1)) for j in range(20_000)]}],
    ),
    case(
        "replaceRoot-huge-object",
        "$replaceRoot",
        [
            {
                "$replaceRoot": {
                    "newRoot": {
                        "$arrayToObject": {
                            "$map": {
                                "input": {"$range": [0, 1_000_000]},
                                "in": [{"$toString": "$$this"}, "$pad"],
                            }
                        }
                    }
                }
            }
        ],
    ),
    case(
        "replaceWith-big-merge",
        "$replaceWith",
        [
            {
                "$replaceWith": {
                    "$mergeObjects": [{"a": RANGE_HUGE}, "$$ROOT", {"s": big_string(5000)}]
                }
            }
        ],
    ),
    # Filtering.
    case("match-regex-backtracking", "$match", [{"$match": {"pad": {"$regex": "^(x+x+)+y$"}}}]),
    case(
        "match-expr-range-huge",
        "$match",
        [{"$match": {"$expr": {"$gt": [{"$size": RANGE_HUGE}, 0]}}}],
    ),
    case(
        "redact-deep-documents",
        "$redact",
        [
            *[{"$unionWith": "deep"}] * 20,
            {"$redact": {"$cond": [{"$gte": ["$level", 0]}, "$$DESCEND", "$$PRUNE"]}},
        ],
        collection="deep",
    ),
    case(
        "redact-big-arrays",
        "$redact",
        [
            {
                "$set": {
                    "x": {"$map": {"input": {"$range": [0, 100_000]}, "in": {"a": {"b": "$$this"}}}}
                }
            },
            {"$redact": "$$DESCEND"},
        ],
    ),
    case("skip-huge-after-huge-unwind", "$skip", [*multiplied(HUGE), {"$skip": 2**62}]),
    case(
        "limit-huge-after-sort",
        "$limit",
        [*multiplied(1000), {"$sort": {"pad": -1}}, {"$limit": 2**62}],
    ),
    case("unwind-range-huge", "$unwind", [*multiplied(HUGE), {"$count": "n"}]),
    case(
        "unwind-stored-big-arrays",
        "$unwind",
        [{"$unwind": "$a"}, {"$unwind": "$s"}, {"$count": "n"}],
        collection="arr",
    ),
    case("count-self-lookups", "$count", [*nested_lookups(3), {"$count": "n"}]),
    # Blocking and grouping stages.
    case("sort-2m-docs", "$sort", [*multiplied(1000), {"$sort": {"r": -1, "pad": 1}}]),
    case("group-push-everything", "$group", [*multiplied(1000), PUSH_ALL]),
    case(
        "group-distinct-big-keys",
        "$group",
        [*multiplied(1000), {"$group": {"_id": {"p": "$pad", "r": "$r"}, "n": {"$sum": 1}}}],
    ),
    case(
        "sortByCount-2m-keys",
        "$sortByCount",
        [*multiplied(1000), {"$sortByCount": {"$concat": ["$pad", {"$toString": "$r"}]}}],
    ),
    case(
        "bucket-huge-boundaries",
        "$bucket",
        [
            *multiplied(1000),
            {
                "$bucket": {
                    "groupBy": "$r",
                    "boundaries": list(range(0, 200_000)),
                    "default": "other",
                    "output": {"all": {"$push": "$$ROOT"}},
                }
            },
        ],
    ),
    case(
        "bucketAuto-huge-buckets",
        "$bucketAuto",
        [
            *multiplied(1000),
            {
                "$bucketAuto": {
                    "groupBy": {"$concat": ["$pad", {"$toString": "$r"}]},
                    "buckets": 2**31 - 1,
                    "output": {"all": {"$push": "$$ROOT"}},
                }
            },
        ],
    ),
    case(
        "setWindowFields-big-partition",
        "$setWindowFields",
        [
            *multiplied(10),
            {
                "$setWindowFields": {
                    "sortBy": {"pad": 1},
                    "output": {
                        "all": {
                            "$push": "$$ROOT",
                            "window": {"documents": ["unbounded", "unbounded"]},
                        }
                    },
                }
            },
        ],
    ),
    case("sample-huge-size", "$sample", [*multiplied(5000), {"$sample": {"size": 2**62}}]),
    case("sample-huge-size-first", "$sample", [{"$sample": {"size": 2**62}}, PUSH_ALL]),
    # Sub-pipelines.
    case("lookup-self-5-deep", "$lookup", nested_lookups(5)),
    case(
        "graphLookup-cyclic-unbounded",
        "$graphLookup",
        [
            {
                "$graphLookup": {
                    "from": "graph",
                    "startWith": "$to",
                    "connectFromField": "to",
                    "connectToField": "_id",
                    "as": "reach",
                    "depthField": "d",
                }
            },
            {"$unionWith": {"coll": "graph", "pipeline": []}},
        ],
        collection="graph",
    ),
    case(
        "graphLookup-chain-of-big-docs",
        "$graphLookup",
        [
            {
                "$graphLookup": {
                    "from": "c",
                    "startWith": "$next",
                    "connectFromField": "next",
                    "connectToField": "i",
                    "as": "reach",
                }
            }
        ],
    ),
    case(
        "facet-many-subpipelines",
        "$facet",
        [{"$facet": {f"f{k}": [PUSH_ALL] for k in range(100)}}],
    ),
    case("unionWith-self-repeated", "$unionWith", [nested_union(6), {"$sort": {"pad": -1}}]),
    # Sources and writers.
    case(
        "documents-huge-array",
        "$documents",
        [{"$documents": {"$map": {"input": RANGE_HUGE, "in": {"a": "$$this"}}}}],
        collection=None,
    ),
    case("out-generated", "$out", [*multiplied(500), {"$unset": "_id"}, {"$out": "out_big"}]),
    case(
        "merge-generated",
        "$merge",
        [*multiplied(500), {"$unset": "_id"}, {"$merge": {"into": "merged_big"}}],
    ),
    case(
        "collStats-then-huge",
        "$collStats",
        [{"$collStats": {"storageStats": {}, "count": {}}}, {"$set": {"r": RANGE_HUGE}}],
    ),
    case("indexStats-then-huge", "$indexStats", [{"$indexStats": {}}, {"$set": {"r": RANGE_HUGE}}]),
    case(
        "geoNear-everything",
        "$geoNear",
        [
            {
                "$geoNear": {
                    "near": {"type": "Point", "coordinates": [0, 0]},
                    "distanceField": "d",
                    "spherical": True,
                }
            },
            *multiplied(1000),
            PUSH_ALL,
        ],
        collection="geo",
    ),
    case(
        "changeStream-heavy",
        "$changeStream",
        [{"$changeStream": {"fullDocument": "updateLookup"}}, {"$set": {"r": RANGE_HUGE}}],
        first_batch_only=True,
    ),
    # Gap filling (storage/aggregate/gaps.py).
    case(
        "densify-huge-bounds",
        "$densify",
        # One BSON type for the bounds and the step (mongod's 5876900 otherwise).
        [
            {
                "$densify": {
                    "field": "i",
                    "range": {"step": Int64(1), "bounds": [Int64(0), Int64(2**53)]},
                }
            }
        ],
    ),
    case(
        "densify-tiny-step-partitions",
        "$densify",
        [
            {
                "$densify": {
                    "field": "i",
                    "partitionByFields": ["g"],
                    "range": {"step": 0.0001, "bounds": "full"},
                }
            }
        ],
    ),
    case(
        "fill-linear-big-partition",
        "$fill",
        [
            *multiplied(1000),
            {"$set": {"v": {"$cond": [{"$eq": [{"$mod": ["$r", 3]}, 0]}, "$r", None]}}},
            {
                "$fill": {
                    "sortBy": {"r": 1},
                    "output": {"v": {"method": "linear"}, "pad": {"method": "locf"}},
                }
            },
        ],
    ),
    # Stages the server runs itself when they open a pipeline.
    case(
        "currentOp-then-huge",
        "$currentOp",
        [{"$currentOp": {"allUsers": True, "idleConnections": True}}, {"$set": {"r": RANGE_HUGE}}],
        collection=None,
        db="admin",
    ),
    case(
        "listLocalSessions-then-huge",
        "$listLocalSessions",
        [{"$listLocalSessions": {"allUsers": True}}, {"$set": {"r": RANGE_HUGE}}],
        collection=None,
        db="admin",
    ),
    case(
        "listSessions-then-huge",
        "$listSessions",
        [{"$listSessions": {"allUsers": True}}, {"$set": {"r": RANGE_HUGE}}],
        collection="system.sessions",
        db="config",
    ),
    # Stages ebbdb refuses (NotImplemented), with a large argument.
    *(
        _unsupported(name)
        for name in (
            "$search",
            "$searchMeta",
            "$vectorSearch",
            "$planCacheStats",
            "$listSearchIndexes",
            "$shardedDataDistribution",
            "$querySettings",
            "$changeStreamSplitLargeEvent",
        )
    ),
]


def _expr(id: str, operator: str, expression: Any, **kw: Any) -> Case:
    return case(f"expr-{id}", operator, [{"$project": {"x": expression}}], **kw)


#: The expression operators whose cost grows with their arguments (each has a case below).
HEAVY_OPERATORS = (
    "$range",
    "$map",
    "$filter",
    "$reduce",
    "$concatArrays",
    "$concat",
    "$split",
    "$replaceAll",
    "$zip",
    "$setUnion",
    "$reverseArray",
    "$sortArray",
    "$arrayToObject",
    "$objectToArray",
    "$regexFindAll",
    "$indexOfArray",
    "$function",
    "$accumulator",
    "$where",
)

EXPRESSION_CASES: list[Case] = [
    _expr("range-max", "$range", {"$size": {"$range": [0, 2**31 - 1]}}),
    _expr(
        "map-range-huge",
        "$map",
        {"$map": {"input": RANGE_HUGE, "in": {"$multiply": ["$$this", 2]}}},
    ),
    _expr(
        "filter-range-huge",
        "$filter",
        {"$filter": {"input": RANGE_HUGE, "cond": {"$eq": [{"$mod": ["$$this", 2]}, 0]}}},
    ),
    _expr(
        "reduce-building-string",
        "$reduce",
        {
            "$reduce": {
                "input": {"$range": [0, 1_000_000]},
                "initialValue": "",
                "in": {"$concat": ["$$value", "$pad"]},
            }
        },
    ),
    _expr("concatArrays-huge", "$concatArrays", {"$concatArrays": [RANGE_HUGE] * 10}),
    _expr("concat-huge", "$concat", big_string(100_000)),
    _expr("split-huge", "$split", {"$split": [big_string(10_000), "x"]}),
    _expr(
        "replaceAll-huge",
        "$replaceAll",
        {"$replaceAll": {"input": big_string(1000), "find": "x", "replacement": "$pad"}},
    ),
    _expr(
        "zip-huge", "$zip", {"$zip": {"inputs": [RANGE_HUGE, RANGE_HUGE], "useLongestLength": True}}
    ),
    _expr("setUnion-huge", "$setUnion", {"$setUnion": [RANGE_HUGE, {"$range": [HUGE, 0, -1]}]}),
    _expr("reverseArray-huge", "$reverseArray", {"$reverseArray": RANGE_HUGE}),
    _expr(
        "sortArray-huge",
        "$sortArray",
        {"$sortArray": {"input": {"$range": [HUGE, 0, -1]}, "sortBy": 1}},
    ),
    _expr(
        "sortArray-stored",
        "$sortArray",
        {"$sortArray": {"input": "$a", "sortBy": 1}},
        collection="arr",
    ),
    _expr(
        "arrayToObject-huge",
        "$arrayToObject",
        {
            "$arrayToObject": {
                "$map": {
                    "input": {"$range": [0, 1_000_000]},
                    "in": [{"$toString": "$$this"}, "$$this"],
                }
            }
        },
    ),
    _expr(
        "objectToArray-huge",
        "$objectToArray",
        {
            "$objectToArray": {
                "$arrayToObject": {
                    "$zip": {
                        "inputs": [
                            {"$map": {"input": RANGE_HUGE, "in": {"$toString": "$$this"}}},
                            RANGE_HUGE,
                        ]
                    }
                }
            }
        },
    ),
    _expr(
        "regexFindAll-huge",
        "$regexFindAll",
        {"$regexFindAll": {"input": big_string(10_000), "regex": "x"}},
    ),
    _expr(
        "indexOfArray-huge",
        "$indexOfArray",
        {"$indexOfArray": [RANGE_HUGE, -1]},
    ),
    _expr(
        "function-infinite-loop",
        "$function",
        {"$function": {"body": JS_LOOP, "args": [], "lang": "js"}},
    ),
    case(
        "expr-accumulator-infinite-loop",
        "$accumulator",
        [
            {
                "$group": {
                    "_id": "$g",
                    "x": {
                        "$accumulator": {
                            "init": JS_LOOP,
                            "accumulate": "function(s) { return s; }",
                            "accumulateArgs": [],
                            "merge": "function(a, b) { return a; }",
                            "lang": "js",
                        }
                    },
                }
            }
        ],
    ),
    case("expr-where-infinite-loop", "$where", [], find={"$where": "while (true) {}"}),
]

CASES: list[Case] = [*STAGE_CASES, *EXPRESSION_CASES]
