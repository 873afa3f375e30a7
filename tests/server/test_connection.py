"""A connection without a socket (a transport that records what is written, data fed from loop
callbacks as a transport feeds it): every request runs inside the connection's Task, so
`asyncio.timeout()` works in a handler from its first line, whether it waits or not; requests are
answered in order; shutdown waits for the running request on an event."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import bson

from ebbdb.protocol import decode_message, encode_msg
from ebbdb.server.arguments import NoParams
from ebbdb.server.connection import Connection
from ebbdb.server.context import CommandContext, Services
from ebbdb.server.dispatch import Dispatcher
from ebbdb.server.listener import InputBudget
from ebbdb.server.registry import Registry
from ebbdb.storage.core.documents import CODEC
from tests.waiting import wait_until_async

registry = Registry()


class Gate:
    """What waitForRelease waits on (made anew on each test's loop)."""

    release = asyncio.Event()


@registry.command("inTask")
async def in_task(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """A timeout entered before the handler has waited on anything (where no Task ran before)."""
    async with asyncio.timeout(5):
        return {"task": asyncio.current_task() is not None}


@registry.command("timesOut")
async def times_out(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """A timeout that expires while the handler waits."""
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)
    except TimeoutError:
        return {"timedOut": True}
    return {"timedOut": False}


@registry.command("waitForRelease")
async def wait_for_release(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Wait until the test lets it go."""
    await Gate.release.wait()
    return {"released": True}


class Transport:
    """Collects what the connection writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def abort(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


class Owner:
    open_connections = 1
    input_budget = InputBudget()

    def message_timeout(self) -> float:
        return 60.0

    def connection_opened(self, conn: Connection) -> bool:
        return True

    def connection_closed(self, conn: Connection) -> None:
        pass


_IDS = itertools.count(1)


def request(command: str) -> bytes:
    return encode_msg(next(_IDS), 0, bson.encode({command: 1, "$db": "d"}))


def replies(transport: Transport) -> list[dict[str, Any]]:
    out = []
    for frame in transport.written:
        msg = decode_message(frame)
        out.append(bson.decode(msg.body, CODEC))  # type: ignore[union-attr]
    return out


def open_connection(services: Services) -> tuple[Connection, Transport]:
    conn = Connection(Dispatcher(services, registry), Owner())
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def feed(conn: Connection, *commands: str) -> None:
    """Deliver requests from a loop callback, as a transport does (outside any task)."""
    data = b"".join(request(c) for c in commands)
    asyncio.get_running_loop().call_soon(conn.data_received, data)


async def answered(transport: Transport, n: int) -> None:
    async def written() -> bool:
        return len(transport.written) >= n

    await wait_until_async(written, f"{n} replies written")


def test_a_handler_runs_in_a_task_from_its_first_line(services: Services) -> None:
    async def main() -> list[dict[str, Any]]:
        conn, transport = open_connection(services)
        feed(conn, "inTask")
        await answered(transport, 1)
        return replies(transport)

    assert asyncio.run(main()) == [{"task": True, "ok": 1.0}]


def test_a_timeout_expires_inside_a_handler(services: Services) -> None:
    async def main() -> list[dict[str, Any]]:
        conn, transport = open_connection(services)
        feed(conn, "timesOut", "inTask")
        await answered(transport, 2)
        return replies(transport)

    assert asyncio.run(main()) == [{"timedOut": True, "ok": 1.0}, {"task": True, "ok": 1.0}]


def test_requests_queue_behind_the_running_one_and_idle_is_an_event(services: Services) -> None:
    async def main() -> tuple[list[dict[str, Any]], bool]:
        Gate.release = asyncio.Event()
        conn, transport = open_connection(services)
        feed(conn, "waitForRelease", "inTask")
        await asyncio.sleep(0.01)
        assert conn.busy and not transport.written
        waiter = asyncio.ensure_future(conn.wait_idle())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        Gate.release.set()
        await asyncio.wait_for(waiter, 5)
        return replies(transport), conn.busy

    got, busy = asyncio.run(main())
    assert got == [{"released": True, "ok": 1.0}, {"task": True, "ok": 1.0}]
    assert not busy


def test_a_lost_connection_runs_what_it_received_and_ends_after(services: Services) -> None:
    async def main() -> tuple[bool, bool, list[bytes]]:
        Gate.release = asyncio.Event()
        conn, transport = open_connection(services)
        feed(conn, "waitForRelease", "inTask")
        await asyncio.sleep(0.01)
        conn.connection_lost(None)
        await asyncio.sleep(0.01)
        running = conn.busy and not conn.closed.is_set()
        Gate.release.set()
        await asyncio.wait_for(conn.closed.wait(), 5)
        return running, conn.busy, transport.written

    running, busy, written = asyncio.run(main())
    assert running and not busy
    assert written == []  # the replies have nobody to go to


def test_shutdown_stops_what_a_lost_connection_left(services: Services) -> None:
    async def main() -> tuple[bool, list[bytes]]:
        Gate.release = asyncio.Event()
        conn, transport = open_connection(services)
        feed(conn, "waitForRelease", "inTask")
        await asyncio.sleep(0.01)
        conn.connection_lost(None)
        conn.close()
        await asyncio.wait_for(conn.closed.wait(), 5)
        return conn.busy, transport.written

    assert asyncio.run(main()) == (False, [])


def test_requests_fed_from_inside_a_task_run_in_the_connection_s_task(services: Services) -> None:
    async def main() -> list[dict[str, Any]]:
        conn, transport = open_connection(services)
        conn.data_received(request("inTask") + request("timesOut"))
        await answered(transport, 2)
        return replies(transport)

    assert asyncio.run(main()) == [{"task": True, "ok": 1.0}, {"timedOut": True, "ok": 1.0}]
