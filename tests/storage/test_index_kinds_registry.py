"""The index-kind registry's table (storage/indexes/index_kinds/registry.py): KIND_MODULES names exactly
the kinds each kind module registers, so that a lookup imports the right module on first use."""

from __future__ import annotations

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
    out = python_output(script).strip()
    assert out == "[] ['hashed']"
