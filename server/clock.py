"""The server's clock for expiry: real time plus an offset that test commands can move, so a CI
test can check "expires after 30 days" without waiting. Everything that writes a last-modified time
or decides expiry reads this clock."""

from __future__ import annotations

import time


class ExpiryClock:
    def __init__(self) -> None:
        self.offset_ms = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def advance(self, ms: int) -> None:
        """Move forward (or, with a negative value, back) by `ms` milliseconds."""
        self.offset_ms += ms

    def reset(self) -> None:
        """Back to real time."""
        self.offset_ms = 0
