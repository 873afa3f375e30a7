"""The failCommand fail point (enableTestCommands=1), as applications use it to test their retry and
error handling: through pymongo, with exact codes, labels and modes, and pymongo's own retry of a
read whose connection the fail point closed. At the end, the refusals of server-side JavaScript
(the other way a test suite written for mongod may fail here), each naming its alternative."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, NotPrimaryError, OperationFailure, WriteConcernError

from ebbdb.server.embedded import ServerThread
from tests.helpers import Recorder
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    server = ServerThread(
        str(tmp_path_factory.mktemp("failpoints")), {"enableTestCommands": True}
    ).start()
    yield server
    server.stop()


@pytest.fixture
def client(srv: ServerThread) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient(srv.uri, serverSelectionTimeoutMS=5000) as c:
        c.fp.items.drop()
        c.fp.items.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
        yield c
        c.admin.command("configureFailPoint", "failCommand", mode="off")


def _set(client: MongoClient[dict[str, Any]], mode: Any, **data: Any) -> dict[str, Any]:
    return client.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)


def test_error_code_fails_only_the_named_commands(client: MongoClient[dict[str, Any]]) -> None:
    assert _set(client, "alwaysOn", failCommands=["find"], errorCode=2) == {"count": 0, "ok": 1.0}
    with pytest.raises(OperationFailure) as err:
        client.fp.items.find_one()
    assert err.value.details == {
        "ok": 0.0,
        "errmsg": "Failing command via 'failCommand' failpoint",
        "code": 2,
        "codeName": "BadValue",
    }
    assert client.fp.items.count_documents({}) == 2  # aggregate: not named
    with pytest.raises(OperationFailure):
        client.fp.items.find_one()
    reply = client.admin.command("configureFailPoint", "failCommand", mode="off")
    assert reply == {"count": 2, "ok": 1.0}  # it fired twice
    assert client.fp.items.find_one({"_id": 1}) == {"_id": 1, "x": 1}


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (91, "ShutdownInProgress"),
        (10107, "NotWritablePrimary"),
        (11600, "InterruptedAtShutdown"),
        (50, "MaxTimeMSExpired"),
        (11000, "DuplicateKey"),
        (4242421, "Location4242421"),
    ],
)
def test_code_names_are_mongodbs(client: MongoClient[dict[str, Any]], code: int, name: str) -> None:
    _set(client, {"times": 1}, failCommands=["insert"], errorCode=code, errorLabels=["Label1"])
    # pymongo raises NotPrimaryError for the codes that mean "not primary" or "shutting down".
    with pytest.raises((OperationFailure, NotPrimaryError)) as err:
        client.fp.items.insert_one({"_id": 3})
    details = err.value.details
    assert details is not None
    assert (details["code"], details["codeName"]) == (code, name)
    assert details["errorLabels"] == ["Label1"]
    assert err.value.has_error_label("Label1")
    client.fp.items.insert_one({"_id": 3})  # times: 1 is spent
    assert client.fp.items.count_documents({}) == 3


def _four_counts(client: MongoClient[dict[str, Any]]) -> list[int | None]:
    """Four counts in a row: each one's `n`, or the code it failed with."""
    results: list[int | None] = []
    for _ in range(4):
        try:
            results.append(client.fp.command("count", "items")["n"])
        except OperationFailure as exc:
            results.append(exc.code)
    return results


def test_times_and_skip(client: MongoClient[dict[str, Any]]) -> None:
    _set(client, {"times": 2}, failCommands=["count"], errorCode=96)
    assert _four_counts(client) == [96, 96, 2, 2]
    _set(client, {"skip": 2}, failCommands=["count"], errorCode=96)
    assert _four_counts(client) == [2, 2, 96, 96]


def test_activation_probability(client: MongoClient[dict[str, Any]]) -> None:
    _set(client, {"activationProbability": 0.0}, failCommands=["ping"], errorCode=8)
    for _ in range(20):
        assert client.admin.command("ping") == {"ok": 1.0}
    _set(client, {"activationProbability": 1}, failCommands=["ping"], errorCode=8)
    with pytest.raises(OperationFailure) as err:
        client.admin.command("ping")
    assert (err.value.code, err.value.details["codeName"]) == (8, "UnknownError")
    _set(client, {"activationProbability": 0.5}, failCommands=["ping"], errorCode=8)
    outcomes = set()
    for _ in range(200):
        try:
            client.admin.command("ping")
            outcomes.add("ok")
        except OperationFailure:
            outcomes.add("failed")
    assert outcomes == {"ok", "failed"}


def test_app_name_limits_it_to_one_application(
    srv: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    _set(client, "alwaysOn", failCommands=["find"], errorCode=2, appName="checkout")
    with MongoClient(srv.uri, appName="checkout", serverSelectionTimeoutMS=5000) as app:
        with pytest.raises(OperationFailure):
            app.fp.items.find_one()
    assert client.fp.items.find_one({"_id": 2}) == {"_id": 2, "x": 2}


def test_write_concern_error_runs_the_write_and_reports(
    client: MongoClient[dict[str, Any]],
) -> None:
    wce = {"code": 91, "codeName": "ShutdownInProgress", "errmsg": "Replication is being shut down"}
    _set(client, {"times": 1}, failCommands=["insert"], writeConcernError=wce, errorLabels=["X"])
    with pytest.raises(WriteConcernError) as err:
        client.fp.items.insert_one({"_id": 10})
    assert err.value.details == {**wce, "errorLabels": ["X"]}
    assert client.fp.items.find_one({"_id": 10}) == {"_id": 10}  # the write happened


def test_close_connection_and_pymongo_retries_the_read(
    srv: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    listener = Recorder()
    with MongoClient(srv.uri, event_listeners=[listener], serverSelectionTimeoutMS=5000) as app:
        app.admin.command("ping")
        _set(client, {"times": 1}, failCommands=["find"], closeConnection=True)
        # The first find's connection is closed; pymongo's retryable read sends it again.
        assert app.fp.items.find_one({"_id": 1}) == {"_id": 1, "x": 1}
        assert [c for c in listener.names() if c == "find"] == ["find", "find"]
        assert listener.failures == ["find"]
        # Without retries the application sees the network error.
    with MongoClient(srv.uri, retryReads=False, serverSelectionTimeoutMS=5000) as app:
        _set(client, {"times": 1}, failCommands=["find"], closeConnection=True)
        with pytest.raises(AutoReconnect):
            app.fp.items.find_one({"_id": 1})
        assert app.fp.items.find_one({"_id": 1}) == {"_id": 1, "x": 1}


#: How long the blocked commands wait: the other connection's commands, sent once the block has
#: begun, are a couple of round trips.
BLOCK_MS = 2000


def _fired(srv: ServerThread) -> int:
    """Times the fail point has fired since the server started (read on the server's loop)."""
    assert srv.app is not None
    return int(srv.call(lambda app: app.services.fail_command.entered, srv.app))


class _Blocked:
    """A command the fail point blocks, sent by `send(client)` on a client of its own on a thread.
    `start` returns once the fail point has fired for it (it is now blocked on the server);
    `answered` says whether its reply has come; `reply` waits for it (bounded) and returns what
    the command returned or raised."""

    def __init__(self, srv: ServerThread, send: Any) -> None:
        self._srv = srv
        self._send = send
        self._outcome: list[Any] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with MongoClient(self._srv.uri, serverSelectionTimeoutMS=5000) as own:
            try:
                self._outcome.append(self._send(own))
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                self._outcome.append(exc)

    def start(self) -> _Blocked:
        before = _fired(self._srv)
        self._thread.start()
        wait_until(lambda: _fired(self._srv) != before, "the fail point fired")
        return self

    @property
    def answered(self) -> bool:
        return bool(self._outcome)

    def reply(self) -> Any:
        self._thread.join(10)
        assert self.answered, "the blocked command never answered"
        return self._outcome[0]


def test_block_connection_delays_only_that_command(
    srv: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    """While one find waits out blockTimeMS, another connection's commands (a find among them:
    the fail point fired its one time) are answered, before the blocked find is."""
    with MongoClient(srv.uri, serverSelectionTimeoutMS=5000) as other:
        other.admin.command("ping")  # connected before the block
        _set(
            client, {"times": 1}, failCommands=["find"], blockConnection=True, blockTimeMS=BLOCK_MS
        )
        blocked = _Blocked(srv, lambda own: own.fp.items.find_one({"_id": 1})).start()
        answered: list[str] = []
        assert other.admin.command("ping")["ok"] == 1.0
        answered.append("ping")
        assert other.fp.items.find_one({"_id": 2}) == {"_id": 2, "x": 2}
        answered.append("find")
        answered.append("blocked" if blocked.answered else "still blocked")
        assert blocked.reply() == {"_id": 1, "x": 1}
        assert answered == ["ping", "find", "still blocked"]


def test_block_then_fail(srv: ServerThread, client: MongoClient[dict[str, Any]]) -> None:
    """The command waits blockTimeMS, then fails: another connection is answered meanwhile, and
    the error comes after."""
    with MongoClient(srv.uri, serverSelectionTimeoutMS=5000) as other:
        other.admin.command("ping")
        _set(
            client,
            {"times": 1},
            failCommands=["find"],
            blockConnection=True,
            blockTimeMS=BLOCK_MS,
            errorCode=96,
        )
        blocked = _Blocked(srv, lambda own: own.fp.items.find_one()).start()
        assert other.admin.command("ping")["ok"] == 1.0
        assert not blocked.answered, "the error came before the block was out"
        err = blocked.reply()
    assert isinstance(err, OperationFailure), err
    assert (err.code, err.details["codeName"]) == (96, "OperationFailed")


def test_a_retryable_error_code_is_retried_by_pymongo(client: MongoClient[dict[str, Any]]) -> None:
    """NetworkTimeout (89) is one of the codes pymongo retries a read on: the fail point fires
    once, the retry finds the document."""
    before = _set(client, {"times": 1}, failCommands=["find"], errorCode=89)["count"]
    assert client.fp.items.find_one({"_id": 2}) == {"_id": 2, "x": 2}
    assert _set(client, "off")["count"] == before + 1  # the count runs since the start


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"mode": "sometimes"}, 2),
        ({"mode": {"times": -1}, "data": {"failCommands": ["find"]}}, 2),
        ({"mode": {"times": "x"}, "data": {"failCommands": ["find"]}}, 14),
        ({"mode": {"activationProbability": 1.5}, "data": {"failCommands": ["find"]}}, 2),
        ({"mode": "alwaysOn", "data": {}}, 2),
        ({"mode": "alwaysOn", "data": {"failCommands": "find"}}, 2),
        ({"mode": "alwaysOn", "data": {"failCommands": ["find"], "errorCode": "2"}}, 14),
        ({"mode": "alwaysOn"}, 2),
    ],
)
def test_bad_configurations_are_refused(
    client: MongoClient[dict[str, Any]], body: dict[str, Any], code: int
) -> None:
    with pytest.raises(OperationFailure) as err:
        client.admin.command({"configureFailPoint": "failCommand", **body})
    assert err.value.code == code
    assert client.fp.items.find_one({"_id": 1}) == {"_id": 1, "x": 1}  # nothing was set


def test_other_fail_points_and_other_databases_are_refused(
    client: MongoClient[dict[str, Any]],
) -> None:
    with pytest.raises(OperationFailure) as err:
        client.admin.command("configureFailPoint", "maxTimeAlwaysTimeOut", mode="alwaysOn")
    assert err.value.code == 2
    assert "maxTimeAlwaysTimeOut not found" in str(err.value)
    with pytest.raises(OperationFailure) as err:
        client.fp.command("configureFailPoint", "failCommand", mode="off")
    assert err.value.code == 13


def test_configure_fail_point_needs_test_commands(
    start_server: Any,
) -> None:
    srv = start_server()
    with MongoClient(srv.uri, serverSelectionTimeoutMS=5000) as c:
        with pytest.raises(OperationFailure) as err:
            c.admin.command("configureFailPoint", "failCommand", mode="off")
        assert err.value.code == 59
