"""Bytes <-> MongoDB wire messages, sans-I/O: no sockets, no asyncio, no storage, no command names."""

from ebbdb.protocol import wire
from ebbdb.protocol.wire import *  # noqa: F403  (the package's API: wire's __all__, declared there once)

__all__ = wire.__all__
