"""ebbdb's durable engine on LMDB: synchronous, no asyncio, no protocol.

Its parts, each a subpackage, from the bottom up; a part imports only the parts below it
(tests/test_imports.py holds these arrows):

- core: errors, BSON values, limits, interruption, documents, collation, portability;
- geometry: GeoJSON and legacy shapes, spherical and flat predicates;
- query: MongoDB's query language over decoded documents (matching, projection, sort, update,
  expressions, text search's language rules);
- catalog: what the catalog records of collections and indexes, and the collection kinds;
- expiry: time to live, the one expiry predicate and the `expireAfterSeconds` option;
- indexes: index specifications, kinds, key encoding, entries and the planner;
- engine: LMDB, the writer, readers, records and DDL, and the Engine facade;
- execution: running a query, its writes, blocking work under a memory limit, views;
- aggregate: the aggregation pipeline and the writing of its results.
"""
