"""The index-kind registry (storage/indexes/index_kinds/registry.py): KIND_MODULES names exactly the
kinds each kind module registers, so that a lookup imports the right module on first use; and the
kinds register how the planner reads them, so that the planner names no kind."""

from __future__ import annotations

import ast
from pathlib import Path

from ebbdb.storage.indexes.index_kinds import KIND_MODULES, registered, registry
from ebbdb.storage.indexes.index_kinds import kinds as every_kind
from tests.helpers import python_output


def test_kind_modules_table_is_what_the_modules_register() -> None:
    assert every_kind.registered() == frozenset(KIND_MODULES)
    by_module = {
        name: kind.bodies.__module__.rpartition(".")[2] for name, kind in registry._KINDS.items()
    }
    assert by_module == KIND_MODULES
    assert registered() == frozenset(KIND_MODULES)


def test_a_lookup_imports_only_its_kind_module() -> None:
    script = (
        "import sys\n"
        "from ebbdb.storage.indexes.index_kinds import kind_named\n"
        "def loaded():\n"
        "    return sorted(m.rpartition('.')[2] for m in sys.modules\n"
        "                  if m.startswith('ebbdb.storage.indexes.index_kinds.') and not m.endswith('registry'))\n"
        "before = loaded()\n"
        "assert kind_named('hashed') is not None\n"
        "assert kind_named('ascending') is None\n"
        "print(before, loaded())\n"
    )
    assert python_output(script).splitlines() == ["[] ['hashed']"]


PLANNER = Path(__file__).resolve().parents[2] / "storage" / "indexes" / "planner.py"


def test_the_planner_names_no_kind() -> None:
    """No kind's name as a string in the planner's code, and no kind module imported by it; nor
    does any kind module import the planner (they share storage/indexes/plans.py)."""
    tree = ast.parse(PLANNER.read_text(encoding="utf-8"))
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not names & set(KIND_MODULES), names & set(KIND_MODULES)
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    kind_modules = {f"ebbdb.storage.indexes.index_kinds.{m}" for m in KIND_MODULES.values()}
    assert not imported & kind_modules
    for module in set(KIND_MODULES.values()):
        source = (PLANNER.parent / "index_kinds" / f"{module}.py").read_text(encoding="utf-8")
        assert "ebbdb.storage.indexes.planner" not in source, module


def test_each_kind_declares_how_it_is_planned() -> None:
    planning = {name: kind.planning for name, kind in registry._KINDS.items()}
    assert {n for n, p in planning.items() if not p.chosen} == {"text", "2d", "2dsphere"}
    assert {n for n, p in planning.items() if p.opaque} == {"2d", "2dsphere"}
    assert {n for n, p in planning.items() if p.candidate is not None} == {"hashed", "wildcard"}
    assert {n for n, p in planning.items() if p.needs_bounds} == {"wildcard"}
    assert {n for n, p in planning.items() if p.query is not None} == {"2d", "2dsphere"}


def test_a_near_query_needs_a_geo_index_before_any_geo_index_was_seen(tmp_path: Path) -> None:
    """A fresh process, a collection without a geo index: the geo kind's module was never
    imported, yet its planner refuses the $near as mongod does (code 291), and a filter without a
    geo operator does not import it."""
    script = (
        "import sys, bson\n"
        "from ebbdb.storage.core.errors import QueryError\n"
        "from ebbdb.storage.engine.store import Engine\n"
        "from ebbdb.storage.indexes.planner import plan_query\n"
        "from ebbdb.storage.query.match import parse_filter\n"
        f"eng = Engine.open({str(tmp_path / 'data')!r})\n"
        "eng.insert('db', 'c', [bson.encode({'_id': 1, 'loc': [1, 2]})])\n"
        "info = eng.collection('db', 'c')\n"
        "GEO = 'ebbdb.storage.indexes.index_kinds.geo'\n"
        "print(type(plan_query(info, parse_filter({'loc': [1, 2]}))).__name__, GEO in sys.modules)\n"
        "try:\n"
        "    plan_query(info, parse_filter({'loc': {'$near': [1, 2]}}))\n"
        "except QueryError as e:\n"
        "    print(e.code_name, e, GEO in sys.modules)\n"
        "eng.close()\n"
    )
    assert python_output(script).splitlines() == [
        "CollScan False",
        "NoQueryExecutionPlans error processing query: ns=db.c planner returned error :: caused "
        "by :: unable to find index for $geoNear query True",
    ]
