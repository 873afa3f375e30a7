"""Fixtures for the storage tests: an empty engine on a temporary data directory. A test file may
override `engine` (building on this one, or not) when it needs data loaded first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ebbdb.storage.engine.store import Engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine.open(str(tmp_path / "data"))
    try:
        yield eng
    finally:
        eng.close()
