"""MongoDB's query language over decoded documents: comparison order, paths, matching, projection,
sort, update, expressions, and text search's language rules. It may import core and geometry."""
