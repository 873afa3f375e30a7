"""The LMDB environment of one data directory: opened once with every sub-database, locked against
a second process, grown when full, and synced to disk on request.

Durability (MongoDB's model): commits do not sync (MDB_NOSYNC). A commit is visible to every reader
and survives a kill of the server process at once (its pages are in the OS page cache); a later
`sync()` (the server's background sync every journalCommitInterval ms, `j: true`, `fsync`) makes it
survive a machine crash. Per LMDB's documentation, no-sync commits without MDB_WRITEMAP keep
atomicity, consistency and isolation across a system crash (on a file system that preserves write
order): a crash may undo the last commits, never corrupt the database. So WRITEMAP stays off.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeAlias

import lmdb

from ebbdb.storage.core import portability
from ebbdb.storage.core.errors import StorageError
from ebbdb.storage.engine.space import DataFileSpace

# lmdb's own stubs name the LMDB types. Values are `bytes`: ebbdb never opens a transaction with
# buffers=True (the memoryview mode), and `lmdb.Environment.begin()` without it is typed
# `Transaction[bytes]`, so mypy checks that instead of trusting it. (Strings: lmdb's C classes are
# not subscriptable at run time.)
#: A write or read transaction.
Txn: TypeAlias = "lmdb.Transaction[bytes]"
#: A cursor of a transaction.
Cursor: TypeAlias = "lmdb.Cursor[bytes]"
#: A sub-database handle (opened once, at startup).
Database: TypeAlias = "lmdb._Database"

#: The map a fresh environment starts with (smaller where the data file is as large as the map).
INITIAL_MAP_SIZE = portability.INITIAL_MAP_SIZE
LOCK_FILE = "ebbdb.lock"
#: LMDB reader slots (64 bytes each in lock.mdb).
MAX_READERS = 1024
#: Grow the map before a write when less than this share of it is free, so that a write rarely
#: meets a full map (which costs re-running the whole group of writes).
_MIN_FREE_SHARE = 0.25


#: In Environment.watched: the collection was emptied or dropped (no build can catch that up).
EMPTIED = b""


class DataDirLocked(StorageError):
    """Another process already serves this data directory."""

    code_name = "DBPathInUse"


class _Gate:
    """Readers share; a map resize waits until no reader is inside."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._resizing = False

    def enter(self) -> None:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._readers += 1

    def leave(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._resizing and not self._readers:
                self._cond.notify_all()

    def resize(self, fn: Callable[[], None]) -> None:
        with self._cond:
            self._resizing = True
            while self._readers:
                self._cond.wait()
            try:
                fn()
            finally:
                self._resizing = False
                self._cond.notify_all()


class Environment:
    """The environment and its sub-databases. `commits` counts committed write transactions;
    `durable` is the count a finished sync covered (both only grow)."""

    def __init__(self, path: str, env: lmdb.Environment, lock_fd: int) -> None:
        self.path = path
        self.env = env
        self._lock_fd = lock_fd
        self.gate = _Gate()
        self.catalog = env.open_db(b"catalog")
        self.records = env.open_db(b"records")
        self.index = env.open_db(b"index")
        self.stats = env.open_db(b"stats")
        self.meta = env.open_db(b"meta")
        self.expiry = env.open_db(b"expiry")
        self.commits = 0
        self.durable = 0
        self._page_size = env.stat()["psize"]
        self._trees = (self.catalog, self.records, self.index, self.stats, self.meta, self.expiry)
        #: The data file's headroom (storage/engine/space.py).
        self.space = DataFileSpace(os.path.join(path, "data.mdb"))
        self._sync_lock = threading.Lock()
        self._closed = False
        #: Record ids written, by collection, while an index build watches it (the build's
        #: last step indexes them again: storage/engine/index_build.py). Only the writer's
        #: thread changes it.
        self.watched: dict[int, set[bytes]] = {}
        #: Called before the map grows (with no write open): open multi-document transactions
        #: release their snapshots, as LMDB resizes only with no transaction open.
        self.before_grow: list[Callable[[], None]] = []

    @classmethod
    def open(cls, path: str, map_size: int = INITIAL_MAP_SIZE) -> Environment:
        """Open (creating if needed) the data directory. Raises DataDirLocked if another process
        has it open."""
        os.makedirs(path, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | portability.O_BINARY
        fd = os.open(os.path.join(path, LOCK_FILE), flags, 0o644)
        if not portability.lock_exclusive(fd):
            os.close(fd)
            raise DataDirLocked(
                f"Unable to lock the data directory {path}: another ebbdb process is using it"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            # sync=False is MDB_NOSYNC (see the module docstring); writemap stays False.
            # max_readers: each open multi-document transaction holds a reader slot for its
            # snapshot (storage/engine/overlay.py), besides the short reads (LMDB's default: 126).
            env = lmdb.open(
                path,
                map_size=map_size,
                max_dbs=8,
                max_readers=MAX_READERS,
                subdir=True,
                lock=True,
                sync=False,
            )
            if env.info()["map_size"] < map_size:
                env.set_mapsize(map_size)
            opened = cls(path, env, fd)
            opened.make_room()  # the data file's headroom, before the first write
            return opened
        except BaseException:
            os.close(fd)
            raise

    def begin_write(self) -> Txn:
        return self.env.begin(write=True)

    def committed(self) -> None:
        """Count a commit (called by the one writer right after it commits)."""
        self.commits += 1

    @property
    def map_size(self) -> int:
        return self.env.info()["map_size"]

    @property
    def page_size(self) -> int:
        """LMDB's page size here (the operating system's)."""
        return int(self._page_size)

    def grow(self) -> None:
        """Double the map (waits until no reader is inside; call with no write open)."""
        size = self.map_size
        for release in self.before_grow:
            release()
        self.gate.resize(lambda: self.env.set_mapsize(size * 2))

    def _used(self) -> tuple[int, int]:
        """(bytes of the file LMDB uses, the map size)."""
        info = self.env.info()
        return (info["last_pgno"] + 1) * self._page_size, info["map_size"]

    def needs_room(self) -> bool:
        """Less than a quarter of the map is free, or the data file's headroom needs topping up
        (both are the writer's work, off the event loop)."""
        used, map_size = self._used()
        return used > map_size * (1 - _MIN_FREE_SHARE) or self.space.short(used)

    def make_room(self) -> None:
        """Grow the map ahead of need and keep the data file's headroom (call with no write
        open)."""
        used, map_size = self._used()
        if used > map_size * (1 - _MIN_FREE_SHARE):
            self.grow()
        self.space.ensure(used, self.free_bytes)

    def room_for(self, extra: int) -> bool:
        """Allocate `extra` bytes past the headroom (for a group that grew the stored trees by
        that much); False if the disk cannot give them (call with no write open)."""
        return self.space.ensure(self._used()[0], self.free_bytes, extra)

    def tree_pages(self, txn: Txn) -> int:
        """Pages the sub-databases hold as `txn` sees them (free pages and LMDB's own tables
        aside): what a write added or removed."""
        total = 0
        for db in self._trees:
            st = txn.stat(db)
            total += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        return total

    def free_bytes(self) -> int:
        """An estimate of the free pages inside the data file (pages in use that no tree holds:
        LMDB's free list, which later writes reuse)."""
        with self.env.begin() as txn:
            used_pages = self.env.info()["last_pgno"] + 1
            main = txn.stat()
            held = self.tree_pages(txn) + main["branch_pages"] + main["leaf_pages"] + 2
        # The free list's own pages are counted as free: a small overestimate.
        return max(0, used_pages - held) * self._page_size

    def sync(self) -> int:
        """Flush every commit so far to disk; returns the commit count it covers. Syncs from
        several threads are serialized; a sync never waits for the writer."""
        with self._sync_lock:
            target = self.commits
            if target > self.durable and not self._closed:
                self.env.sync(True)
                self.durable = target
            return self.durable

    def close(self) -> None:
        """Sync and close (the caller makes sure no write is open)."""
        with self._sync_lock:
            if self._closed:
                return
            self._closed = True
            self.env.sync(True)
            self.durable = self.commits
            self.env.close()
            self.space.close()
            os.close(self._lock_fd)
