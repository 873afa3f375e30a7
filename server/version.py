"""Version numbers: ebbdb's own, and the MongoDB release it speaks as."""

EBBDB_VERSION = "0.1.0"
MONGODB_VERSION = "7.0.0"
MONGODB_VERSION_ARRAY = (7, 0, 0, 0)
FEATURE_COMPATIBILITY_VERSION = "7.0"
MIN_WIRE_VERSION = 0
MAX_WIRE_VERSION = 21
