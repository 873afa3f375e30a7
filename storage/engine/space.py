"""Disk space for the data file: a headroom of allocated, unused bytes past LMDB's last page, so
that a write never meets a full disk halfway through a commit, and deletes and drops can still
run (and free pages inside the file) once the disk is full.

LMDB (without MDB_WRITEMAP) writes a commit's pages with pwrite at the end of its file; on a full
disk (ENOSPC), past a file-size limit (EFBIG) or over a quota (EDQUOT) the commit fails (a short
write is reported as EIO) and is undone: the meta page is not written, nothing stored changes.
The file never shrinks; pages freed by deletes are reused by later writes. So the headroom is the
allocated bytes past the last page plus the free pages inside the file. While it is below
the reserve (an eighth of the file, between 1 and 64 MiB) and the file cannot be extended, the space is *low*: only writes that do not grow the
stored trees run (storage/engine/writer.py), so deletes and drops can free pages.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

from ebbdb.storage.core import portability

log = logging.getLogger("ebbdb.storage")

#: Bytes kept allocated for writes that free space (a delete touches, and so copies, a few pages
#: per document; a drop reuses the pages it empties): an eighth of the file, within these bounds.
RESERVE_MIN = 1 << 20
RESERVE_MAX = 64 << 20
#: errno values that mean "the data file cannot grow" (EIO: LMDB's report of a short write).
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO})


class DataFileSpace:
    """The allocation of one data file. `low` says that writes which need new pages are refused
    (read by the writer before each group); `message` is the error those writes get."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.low = False
        self._fd = os.open(path, os.O_RDWR | portability.O_BINARY)
        self._allocated = 0  # bytes known to be allocated (by us, or written by LMDB)
        self._errno = errno.ENOSPC

    @property
    def message(self) -> str:
        """What a refused write reports (MongoDB's form for a file it cannot write: the system's
        error, then the path)."""
        return f"{os.strerror(self._errno)}: {self.path}"

    def short(self, used: int) -> bool:
        """The headroom past `used` bytes is below the reserve (the writer must top it up)."""
        return self.low or self._allocated < used + _reserve(used)

    def ensure(self, used: int, free_bytes: Callable[[], int], extra: int = 0) -> bool:
        """Keep `extra` + the reserve allocated past `used` bytes (LMDB's pages in use), growing
        the file an eighth more than that. Sets `low` when that is impossible and the
        free pages inside the file do not make up the reserve. Returns whether `extra` fits.
        Call with no write transaction open (it may write to the disk)."""
        self._allocated = max(self._allocated, used)
        reserve = _reserve(used)
        want = used + extra + reserve
        if self._allocated >= want:
            self._set_low(False)
            return True
        if self._extend(want + used // 8) or self._extend(want):
            self._set_low(False)
            return True
        slack = self._allocated - used
        self._set_low(slack + free_bytes() < reserve)
        return not extra and not self.low

    def _extend(self, size: int) -> bool:
        try:
            # From the known end only: the range below is allocated already, and a file system
            # (or a platform) without fallocate gets zeros written over nothing but new blocks.
            portability.preallocate(self._fd, self._allocated, size - self._allocated)
        except OSError as exc:
            if exc.errno not in SPACE_ERRNOS:
                raise
            self._errno = exc.errno
            return False
        self._allocated = size
        return True

    def _set_low(self, low: bool) -> None:
        if low and not self.low:
            log.warning(
                "the data file %s cannot grow (%s): writes that need space are refused with "
                "OutOfDiskSpace until deletes or drops free some",
                self.path,
                os.strerror(self._errno),
            )
        elif self.low and not low:
            log.info("the data file %s has room again: writes are accepted", self.path)
        self.low = low

    def close(self) -> None:
        os.close(self._fd)


def _reserve(used: int) -> int:
    return min(max(used // 8, RESERVE_MIN), RESERVE_MAX)
