"""The command registry: handlers register with a decorator; the dispatcher and listCommands read it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import NoParams

Handler = Callable[[Any, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Command:
    name: str
    handler: Handler
    params: type
    help: str
    admin_only: bool = False
    lenient: bool = False  # ignore unknown fields (handshake/diagnostics)
    test_only: bool = False  # exists only with enableTestCommands=1
    aliases: tuple[str, ...] = ()
    #: Changes data: takes a writeConcern (others refuse one, as MongoDB); a function of the
    #: command document for a command that writes only sometimes (aggregate with $out/$merge).
    writes: bool | Callable[[Mapping[str, Any]], bool] = False

    def takes_write_concern(self, body: Mapping[str, Any]) -> bool:
        return self.writes(body) if callable(self.writes) else self.writes


class Registry:
    def __init__(self) -> None:
        self._by_name: dict[str, Command] = {}
        self._canonical: dict[str, Command] = {}

    def command(
        self,
        name: str,
        *aliases: str,
        params: type = NoParams,
        admin_only: bool = False,
        lenient: bool = False,
        test_only: bool = False,
        writes: bool | Callable[[Mapping[str, Any]], bool] = False,
    ) -> Callable[[Handler], Handler]:
        """Register `async def handler(ctx, params) -> reply` under `name` and its aliases."""

        def register(handler: Handler) -> Handler:
            help_text = inspect.getdoc(handler) or ""
            cmd = Command(
                name, handler, params, help_text, admin_only, lenient, test_only, aliases, writes
            )
            taken = [n for n in (name, *aliases) if n in self._by_name]
            if taken:
                raise ValueError(f"command {taken[0]!r} registered twice")
            for n in (name, *aliases):
                self._by_name[n] = cmd
            self._canonical[name] = cmd
            return handler

        return register

    def lookup(self, name: str) -> Command | None:
        return self._by_name.get(name)

    def commands(self) -> list[Command]:
        return [self._canonical[n] for n in sorted(self._canonical)]


#: The one registry every module under server/commands registers into.
REGISTRY = Registry()
