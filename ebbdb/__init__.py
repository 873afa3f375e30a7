"""ebbdb, a MongoDB-compatible database server on LMDB: the one import package it installs.

Its subpackages ebbdb.server, ebbdb.storage and ebbdb.protocol are the repository's top-level
folders: in a checkout, ebbdb/server, ebbdb/storage and ebbdb/protocol are symbolic links to them,
and a built wheel holds real copies. Importing ebbdb itself imports none of them."""

import os

# The version, in this one place: pyproject.toml reads it (without importing anything) for the
# distribution's metadata, and server/version.py passes it on to the server's replies.
__version__ = "0.1.0"

# A checkout on a system where git wrote the links as plain text files (Windows without symlink
# support): the top-level folders are found beside this package instead, so the source still runs.
if not os.path.isdir(os.path.join(os.path.dirname(__file__), "server")):
    __path__.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__all__ = ["__version__"]
