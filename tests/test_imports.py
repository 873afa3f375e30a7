"""Imports run one way: server -> storage and server -> protocol. protocol and storage never import
each other or server, and neither touches asyncio (only server/ awaits). Every import of ebbdb's
own code names it under the one import package, `ebbdb.server...`: the bare top-level folders
import only from a checkout, never from an installed ebbdb."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "storage", "server")
FORBIDDEN = {
    "protocol": {"ebbdb.storage", "ebbdb.server", "asyncio"},
    "storage": {"ebbdb.protocol", "ebbdb.server", "asyncio"},
    "server": set(),
}
#: The folders' own names as top-level modules: what the code imported before the one package.
BARE = set(PACKAGES)


def layer(module: str) -> str:
    """What an import reaches: `ebbdb.storage.engine.store` -> `ebbdb.storage`, `ebbdb` -> `ebbdb`,
    anything else its top-level module (`asyncio.locks` -> `asyncio`, `server.app` -> `server`)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "ebbdb" else parts[0]


def imported_roots(path: Path) -> set[tuple[str, int]]:
    """(layer, line) for every absolute import in a file, wherever it appears (including inside
    functions and `if TYPE_CHECKING:` blocks)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add((layer(alias.name), node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((layer(node.module), node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add((layer(node.args[0].value), node.lineno))
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
        "import ebbdb.server.app as app\n"
        "from ebbdb.storage.engine.store import Engine\n"
        "from . import sibling\n"
        "import ebbdb\n"
        "def f():\n"
        "    import ebbdb.protocol\n"
        "    from storage import keys\n"
        "    importlib.import_module('server.x')\n"
    )
    roots = {m for m, _ in imported_roots(sample)}
    assert roots == {
        "asyncio",
        "ebbdb",
        "ebbdb.server",
        "ebbdb.storage",
        "ebbdb.protocol",
        "storage",
        "server",
    }


def test_no_import_names_a_folder_as_a_top_level_module() -> None:
    """`from storage.engine.store import ...` works in a checkout (its root is on sys.path) and fails
    where ebbdb is installed: the code, its tests and the benchmarks all import `ebbdb.…`."""
    folders = [*PACKAGES, "ebbdb", "tests", "bench"]
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for folder in folders
        for path in sorted((ROOT / folder).glob("*.py" if folder == "ebbdb" else "**/*.py"))
        for module, line in sorted(imported_roots(path))
        if module in BARE
    ]
    assert not wrong, "\n".join(wrong)


# -- no import cycle inside server/ ----------------------------------------------------------------


def module_name(path: Path, root: Path = ROOT, prefix: str = "ebbdb.") -> str:
    """`server/commands/reads.py` -> `ebbdb.server.commands.reads` (the folders are ebbdb's
    subpackages); a package's __init__ is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return prefix + ".".join(parts)


def imported_modules(
    path: Path, known: set[str], root: Path = ROOT, prefix: str = "ebbdb."
) -> set[str]:
    """The modules among `known` that a file imports, wherever the import stands (in functions and
    `if TYPE_CHECKING:` blocks too). `from a.b import c` names a.b.c when that is a module, else
    a.b; a package's own __init__ is not counted as imported by its submodules."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path, root, prefix)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def longest_known(dotted: str) -> str | None:
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):
            candidate = ".".join(parts[:n])
            if candidate in known:
                return candidate
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = longest_known(alias.name)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                target = longest_known(f"{base}.{alias.name}") or longest_known(base)
                if target is not None:
                    found.add(target)
    found.discard(name)
    return found


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    paths = {module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}
    known = set(paths)
    return {name: imported_modules(path, known, root) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    """Counting type-only imports too: a cycle there is a cycle of the design, even if Python
    never runs into it."""
    graph = import_graph(package)
    assert any(graph.values()), "no import between the package's modules seen: wrong names?"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_cycle_checker_sees_type_only_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import leaf\n")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.leaf import X\n"
    )
    (pkg / "sub" / "leaf.py").write_text("from ..a import f\nimport pkg.sub\n")
    paths = {module_name(path, tmp_path, ""): path for path in pkg.rglob("*.py")}
    graph = {name: imported_modules(path, set(paths), tmp_path, "") for name, path in paths.items()}
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.sub.leaf"},
        "pkg.sub": {"pkg.sub.leaf"},
        "pkg.sub.leaf": {"pkg.a", "pkg.sub"},
    }
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.sub.leaf", "pkg.a"]
    del graph["pkg.sub.leaf"]
    assert find_cycle(graph) is None


# -- the parts of storage/ and the arrows between them ---------------------------------------------

#: storage/'s parts from the bottom up (storage/__init__.py): a part imports only the parts before
#: it in this list, and itself.
STORAGE_PARTS = (
    "core",
    "geometry",
    "query",
    "catalog",
    "expiry",
    "indexes",
    "engine",
    "execution",
    "aggregate",
)


def storage_part(module: str) -> str | None:
    """`ebbdb.storage.engine.writer` -> `engine`; None for the package `ebbdb.storage` itself."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a part to a part above it, as `a -> b (part -> part)`."""
    rank = {part: n for n, part in enumerate(STORAGE_PARTS)}
    wrong = []
    for module, imported in sorted(graph.items()):
        here = storage_part(module)
        for target in sorted(imported):
            there = storage_part(target)
            if here is None or there is None:
                continue
            if rank[there] > rank[here]:
                wrong.append(f"{module} -> {target} ({here} -> {there})")
    return wrong


def test_every_storage_module_belongs_to_a_part() -> None:
    modules = import_graph("storage")
    loose = sorted(
        m for m in modules if m != "ebbdb.storage" and storage_part(m) not in STORAGE_PARTS
    )
    assert not loose, f"storage modules outside the parts {STORAGE_PARTS}: {loose}"
    assert {storage_part(m) for m in modules} - {None} == set(STORAGE_PARTS)


def test_storage_parts_import_only_the_parts_below_them() -> None:
    wrong = upward_arrows(import_graph("storage"))
    assert not wrong, "imports running up storage's parts:\n" + "\n".join(wrong)


def test_each_storage_part_says_what_it_owns_and_may_import() -> None:
    for part in STORAGE_PARTS:
        doc = ast.get_docstring(ast.parse((ROOT / "storage" / part / "__init__.py").read_text()))
        assert doc and "import" in doc, f"storage/{part}/__init__.py: no docstring on its imports"


def test_the_arrow_checker_sees_an_upward_import() -> None:
    graph = {
        "ebbdb.storage.core.errors": set(),
        "ebbdb.storage.engine.writer": {"ebbdb.storage.core.errors"},
        "ebbdb.storage.indexes.planner": {"ebbdb.storage.engine.writer"},
    }
    assert upward_arrows(graph) == [
        "ebbdb.storage.indexes.planner -> ebbdb.storage.engine.writer (indexes -> engine)"
    ]
