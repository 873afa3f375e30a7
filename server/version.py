"""Version numbers: ebbdb's own (set once, as ebbdb.__version__), and the MongoDB release it speaks
as."""

import ebbdb

EBBDB_VERSION = ebbdb.__version__
MONGODB_VERSION = "7.0.0"
MONGODB_VERSION_ARRAY = (7, 0, 0, 0)
FEATURE_COMPATIBILITY_VERSION = "7.0"
MIN_WIRE_VERSION = 0
MAX_WIRE_VERSION = 21
