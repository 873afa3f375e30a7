"""Case tables kept as data (YAML beside the tests), as MongoDB's spec tests keep theirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CASES = Path(__file__).resolve().parent / "query" / "cases"


def load_cases(name: str) -> Any:
    """The table `name` (tests/query/cases/<name>.yaml), as safe_load reads it."""
    return yaml.safe_load((CASES / f"{name}.yaml").read_text(encoding="utf-8"))
