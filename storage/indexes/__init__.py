"""Indexes: specifications as createIndexes takes them (specs), the kinds beyond ascending and
descending keys (index_kinds, each registering itself and its planning hooks), the
order-preserving key encoding (keys), what a document contributes to an index (entries), and
planning a query over them (planner, text_plan). No LMDB: it may import core, geometry, query,
catalog and expiry."""
