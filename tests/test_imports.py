"""Imports run one way: server -> storage and server -> protocol. protocol and storage never import
each other or server, and neither touches asyncio (only server/ awaits)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "storage", "server")
FORBIDDEN = {
    "protocol": {"storage", "server", "asyncio"},
    "storage": {"protocol", "server", "asyncio"},
    "server": set(),
}


def imported_roots(path: Path) -> set[tuple[str, int]]:
    """(top-level module, line) for every absolute import in a file, wherever it appears
    (including inside functions and `if TYPE_CHECKING:` blocks)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add((alias.name.split(".")[0], node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add((node.args[0].value.split(".")[0], node.lineno))
    return found


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_package_has_sources(package: str) -> None:
    assert sources(package), f"no .py files under {package}/"


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sources(package)
        for module, line in sorted(imported_roots(path))
        if module in FORBIDDEN[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_every_import_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio\n"
        "import server.app as app\n"
        "from storage.engine import Engine\n"
        "from . import sibling\n"
        "def f():\n"
        "    import protocol\n"
        "    importlib.import_module('server.x')\n"
    )
    roots = {m for m, _ in imported_roots(sample)}
    assert roots == {"asyncio", "server", "storage", "protocol"}
