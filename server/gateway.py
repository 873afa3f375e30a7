"""The gateway between the event loop and storage: reads run on the loop in short bounded calls;
writes (whose durable commit waits on the disk) run on one writer thread, so the loop never syncs."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from storage.engine import Engine

T = TypeVar("T")


class Gateway:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ebbdb-writer")

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a storage write method on the writer thread and wait for its durable commit."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        """Wait for the write in progress, if any, then stop the writer thread."""
        self._writer.shutdown(wait=True)
