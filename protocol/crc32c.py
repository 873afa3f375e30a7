"""CRC-32C (Castagnoli), the checksum OP_MSG carries when its checksumPresent flag is set."""

from __future__ import annotations


def _make_table() -> tuple[int, ...]:
    poly = 0x82F63B78  # reflected Castagnoli polynomial
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """Return the CRC-32C of `data`, continuing from `crc` (0 for a fresh checksum)."""
    table = _TABLE
    c = crc ^ 0xFFFFFFFF
    for b in bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
