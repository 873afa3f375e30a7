"""Geospatial queries through pymongo: `2dsphere` and `2d` indexes (options, creation errors, the
TTL rule, what documents they refuse), $geoWithin, $geoIntersects, $near, $nearSphere and the
$geoNear stage, with MongoDB 7.0's results, orders, distances and error codes, and the plans
explain shows (IXSCAN over the geo index, GEO_NEAR_2DSPHERE / GEO_NEAR_2D)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import BulkWriteError, OperationFailure

from tests.helpers import plan_stages

Client = MongoClient[dict[str, Any]]

#: MongoDB's radius of the earth, in meters.
R = 6378100.0
CITIES = {
    "paris": (2.3522, 48.8566),
    "london": (-0.1276, 51.5072),
    "berlin": (13.405, 52.52),
    "madrid": (-3.7038, 40.4168),
    "rome": (12.4964, 41.9028),
    "newyork": (-74.006, 40.7128),
}
PARIS = {"type": "Point", "coordinates": list(CITIES["paris"])}
#: Western Europe without Rome (lng -5..14, lat 45..55).
NORTH_WEST = {
    "type": "Polygon",
    "coordinates": [[[-5, 45], [14, 45], [14, 55], [-5, 55], [-5, 45]]],
}


def haversine(a: tuple[float, float], b: tuple[float, float]) -> float:
    """The great-circle angle between two lng/lat points, in radians (independent of the
    server's geometry library)."""
    lng1, lat1, lng2, lat2 = map(math.radians, (*a, *b))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lng2 - lng1) / 2) ** 2
    )
    return 2 * math.asin(math.sqrt(h))


def error_of(fn: Callable[[], Any]) -> tuple[int, str]:
    with pytest.raises((OperationFailure, BulkWriteError)) as info:
        fn()
    exc = info.value
    if isinstance(exc, BulkWriteError):
        err = exc.details["writeErrors"][0]
        return int(err["code"]), str(err["errmsg"])
    return int(exc.code or 0), str(exc.details.get("errmsg") if exc.details else exc)


def ids(cursor: Any) -> list[Any]:
    return [d["_id"] for d in cursor]


def winning(coll: Any, flt: dict[str, Any], **find: Any) -> dict[str, Any]:
    return dict(coll.find(flt, **find).explain()["queryPlanner"]["winningPlan"])


def leaf_stage(plan: dict[str, Any]) -> dict[str, Any]:
    return plan_stages(plan)[-1]


@pytest.fixture
def cities(client: Client) -> Any:
    coll = client.geo.cities
    coll.insert_many(
        [{"_id": k, "loc": {"type": "Point", "coordinates": list(v)}} for k, v in CITIES.items()]
    )
    coll.insert_one({"_id": "nowhere", "name": "no location"})
    return coll


# -- 2dsphere indexes -------------------------------------------------------------------------------


def test_2dsphere_index_spec_and_sparseness(cities: Any) -> None:
    assert cities.create_index([("loc", "2dsphere")]) == "loc_2dsphere"
    assert cities.create_index([("loc", "2dsphere"), ("kind", 1)]) == "loc_2dsphere_kind_1"
    specs = [dict(ix) for ix in cities.list_indexes()][1:]
    assert specs == [
        {"v": 2, "key": {"loc": "2dsphere"}, "name": "loc_2dsphere", "2dsphereIndexVersion": 3},
        {
            "v": 2,
            "key": {"loc": "2dsphere", "kind": 1},
            "name": "loc_2dsphere_kind_1",
            "2dsphereIndexVersion": 3,
        },
    ]
    # Documents without the field (or null) are not in the index: a hinted full scan skips them.
    cities.insert_one({"_id": "null", "loc": None})
    assert sorted(ids(cities.find({}, hint="loc_2dsphere"))) == sorted(CITIES)
    assert cities.count_documents({}) == len(CITIES) + 2


def test_2dsphere_refuses_documents_it_cannot_index(cities: Any) -> None:
    cities.create_index([("loc", "2dsphere")])
    code, msg = error_of(lambda: cities.insert_one({"_id": 1, "loc": {"type": "Point"}}))
    assert code == 16755 and msg.startswith("Can't extract geo keys: { _id: 1, loc: ")
    code, msg = error_of(
        lambda: cities.insert_one({"_id": 2, "loc": {"type": "Point", "coordinates": ["a", 1]}})
    )
    assert (code, msg) == (
        16755,
        'Can\'t extract geo keys: { _id: 2, loc: { type: "Point", coordinates: [ "a", 1 ] } }  '
        "Point must only contain numeric elements",
    )
    code, msg = error_of(lambda: cities.insert_one({"_id": 3, "loc": [200, 0]}))
    assert code == 16755 and msg.endswith("longitude/latitude is out of bounds, lng: 200 lat: 0")
    code, msg = error_of(
        lambda: cities.insert_one(
            {
                "_id": 4,
                "loc": {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]},
            }
        )
    )
    assert code == 16755 and "Loop is not closed" in msg
    code, _ = error_of(lambda: cities.insert_one({"_id": 5, "loc": {"type": "Circle"}}))
    assert code == 16755
    # An update that would make a document unindexable is refused too, and changes nothing.
    code, _ = error_of(lambda: cities.update_one({"_id": "paris"}, {"$set": {"loc": "x"}}))
    assert code == 16755
    assert cities.find_one({"_id": "paris"})["loc"] == PARIS
    # Building the index over such a document fails.
    other = cities.database.other
    other.insert_one({"loc": [1, 2, "x"]})
    other.insert_one({"loc": "somewhere"})
    code, _ = error_of(lambda: other.create_index([("loc", "2dsphere")]))
    assert code == 16755


def test_2dsphere_creation_errors(client: Client) -> None:
    coll = client.geo.errs
    code, msg = error_of(lambda: coll.create_index([("a", "2dsphere"), ("b", "2d")]))
    assert (code, msg) == (67, "Can't use more than one index plugin for a single index.")
    code, msg = error_of(
        lambda: coll.create_index([("a", "2dsphere")], **{"2dsphereIndexVersion": 4})
    )
    assert code == 67
    assert msg == (
        "unsupported geo index version { 2dsphereIndexVersion : 4 }, only support versions: [1,2,3]"
    )
    code, _ = error_of(lambda: coll.create_index([("a", "2dsphere")], bits=3))
    assert code == 197  # InvalidIndexSpecificationOption: a 2d option


def test_geo_indexes_and_ttl(client: Client) -> None:
    coll = client.geo.ttl
    # MongoDB checks only that a TTL index has one field: a geo one is accepted (its values are
    # never dates, so nothing expires by it).
    assert coll.create_index([("loc", "2dsphere")], expireAfterSeconds=60) == "loc_2dsphere"
    assert coll.create_index([("pos", "2d")], expireAfterSeconds=60) == "pos_2d"
    specs = {ix["name"]: dict(ix) for ix in coll.list_indexes()}
    assert specs["loc_2dsphere"]["expireAfterSeconds"] == 60
    assert specs["pos_2d"] == {
        "v": 2,
        "key": {"pos": "2d"},
        "name": "pos_2d",
        "expireAfterSeconds": 60,
    }
    code, msg = error_of(
        lambda: coll.create_index([("loc", "2dsphere"), ("a", 1)], expireAfterSeconds=60)
    )
    assert (code, msg) == (
        67,
        "TTL indexes are single-field indexes, compound indexes do not support TTL.",
    )


# -- $geoWithin and $geoIntersects ------------------------------------------------------------------


def test_geo_within_polygon_with_and_without_index(cities: Any) -> None:
    flt = {"loc": {"$geoWithin": {"$geometry": NORTH_WEST}}}
    assert sorted(ids(cities.find(flt))) == ["berlin", "london", "paris"]
    assert leaf_stage(winning(cities, flt))["stage"] == "COLLSCAN"
    cities.create_index([("loc", "2dsphere")])
    assert sorted(ids(cities.find(flt))) == ["berlin", "london", "paris"]
    leaf = leaf_stage(winning(cities, flt))
    assert (leaf["stage"], leaf["indexName"]) == ("IXSCAN", "loc_2dsphere")
    # $within is MongoDB's old name; legacy pairs are points too.
    cities.insert_one({"_id": "legacy", "loc": [5, 50]})
    assert sorted(ids(cities.find({"loc": {"$within": {"$geometry": NORTH_WEST}}}))) == [
        "berlin",
        "legacy",
        "london",
        "paris",
    ]


def test_geo_within_multipolygon_and_center_sphere(cities: Any) -> None:
    two = {
        "type": "MultiPolygon",
        "coordinates": [
            [[[-1, 51], [0, 51], [0, 52], [-1, 52], [-1, 51]]],
            [[[12, 41], [13, 41], [13, 42], [12, 42], [12, 41]]],
        ],
    }
    assert sorted(ids(cities.find({"loc": {"$geoWithin": {"$geometry": two}}}))) == [
        "london",
        "rome",
    ]
    # 900 km around Paris, in radians: London and Berlin, not Madrid (1054 km).
    around = {"loc": {"$geoWithin": {"$centerSphere": [list(CITIES["paris"]), 900000 / R]}}}
    assert sorted(ids(cities.find(around))) == ["berlin", "london", "paris"]
    cities.create_index([("loc", "2dsphere")])
    assert sorted(ids(cities.find(around))) == ["berlin", "london", "paris"]
    assert leaf_stage(winning(cities, around))["stage"] == "IXSCAN"


def test_geo_intersects(cities: Any) -> None:
    cities.insert_many(
        [
            # A road from London to Berlin, and a zone around Rome.
            {
                "_id": "road",
                "loc": {"type": "LineString", "coordinates": [[-0.1, 51.5], [13.4, 52.5]]},
            },
            {
                "_id": "zone",
                "loc": {
                    "type": "Polygon",
                    "coordinates": [[[11, 41], [14, 41], [14, 43], [11, 43], [11, 41]]],
                },
            },
        ]
    )
    for indexed in (False, True):
        if indexed:
            cities.create_index([("loc", "2dsphere")])
        box = {
            "type": "Polygon",
            "coordinates": [[[5, 50], [7, 50], [7, 54], [5, 54], [5, 50]]],
        }
        assert ids(cities.find({"loc": {"$geoIntersects": {"$geometry": box}}})) == ["road"]
        rome = {"type": "Point", "coordinates": list(CITIES["rome"])}
        assert sorted(ids(cities.find({"loc": {"$geoIntersects": {"$geometry": rome}}}))) == [
            "rome",
            "zone",
        ]
    flt = {"loc": {"$geoIntersects": {"$geometry": PARIS}}}
    assert leaf_stage(winning(cities, flt))["stage"] == "IXSCAN"


def test_bad_query_geometry(cities: Any) -> None:
    open_loop = {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]}
    code, msg = error_of(
        lambda: list(cities.find({"loc": {"$geoWithin": {"$geometry": open_loop}}}))
    )
    assert code == 2
    assert msg == (
        "Loop is not closed, first vertex does not equal last vertex: "
        "[ [ 0, 0 ], [ 1, 0 ], [ 1, 1 ], [ 0, 1 ] ]"
    )
    bad_point = {"type": "Point", "coordinates": [1, "x"]}
    code, msg = error_of(
        lambda: list(cities.find({"loc": {"$geoIntersects": {"$geometry": bad_point}}}))
    )
    assert (code, msg) == (2, "Point must only contain numeric elements")
    code, _ = error_of(lambda: list(cities.find({"loc": {"$geoWithin": {"$geometry": PARIS}}})))
    assert code == 2  # $geoWithin needs an area


# -- $near, $nearSphere -----------------------------------------------------------------------------


def test_near_requires_a_geo_index(cities: Any) -> None:
    code, msg = error_of(lambda: list(cities.find({"loc": {"$near": {"$geometry": PARIS}}})))
    assert code == 291 and msg.endswith("unable to find index for $geoNear query")


def test_near_geojson_orders_by_distance(cities: Any) -> None:
    cities.create_index([("loc", "2dsphere")])
    near = {"$geometry": PARIS, "$maxDistance": 1_100_000}
    assert ids(cities.find({"loc": {"$near": near}})) == ["paris", "london", "berlin", "madrid"]
    near = {"$geometry": PARIS, "$minDistance": 500_000, "$maxDistance": 1_100_000}
    assert ids(cities.find({"loc": {"$nearSphere": near}})) == ["berlin", "madrid"]
    # Unbounded: everything with a location, nearest first; skip and limit apply after ordering.
    everything = {"loc": {"$near": {"$geometry": PARIS}}}
    assert ids(cities.find(everything)) == [
        "paris",
        "london",
        "berlin",
        "madrid",
        "rome",
        "newyork",
    ]
    assert ids(cities.find(everything).skip(1).limit(2)) == ["london", "berlin"]
    # With other conditions.
    assert ids(cities.find({**everything, "_id": {"$in": ["rome", "london"]}})) == [
        "london",
        "rome",
    ]
    plan = winning(cities, everything)
    assert (plan["stage"], plan["indexName"]) == ("GEO_NEAR_2DSPHERE", "loc_2dsphere")


def test_near_sphere_legacy_pairs_in_radians(client: Client) -> None:
    coll = client.geo.legacy
    coll.insert_many([{"_id": k, "loc": list(v)} for k, v in CITIES.items()])
    coll.create_index([("loc", "2dsphere")])
    radians = 900000 / R
    flt = {"loc": {"$nearSphere": list(CITIES["paris"]), "$maxDistance": radians}}
    assert ids(coll.find(flt)) == ["paris", "london", "berlin"]


def test_near_restrictions(cities: Any) -> None:
    cities.create_index([("loc", "2dsphere")])
    near = {"loc": {"$near": {"$geometry": PARIS}}}
    code, msg = error_of(lambda: list(cities.find({"$or": [near, {"_id": 1}]})))
    assert (code, msg) == (2, "geoNear must be top-level expr")
    code, msg = error_of(
        lambda: list(cities.find({"$and": [near, {"loc": {"$nearSphere": {"$geometry": PARIS}}}]}))
    )
    assert (code, msg) == (2, "Too many geoNear expressions")
    code, msg = error_of(lambda: list(cities.aggregate([{"$match": near}])))
    assert code == 5626500
    assert msg.startswith("$geoNear, $near, and $nearSphere are not allowed in this context")
    code, _ = error_of(lambda: cities.count_documents(near))
    assert code == 5626500
    code, _ = error_of(
        lambda: list(cities.find({"loc": {"$near": {"$geometry": PARIS, "$maxDistance": -1}}}))
    )
    assert code == 2


# -- 2d indexes -------------------------------------------------------------------------------------


@pytest.fixture
def plane(client: Client) -> Any:
    coll = client.geo.plane
    coll.insert_many(
        [
            {"_id": "a", "pos": [0, 0]},
            {"_id": "b", "pos": [3, 4]},
            {"_id": "c", "pos": {"x": 1, "y": 1}},
            {"_id": "d", "pos": [-6, 8]},
            {"_id": "e", "pos": [20, 20]},
            {"_id": "none"},
        ]
    )
    return coll


def test_2d_near_and_shapes(plane: Any) -> None:
    flt_box = {"pos": {"$geoWithin": {"$box": [[0, 0], [5, 5]]}}}
    flt_poly = {"pos": {"$geoWithin": {"$polygon": [[-1, -1], [4, -1], [4, 5], [-1, 5]]}}}
    flt_center = {"pos": {"$geoWithin": {"$center": [[0, 0], 5]}}}
    # Without an index, by collection scan.
    assert sorted(ids(plane.find(flt_box))) == ["a", "b", "c"]
    assert sorted(ids(plane.find(flt_poly))) == ["a", "b", "c"]
    assert sorted(ids(plane.find(flt_center))) == ["a", "b", "c"]
    assert plane.create_index([("pos", "2d")]) == "pos_2d"
    for flt in (flt_box, flt_poly, flt_center):
        assert sorted(ids(plane.find(flt))) == ["a", "b", "c"]
        leaf = leaf_stage(winning(plane, flt))
        assert (leaf["stage"], leaf["indexName"]) == ("IXSCAN", "pos_2d")
    near = {"pos": {"$near": [0, 0]}}
    assert ids(plane.find(near)) == ["a", "c", "b", "d", "e"]
    assert ids(plane.find({"pos": {"$near": [0, 0], "$maxDistance": 5}})) == ["a", "c", "b"]
    plan = winning(plane, near)
    assert (plan["stage"], plan["indexName"]) == ("GEO_NEAR_2D", "pos_2d")


def test_2d_options_and_errors(client: Client) -> None:
    coll = client.geo.flat
    assert coll.create_index([("p", "2d")], bits=20, min=0, max=1000) == "p_2d"
    spec = [dict(ix) for ix in coll.list_indexes()][1]
    assert spec == {"v": 2, "key": {"p": "2d"}, "name": "p_2d", "bits": 20, "min": 0, "max": 1000}
    coll.insert_one({"_id": 1, "p": [500, 999]})
    code, msg = error_of(lambda: coll.insert_one({"_id": 2, "p": [500, 1001]}))
    assert code == 13027 and msg.startswith("point not in interval of [ 0, 1000 ]")
    code, msg = error_of(lambda: coll.insert_one({"_id": 3, "p": [1, "x"]}))
    assert code == 13026
    assert msg.startswith("geo values must be 'legacy coordinate pairs' for 2d indexes")
    other = client.geo.flat2
    other.insert_one({"p": [200, 0]})
    code, msg = error_of(lambda: other.create_index([("p", "2d")]))
    assert (code, msg.split(" :: ")[0]) == (13027, "point not in interval of [ -180, 180 ]")
    code, msg = error_of(lambda: other.create_index([("a", 1), ("q", "2d")]))
    assert (code, msg) == (16801, "2d has to be first in index")
    code, msg = error_of(lambda: other.create_index([("q", "2d"), ("r", "2d")]))
    assert (code, msg) == (16800, "can't have 2 geo fields")
    code, msg = error_of(lambda: other.create_index([("q", "2d")], bits=33))
    assert (code, msg) == (72, "bits for hash must be > 0 and <= 32, but 33 bits were specified")


# -- $geoNear ---------------------------------------------------------------------------------------


def test_geo_near_stage(cities: Any) -> None:
    cities.create_index([("loc", "2dsphere")])
    out = list(
        cities.aggregate(
            [
                {
                    "$geoNear": {
                        "near": PARIS,
                        "distanceField": "dist.m",
                        "spherical": True,
                        "maxDistance": 1_100_000,
                        "query": {"_id": {"$ne": "london"}},
                        "includeLocs": "at",
                    }
                },
                {"$project": {"dist": 1, "at": 1}},
            ]
        )
    )
    assert [d["_id"] for d in out] == ["paris", "berlin", "madrid"]
    for d in out:
        expected = haversine(CITIES["paris"], CITIES[d["_id"]]) * R
        assert d["dist"]["m"] == pytest.approx(expected, rel=1e-6, abs=1e-6)
        assert d["at"] == {"type": "Point", "coordinates": list(CITIES[d["_id"]])}
    # Legacy point, spherical: radians; distanceMultiplier turns them into kilometers.
    km = list(
        cities.aggregate(
            [
                {
                    "$geoNear": {
                        "near": list(CITIES["paris"]),
                        "distanceField": "km",
                        "spherical": True,
                        "distanceMultiplier": R / 1000,
                        "minDistance": 1_000_000 / R,
                    }
                }
            ]
        )
    )
    assert [d["_id"] for d in km] == ["madrid", "rome", "newyork"]
    assert km[0]["km"] == pytest.approx(haversine(CITIES["paris"], CITIES["madrid"]) * R / 1000)


def test_geo_near_stage_errors(cities: Any) -> None:
    stage = {"$geoNear": {"near": PARIS, "distanceField": "d"}}
    code, msg = error_of(lambda: list(cities.aggregate([stage])))
    assert (code, msg) == (27, "$geoNear requires a 2d or 2dsphere index, but none were found")
    code, msg = error_of(lambda: list(cities.aggregate([{"$match": {}}, stage])))
    assert code == 40603 and msg.startswith("$geoNear was not the first stage in the pipeline")
    code, msg = error_of(lambda: list(cities.aggregate([{"$geoNear": {"near": PARIS}}])))
    assert (code, msg) == (16606, "$geoNear requires a 'distanceField' option as a String")
    code, _ = error_of(lambda: list(cities.aggregate([{"$geoNear": {"distanceField": "d"}}])))
    assert code == 5860400
    code, _ = error_of(
        lambda: list(cities.aggregate([{"$geoNear": {**stage["$geoNear"], "limit": 2}}]))
    )
    assert code == 50858
    cities.create_index([("loc", "2dsphere")])
    cities.create_index([("other", "2dsphere")])
    code, msg = error_of(lambda: list(cities.aggregate([stage])))
    assert (code, msg) == (
        27,
        "There is more than one 2dsphere index on geo.cities; unsure which to use for $geoNear",
    )
    keyed = {"$geoNear": {**stage["$geoNear"], "key": "loc"}}
    assert [d["_id"] for d in cities.aggregate([keyed, {"$limit": 2}])] == ["paris", "london"]
    # A pipeline over a collection that does not exist returns nothing.
    assert list(cities.database.missing.aggregate([stage])) == []


def test_a_partial_geo_index_serves_only_queries_that_imply_its_filter(client: Client) -> None:
    """A partial index lacks the documents outside its filter: a query that does not imply the
    filter must not read it (found in review: $geoWithin returned one document of two)."""
    coll = client.geo.partial
    coll.create_index([("loc", "2dsphere")], partialFilterExpression={"active": True})
    coll.insert_many(
        [
            {"_id": 1, "loc": {"type": "Point", "coordinates": [1, 1]}, "active": True},
            {"_id": 2, "loc": {"type": "Point", "coordinates": [1.1, 1.1]}, "active": False},
        ]
    )
    square = [[[0, 0], [5, 0], [5, 5], [0, 5], [0, 0]]]
    within = {"loc": {"$geoWithin": {"$geometry": {"type": "Polygon", "coordinates": square}}}}
    assert sorted(d["_id"] for d in coll.find(within)) == [1, 2]
    assert coll.count_documents(within) == 2
    assert leaf_stage(winning(coll, within))["stage"] == "COLLSCAN"
    assert [d["_id"] for d in coll.find({**within, "active": True})] == [1]
    assert leaf_stage(winning(coll, {**within, "active": True}))["stage"] == "IXSCAN"
    point = {"$geometry": {"type": "Point", "coordinates": [1, 1]}}
    code, _ = error_of(lambda: list(coll.find({"loc": {"$near": point}})))
    assert code == 291
    near = list(coll.find({"loc": {"$near": point}, "active": True}))
    assert [d["_id"] for d in near] == [1]


def test_a_2d_index_takes_no_collation(client: Client) -> None:
    db = client.geo
    code, msg = error_of(
        lambda: db.flatcoll.create_index([("p", "2d")], collation={"locale": "en"})
    )
    assert code == 67
    assert msg.startswith("Index type '2d' does not support collation: { locale: \"en\"")
    db.create_collection("flat_en", collation={"locale": "en", "strength": 2})
    code, _ = error_of(lambda: db.flat_en.create_index([("p", "2d")]))
    assert code == 67
    # Asked for by name, the simple collation is what the index needs.
    assert db.flat_en.create_index([("p", "2d")], collation={"locale": "simple"}) == "p_2d"


def test_geo_near_query_may_not_hold_another_near(client: Client) -> None:
    coll = client.geo.twonear
    coll.create_index([("loc", "2dsphere")])
    coll.insert_one({"_id": 1, "loc": {"type": "Point", "coordinates": [1, 1]}})
    point = {"type": "Point", "coordinates": [1, 1]}
    stage = {"near": point, "distanceField": "d", "spherical": True}
    inner = {"loc": {"$near": {"$geometry": point, "$maxDistance": 10}}}
    code, msg = error_of(lambda: list(coll.aggregate([{"$geoNear": {**stage, "query": inner}}])))
    assert (code, msg) == (2, "Too many geoNear expressions")
    found = list(coll.aggregate([{"$geoNear": {**stage, "query": {"_id": 1}}}]))
    assert [(d["_id"], d["d"]) for d in found] == [(1, 0.0)]
