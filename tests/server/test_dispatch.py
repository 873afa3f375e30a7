"""The dispatcher without sockets: a command document in, its reply document out. It finds the
handler (59 for an unknown one), extracts the parameters (40415 for an unknown field), gives the
handler its context, and turns any exception into a reply (1 InternalError for a bug)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import bson
import pytest

from ebbdb.protocol import MsgFlags, decode_message, encode_msg
from ebbdb.server.arguments import COMMAND_VALUE, Kind, NoParams, arg
from ebbdb.server.context import Client, CommandContext, Services
from ebbdb.server.dispatch import Dispatcher
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY, Registry
from ebbdb.storage.core.documents import CODEC

registry = Registry()


@dataclass(frozen=True)
class EchoParams:
    value: Any = arg(COMMAND_VALUE, Kind.ANY)
    x: int = arg("x", Kind.INT, 0)


@registry.command("echo", params=EchoParams)
async def echo(ctx: CommandContext, p: EchoParams) -> dict[str, Any]:
    """Reply with what the handler was given."""
    return {
        "x": p.x,
        "db": ctx.db,
        "command": ctx.command,
        "ns": ctx.ns("c"),
        "client": ctx.client.id,
    }


@registry.command("boom")
async def boom(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Fail as a bug would."""
    raise RuntimeError("a bug")


@registry.command("refuse")
async def refuse(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Fail as a handler does on purpose."""
    raise CommandError(ErrorCode.BadValue, "no, thanks")


@registry.command("secret", test_only=True)
async def secret(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Exists only with enableTestCommands."""
    return {}


def run(services: Services, body: dict[str, Any], reg: Registry = registry) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await Dispatcher(services, reg).run(Client(7, "peer"), body)

    return asyncio.run(main())


def test_a_command_gets_its_parameters_and_context(services: Services) -> None:
    reply = run(services, {"echo": 1, "x": 2.9, "$db": "d"})
    assert reply == {"x": 2, "db": "d", "command": "echo", "ns": "d.c", "client": 7, "ok": 1.0}
    assert services.stats.opcounters["command"] == 1


def error(code: int, name: str, message: str) -> dict[str, Any]:
    return {"ok": 0.0, "errmsg": message, "code": code, "codeName": name}


@pytest.mark.parametrize(
    ("body", "reply"),
    [
        ({"nope": 1}, error(59, "CommandNotFound", "no such command: 'nope'")),
        # Without enableTestCommands, a test-only command does not exist.
        ({"secret": 1}, error(59, "CommandNotFound", "no such command: 'secret'")),
        ({"boom": 1}, error(1, "InternalError", "internal error: RuntimeError")),
        ({"refuse": 1}, error(2, "BadValue", "no, thanks")),
        (
            {"echo": 1, "y": 1},
            error(40415, "Location40415", "BSON field 'echo.y' is an unknown field."),
        ),
        (
            {"echo": 1, "writeConcern": {"w": 1}},
            error(72, "InvalidOptions", "Command does not support writeConcern"),
        ),
    ],
    ids=["unknown", "test-only", "exception", "command-error", "unknown-field", "write-concern"],
)
def test_failures_become_error_replies(
    services: Services, body: dict[str, Any], reply: dict[str, Any]
) -> None:
    assert run(services, {**body, "$db": "d"}) == reply


def test_a_missing_db_is_40571(services: Services) -> None:
    assert run(services, {"echo": 1})["code"] == 40571


def test_the_registered_commands_run_too(services: Services) -> None:
    assert run(services, {"ping": 1, "$db": "admin"}, REGISTRY) == {"ok": 1.0}
    reply = run(services, {"insert": "c", "documents": [{"_id": 1}], "$db": "d"}, REGISTRY)
    assert reply == {"n": 1, "ok": 1.0}
    reply = run(services, {"find": "c", "$db": "d"}, REGISTRY)
    assert bson.decode(bson.encode(reply))["cursor"] == {
        "firstBatch": [{"_id": 1}],
        "id": 0,
        "ns": "d.c",
    }


def test_a_frame_in_a_reply_frame_out(services: Services) -> None:
    async def main() -> tuple[bytes | None, bytes | None]:
        dispatcher = Dispatcher(services, registry)
        client = Client(1)
        body = bson.encode({"echo": 1, "x": 3, "$db": "d"})
        answered = await dispatcher.handle_frame(client, encode_msg(11, 0, body))
        silent = await dispatcher.handle_frame(
            client, encode_msg(12, 0, body, MsgFlags.MORE_TO_COME)
        )
        return answered, silent

    answered, silent = asyncio.run(main())
    assert silent is None
    assert answered is not None
    msg = decode_message(answered)
    assert msg.response_to == 11  # type: ignore[union-attr]
    assert bson.decode(msg.body, CODEC)["x"] == 3  # type: ignore[union-attr]


@pytest.mark.parametrize("db", ["a", "b"])
def test_contexts_are_kept_per_database_and_command(services: Services, db: str) -> None:
    async def main() -> Client:
        dispatcher = Dispatcher(services, registry)
        client = Client(1)
        for _ in range(3):
            await dispatcher.run(client, {"echo": 1, "$db": db})
        return client

    client = asyncio.run(main())
    assert list(client.contexts) == [(db, "echo")]
