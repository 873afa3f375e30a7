"""MongoDB's query language over decoded documents: comparison order, paths, matching, projection, sort."""
