"""CRC-32C (Castagnoli), the checksum OP_MSG carries when its checksumPresent flag is set: computed
by the `crc32c` package (C, with the CPU's CRC instruction where there is one)."""

from __future__ import annotations

from collections.abc import Callable

_Impl = Callable[[bytes | bytearray | memoryview, int], int]
_impl: _Impl | None = None


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """Return the CRC-32C of `data`, continuing from `crc` (0 for a fresh checksum)."""
    global _impl
    if _impl is None:
        # Imported on the first checksum, not at start-up: the package's __init__ reads its own
        # metadata through importlib.metadata (~25 ms), and most clients never send a checksum.
        from crc32c import crc32c as impl

        _impl = impl
    return _impl(data, crc)
