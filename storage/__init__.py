"""ebbdb's durable engine on LMDB: synchronous, no asyncio, no protocol."""
