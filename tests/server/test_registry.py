"""The command registry: every command the first milestone serves is registered (with its aliases),
every handler is a documented coroutine function taking typed parameters, and names are unique;
COMMAND_MODULES, which lets the registry import a command's module on first use, says exactly what
the modules register."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys
import threading
import time
from typing import Any

import pytest

from ebbdb.server import commands as commands_package
from ebbdb.server.arguments import NoParams
from ebbdb.server.registry import COMMAND_MODULES, COMMANDS_PACKAGE, REGISTRY, Command, Registry
from tests.helpers import python_output

EXPECTED = [
    "hello",
    "isMaster",
    "ismaster",
    "ping",
    "buildInfo",
    "insert",
    "find",
    "getMore",
    "killCursors",
    "listDatabases",
    "listCollections",
    "create",
    "drop",
    "dropDatabase",
    "getParameter",
    "getLog",
    "serverStatus",
    "listCommands",
    "endSessions",
    "whatsmyuri",
    "connectionStatus",
    "hostInfo",
    "getCmdLineOpts",
]


@pytest.mark.parametrize("name", EXPECTED)
def test_command_is_registered(name: str) -> None:
    cmd = REGISTRY.lookup(name)
    assert cmd is not None, name
    assert name == cmd.name or name in cmd.aliases


def test_hello_aliases_share_one_handler() -> None:
    hello = REGISTRY.lookup("hello")
    assert hello is not None
    assert REGISTRY.lookup("isMaster") is hello
    assert REGISTRY.lookup("ismaster") is hello
    assert set(hello.aliases) >= {"isMaster", "ismaster"}


def test_lookup_is_case_sensitive_and_misses_unknown_names() -> None:
    assert REGISTRY.lookup("nosuchcommand") is None
    assert REGISTRY.lookup("Ping") is None
    assert REGISTRY.lookup("") is None


def _all_commands() -> list[Command]:
    return REGISTRY.commands()


@pytest.mark.parametrize("cmd", _all_commands(), ids=lambda c: c.name)
def test_handler_is_a_documented_coroutine_function(cmd: Command) -> None:
    assert inspect.iscoroutinefunction(cmd.handler), cmd.name
    assert cmd.help.strip(), f"{cmd.name} has no help text"
    assert cmd.help == inspect.getdoc(cmd.handler)
    assert len(inspect.signature(cmd.handler).parameters) == 2  # (ctx, params)


@pytest.mark.parametrize("cmd", _all_commands(), ids=lambda c: c.name)
def test_params_are_frozen_dataclasses(cmd: Command) -> None:
    assert dataclasses.is_dataclass(cmd.params), cmd.name
    assert cmd.params.__dataclass_params__.frozen, cmd.name  # type: ignore[attr-defined]


def test_commands_are_listed_once_in_name_order() -> None:
    names = [c.name for c in REGISTRY.commands()]
    assert names == sorted(names)
    assert len(names) == len(set(names))
    assert "isMaster" not in names  # aliases are not listed separately
    assert "hello" in names


def test_fresh_registry_rejects_a_duplicate_name() -> None:
    reg = Registry()

    @reg.command("foo")
    async def foo(ctx: Any, p: NoParams) -> dict[str, Any]:
        """Foo."""
        return {"ok": 1.0}

    assert reg.lookup("foo") is not None
    assert reg.lookup("foo").params is NoParams  # type: ignore[union-attr]
    assert reg.lookup("foo").help == "Foo."  # type: ignore[union-attr]

    with pytest.raises(ValueError):

        @reg.command("foo")
        async def foo_again(ctx: Any, p: NoParams) -> dict[str, Any]:
            """Again."""
            return {"ok": 1.0}


def test_fresh_registry_rejects_an_alias_clash() -> None:
    reg = Registry()

    @reg.command("alpha", "a")
    async def alpha(ctx: Any, p: NoParams) -> dict[str, Any]:
        """Alpha."""
        return {"ok": 1.0}

    with pytest.raises(ValueError):

        @reg.command("a")
        async def other(ctx: Any, p: NoParams) -> dict[str, Any]:
            """Other."""
            return {"ok": 1.0}

    with pytest.raises(ValueError):

        @reg.command("beta", "alpha")
        async def beta(ctx: Any, p: NoParams) -> dict[str, Any]:
            """Beta."""
            return {"ok": 1.0}


def test_fresh_registry_is_independent_of_the_global_one() -> None:
    reg = Registry()
    assert reg.commands() == []
    assert reg.lookup("ping") is None


def test_command_modules_table_is_what_the_modules_register() -> None:
    """Every module under server/commands, imported into a registry of its own: the names each
    registers are the ones COMMAND_MODULES gives it (a module that registers nothing, such as a
    helper of several commands, is not in the table)."""
    registered: dict[str, set[str]] = {}
    for info in pkgutil.iter_modules(commands_package.__path__):
        importlib.import_module(f"{COMMANDS_PACKAGE}.{info.name}")
    for cmd in REGISTRY.commands():
        module = cmd.handler.__module__.removeprefix(COMMANDS_PACKAGE + ".")
        registered.setdefault(module, set()).update((cmd.name, *cmd.aliases))
    assert registered == {m: set(names) for m, names in COMMAND_MODULES.items()}
    names = [n for names in COMMAND_MODULES.values() for n in names]
    assert len(names) == len(set(names)), "a name in two modules"


def test_a_lookup_imports_only_its_own_module() -> None:
    """In a fresh interpreter: looking up ping imports the handshake module and no other command
    module; listing the commands imports them all."""
    script = (
        "import sys\n"
        "from ebbdb.server.registry import COMMANDS_PACKAGE, REGISTRY\n"
        "def loaded():\n"
        "    return sorted(m for m in sys.modules if m.startswith(COMMANDS_PACKAGE + '.'))\n"
        "before = loaded()\n"
        "assert REGISTRY.lookup('ping') is not None\n"
        "assert REGISTRY.lookup('isMaster') is REGISTRY.lookup('hello')\n"
        "assert REGISTRY.lookup('nosuchcommand') is None\n"
        "print(before, loaded())\n"
        "REGISTRY.commands()\n"
        "print(len(loaded()))\n"
    )
    out = python_output(script).splitlines()
    assert out[0] == f"[] ['{COMMANDS_PACKAGE}.handshake']"
    modules = {
        info.name
        for info in pkgutil.iter_modules(commands_package.__path__)
        if info.name in COMMAND_MODULES
    }
    assert int(out[1]) >= len(modules)


def test_a_registry_loads_a_module_on_the_first_lookup_of_its_names() -> None:
    reg = Registry({"handshake": ("ping",)}, COMMANDS_PACKAGE)
    # The module is imported already (by the tests above), so nothing registers into `reg`:
    # the lookup finds nothing rather than failing.
    assert reg.lookup("nosuchcommand") is None
    assert reg.commands() == []


def test_unloaded_module_names_the_module_a_lookup_would_import(tmp_path: Any) -> None:
    """The dispatcher asks this before a lookup, to import a command's module on a worker thread
    rather than on the event loop: a name is pending until its module is imported, and a name no
    module registers never is."""
    package = tmp_path / "lazycmds"
    package.mkdir()
    (package / "__init__.py").write_text("REGISTRY = None  # the test's own, set below\n")
    (package / "one.py").write_text(
        "import threading\n"
        "from lazycmds import REGISTRY\n"
        "IMPORTED_ON = threading.current_thread().name\n"
        "@REGISTRY.command('lazyOne', 'lazyAlias')\n"
        "async def lazy_one(ctx, p):\n"
        "    '''A command of the test's own.'''\n"
        "    return {}\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        lazy = Registry({"one": ("lazyOne", "lazyAlias")}, "lazycmds")
        importlib.import_module("lazycmds").REGISTRY = lazy
        assert lazy.unloaded_module("lazyAlias") == "one"
        assert lazy.unloaded_module("nosuch") is None
        found: list[Command | None] = []
        worker = threading.Thread(target=lambda: found.append(lazy.lookup("lazyAlias")))
        worker.start()
        worker.join()
        assert found[0] is not None and found[0].name == "lazyOne"
        assert sys.modules["lazycmds.one"].IMPORTED_ON == worker.name
        assert lazy.unloaded_module("lazyOne") is None
        assert lazy.lookup("lazyOne") is found[0]
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("lazycmds.one", "lazycmds"):
            sys.modules.pop(name, None)


def test_a_lookup_during_the_import_waits_for_the_whole_module(tmp_path: Any) -> None:
    """A second request for a command whose module another thread is importing gets it only once
    the module is whole: its handler registers before the helpers defined after it exist."""
    package = tmp_path / "slowcmds"
    package.mkdir()
    (package / "__init__.py").write_text("REGISTRY = None  # the test's own, set below\n")
    (package / "two.py").write_text(
        "import threading\n"
        "from slowcmds import REGISTRY\n"
        "REGISTERED = threading.Event()\n"
        "GO_ON = threading.Event()\n"
        "@REGISTRY.command('slowOne')\n"
        "async def slow_one(ctx, p):\n"
        "    '''A command of the test's own.'''\n"
        "    return helper()\n"
        "REGISTERED.set()\n"
        "GO_ON.wait(10)\n"
        "def helper():\n"
        "    return {'whole': True}\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        slow = Registry({"two": ("slowOne",)}, "slowcmds")
        importlib.import_module("slowcmds").REGISTRY = slow
        importing = threading.Thread(target=slow.lookup, args=("slowOne",))
        importing.start()
        module = sys.modules.get("slowcmds.two")
        while module is None or not hasattr(module, "REGISTERED"):
            time.sleep(0.001)
            module = sys.modules.get("slowcmds.two")
        assert module.REGISTERED.wait(10)
        found: list[Command | None] = []
        second = threading.Thread(target=lambda: found.append(slow.lookup("slowOne")))
        second.start()
        second.join(0.2)
        assert second.is_alive(), "the second lookup did not wait for the import"
        module.GO_ON.set()
        importing.join(10)
        second.join(10)
        assert found and found[0] is not None
        assert hasattr(sys.modules["slowcmds.two"], "helper")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("slowcmds")]:
            del sys.modules[name]
