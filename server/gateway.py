"""The gateway between the event loop and storage: reads run on the loop in short bounded calls;
writes (whose durable commit waits on the disk) run on one writer thread, so the loop never syncs;
aggregation pipelines, whose stages compute in Python for as long as they need, run on reader
threads."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from storage.engine import Engine

T = TypeVar("T")


class Gateway:
    def __init__(self, engine: Engine, clock: Callable[[], int]) -> None:
        self.engine = engine
        self._clock = clock
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ebbdb-writer")
        self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ebbdb-reader")

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a storage write method on the writer thread and wait for its durable commit."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, functools.partial(fn, *args, **kwargs))

    async def write_now(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Like write, passing `now_ms=` the expiry clock's time when the write starts on the
        writer thread (not when it was queued: a write waiting behind another must not match,
        or stamp, documents as of an earlier time than readers already see)."""

        def stamped() -> T:
            return fn(*args, now_ms=self._clock(), **kwargs)

        return await self.write(stamped)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a long read-only computation on a reader thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, functools.partial(fn, *args))

    def close(self) -> None:
        """Wait for the write in progress, if any, then stop the writer and reader threads."""
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
