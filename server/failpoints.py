"""Fail points for tests, as mongod has them (with enableTestCommands=1): `failCommand` makes the
commands it names fail with a chosen code, close the client's connection, wait before running, or
answer with a write concern error, for every client or for one application (`appName`), always,
n times, after n skips, or at random. Applications test their retry and error handling with it.

The state is one FailCommand per server; the dispatcher asks it about each command before the
command runs (one attribute read while it is off)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ebbdb.server.errors import CodedError, CommandError, ErrorCode

#: mongod's message for a command failed by the fail point.
FAILED_MESSAGE = "Failing command via 'failCommand' failpoint"
#: Commands the fail point never touches: without them a test could not turn it off again.
_NEVER = frozenset({"configureFailPoint", "waitForFailPoint"})


#: MongoDB's names for the codes tests most often ask a fail point for (retryable and network
#: errors, write concern and transaction errors), beyond those ErrorCode knows. A code MongoDB
#: has no name for is called Location<code>, as mongod calls it.
_CODE_NAMES = {
    6: "HostUnreachable",
    7: "HostNotFound",
    8: "UnknownError",
    11: "UserNotFound",
    18: "AuthenticationFailed",
    24: "LockTimeout",
    46: "LockBusy",
    50: "MaxTimeMSExpired",
    64: "WriteConcernFailed",
    79: "UnknownReplWriteConcern",
    89: "NetworkTimeout",
    91: "ShutdownInProgress",
    96: "OperationFailed",
    100: "UnsatisfiableWriteConcern",
    112: "WriteConflict",
    117: "ConflictingOperationInProgress",
    133: "FailedToSatisfyReadPreference",
    134: "ReadConcernMajorityNotAvailableYet",
    150: "StaleEpoch",
    189: "PrimarySteppedDown",
    211: "KeyNotFound",
    216: "ElectionInProgress",
    234: "RetryChangeStream",
    251: "NoSuchTransaction",
    256: "TransactionCommitted",
    262: "ExceededTimeLimit",
    280: "ChangeStreamFatalError",
    286: "ChangeStreamHistoryLost",
    9001: "SocketException",
    10107: "NotWritablePrimary",
    11600: "InterruptedAtShutdown",
    11601: "Interrupted",
    11602: "InterruptedDueToReplStateChange",
    13388: "StaleConfig",
    13435: "NotPrimaryNoSecondaryOk",
    13436: "NotPrimaryOrSecondary",
    14031: "OutOfDiskSpace",
    **{int(code): code.name for code in ErrorCode if not code.name.startswith("Location")},
}


def code_name(code: int) -> str:
    """MongoDB's codeName for `code`."""
    return _CODE_NAMES.get(code, f"Location{code}")


class CloseConnection(Exception):
    """The fail point asks for the client's connection to be closed without a reply."""


@dataclass(frozen=True)
class Action:
    """What the fail point does to one command: wait `block_ms`, then close the connection,
    fail with `error_code`, or run and attach `write_concern_error`."""

    block_ms: int = 0
    close_connection: bool = False
    error_code: int | None = None
    write_concern_error: Mapping[str, Any] | None = None
    error_labels: Sequence[str] | None = None

    def error(self) -> CodedError:
        assert self.error_code is not None
        exc = CodedError(self.error_code, code_name(self.error_code), FAILED_MESSAGE)
        if self.error_labels is not None:
            exc.extra["errorLabels"] = list(self.error_labels)
        return exc

    def finish(self, reply: dict[str, Any]) -> dict[str, Any]:
        """Attach the write concern error (and the labels) to a command's successful reply."""
        if self.write_concern_error is not None and reply.get("ok"):
            reply["writeConcernError"] = dict(self.write_concern_error)
            if self.error_labels is not None:
                reply["errorLabels"] = list(self.error_labels)
        return reply


@dataclass
class FailCommand:
    """The failCommand fail point: its mode and data, and how often it has fired."""

    mode: str = "off"  # off, alwaysOn, times, skip, activationProbability
    remaining: int = 0  # times: fires left; skip: matching commands still to let through
    probability: float = 0.0
    commands: frozenset[str] = frozenset()
    app_name: str | None = None
    action: Action = field(default_factory=Action)
    #: Times the fail point fired since the server started (configureFailPoint's `count`).
    entered: int = 0

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def configure(self, mode: Any, data: Mapping[str, Any] | None) -> int:
        """Set the mode and data of a configureFailPoint command; returns the times the fail
        point fired before. CommandError for a mode or data mongod would refuse."""
        new = _parse_mode(mode)
        if new[0] != "off":
            self._set_data(data or {})
        self.mode, self.remaining, self.probability = new
        return self.entered

    def _set_data(self, data: Mapping[str, Any]) -> None:
        names = data.get("failCommands")
        if not isinstance(names, (list, tuple)) or not all(type(n) is str for n in names):
            raise CommandError(
                ErrorCode.BadValue,
                "failCommand fail point requires 'failCommands', an array of command names",
            )
        code = data.get("errorCode")
        if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
            raise CommandError(ErrorCode.TypeMismatch, "'errorCode' must be an integer")
        block = bool(data.get("blockConnection", False))
        block_ms = data.get("blockTimeMS", 0) if block else 0
        if block and (isinstance(block_ms, bool) or not isinstance(block_ms, int) or block_ms < 0):
            raise CommandError(
                ErrorCode.BadValue,
                "'blockTimeMS' must be a non-negative integer with blockConnection",
            )
        wce = data.get("writeConcernError")
        if wce is not None and not isinstance(wce, Mapping):
            raise CommandError(ErrorCode.TypeMismatch, "'writeConcernError' must be a document")
        labels = data.get("errorLabels")
        if labels is not None and (
            not isinstance(labels, (list, tuple)) or not all(type(x) is str for x in labels)
        ):
            raise CommandError(ErrorCode.TypeMismatch, "'errorLabels' must be an array of strings")
        app = data.get("appName")
        if app is not None and type(app) is not str:
            raise CommandError(ErrorCode.TypeMismatch, "'appName' must be a string")
        self.commands = frozenset(names)
        self.app_name = app
        self.action = Action(
            block_ms=block_ms,
            close_connection=bool(data.get("closeConnection", False)),
            error_code=code,
            write_concern_error=wce,
            error_labels=labels,
        )

    def check(self, command: str, app_name: str | None) -> Action | None:
        """What to do to `command` from an application named `app_name`: None to run it as
        usual. Counts the firing (a command the fail point does not match costs it nothing)."""
        if command not in self.commands or command in _NEVER:
            return None
        if self.app_name is not None and app_name != self.app_name:
            return None
        mode = self.mode
        if mode == "times":
            self.remaining -= 1
            if self.remaining <= 0:
                self.mode = "off"
        elif mode == "skip":
            if self.remaining > 0:
                self.remaining -= 1
                return None
        elif mode == "activationProbability":
            if random.random() >= self.probability:
                return None
        elif mode == "off":
            return None
        self.entered += 1
        return self.action

    def describe(self) -> dict[str, Any]:
        """The mode as configureFailPoint takes it, for the reply and the log."""
        if self.mode in ("off", "alwaysOn"):
            return {"mode": self.mode}
        if self.mode == "activationProbability":
            return {"mode": {"activationProbability": self.probability}}
        return {"mode": {self.mode: self.remaining}}


def _parse_mode(mode: Any) -> tuple[str, int, float]:
    """(mode, count, probability) from configureFailPoint's `mode`."""
    if mode in ("off", "alwaysOn"):
        return mode, 0, 0.0
    if isinstance(mode, Mapping) and len(mode) == 1:
        ((key, value),) = mode.items()
        if key in ("times", "skip"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise CommandError(ErrorCode.TypeMismatch, f"'{key}' must be a number")
            if not 0 <= value <= 2**31 - 1:
                raise CommandError(
                    ErrorCode.BadValue, f"'{key}' must be a 32-bit non-negative integer"
                )
            if key == "times" and value == 0:
                return "off", 0, 0.0
            return key, value, 0.0
        if key == "activationProbability":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise CommandError(
                    ErrorCode.TypeMismatch, "'activationProbability' must be a number"
                )
            if not 0.0 <= value <= 1.0:
                raise CommandError(
                    ErrorCode.BadValue, "activationProbability must be between 0.0 and 1.0"
                )
            return key, 0, float(value)
    raise CommandError(
        ErrorCode.BadValue,
        "mode must be 'alwaysOn', 'off', or a document with 'times', 'skip' or "
        "'activationProbability'",
    )


class SpinIgnoringInterrupts:
    """`ebbdbSpinIgnoringInterrupts`, ebbdb's own test fail point (configureFailPoint, with
    enableTestCommands=1): while on (mode alwaysOn; off turns it off), each command it names
    (data `failCommands`, on the general path of the dispatcher: not those the express path
    answers) spins on a reader thread, or with data `onEventLoop: true` on the event loop
    itself, never checking its operation's kill flag or deadline: a loop that forgets mongod's
    checkForInterrupt. It shows that a shutdown ends the process anyway (server/shutdown.py).
    One per process, as the index builds' hangIndexBuildBeforeCommit."""

    NAME = "ebbdbSpinIgnoringInterrupts"
    on = False
    on_event_loop = False
    commands: frozenset[str] = frozenset()
    entered = 0

    @classmethod
    def configure(cls, mode: Any, data: Mapping[str, Any] | None) -> dict[str, Any]:
        """Mode alwaysOn or off; replies with the times it made a command spin."""
        if mode not in ("alwaysOn", "off"):
            raise CommandError(ErrorCode.BadValue, f"{cls.NAME} takes mode alwaysOn or off")
        if mode == "alwaysOn":
            data = data or {}
            names = data.get("failCommands")
            if not isinstance(names, (list, tuple)) or not all(type(n) is str for n in names):
                raise CommandError(
                    ErrorCode.BadValue,
                    f"{cls.NAME} requires 'failCommands', an array of command names",
                )
            cls.commands = frozenset(names) - _NEVER
            cls.on_event_loop = bool(data.get("onEventLoop", False))
        cls.on = mode == "alwaysOn"
        return {"count": cls.entered, "ok": 1.0}

    @classmethod
    async def run(
        cls, command: str, on_reader: Callable[[Callable[[], None]], Awaitable[None]]
    ) -> None:
        """Spin if `command` is one of the fail point's (`on_reader` runs a function on a
        reader thread: the gateway's read)."""
        if command not in cls.commands:
            return
        cls.entered += 1
        if cls.on_event_loop:
            cls._spin()
        else:
            await on_reader(cls._spin)

    @classmethod
    def _spin(cls) -> None:
        while cls.on:
            pass
