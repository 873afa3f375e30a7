"""The storage engine on LMDB: the environment and its disk space (environment, space), byte
layouts (layout), the one writer with group commit (writer), short read transactions (reader),
record upkeep (records, capped), DDL (ddl, capped_ddl), bulk index builds (index_build),
statistics and checks (sizes, usage, validate), and the Engine facade the server uses (store).
It may import every part below it: core, geometry, query, catalog, expiry and indexes."""
