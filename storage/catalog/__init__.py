"""What the catalog records: databases, collections and their indexes with MongoDB's naming rules,
and ExpireAfter, the typed time to live they carry (info), and the collection kinds and options it
keeps: clustered and time series collections, and schema validation (schema). Pure data and rules,
no LMDB. It may import core, geometry and query."""
