"""Server parameters (getParameter/setParameter/--setParameter): typed, validated, in one table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson import Int64

from server.errors import CommandError, ErrorCode
from server.version import FEATURE_COMPATIBILITY_VERSION


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean, got {text!r}")


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise CommandError(ErrorCode.BadValue, f"expected an integer, got {value!r}")
    if value <= 0:
        raise CommandError(ErrorCode.BadValue, f"must be greater than 0, got {value}")
    return int(value)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    raise CommandError(ErrorCode.BadValue, f"expected a boolean, got {value!r}")


def _journal_interval(value: Any) -> int:
    """journalCommitInterval: whole milliseconds in mongod's range, 1 to 500."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise CommandError(ErrorCode.BadValue, f"expected an integer, got {value!r}")
    if not 1 <= value <= 500:
        raise CommandError(
            ErrorCode.BadValue,
            f"journalCommitInterval must be between 1 and 500, but attempted to set to: {value}",
        )
    return int(value)


def _syncdelay(value: Any) -> float:
    """syncdelay: seconds between data-file flushes, 0 to mongod's maximum of 9,999,999."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandError(ErrorCode.BadValue, f"expected a number, got {value!r}")
    if not 0 <= value <= 9_999_999:
        raise CommandError(
            ErrorCode.BadValue,
            f"syncdelay must be between 0 and 9999999, but attempted to set to: {value}",
        )
    return float(value)


@dataclass(frozen=True)
class ParamDef:
    name: str
    default: Any
    from_text: Callable[[str], Any]  # for --setParameter name=value
    validate: Callable[[Any], Any]  # for setParameter; raises CommandError
    runtime: bool = True  # settable with the setParameter command
    startup: bool = True  # settable with --setParameter


PARAMS: dict[str, ParamDef] = {
    p.name: p
    for p in (
        ParamDef("ttlMonitorSleepSecs", 60, int, _positive_int),
        ParamDef("ttlMonitorEnabled", True, _parse_bool, _bool),
        ParamDef("enableTestCommands", False, _parse_bool, _bool, runtime=False),
        # How often commits are made durable (ms); j/fsync/majority writes do not wait for it.
        ParamDef("journalCommitInterval", 100, int, _journal_interval),
        # mongod's data-file flush interval (s): a sync at least this often; 0 leaves it to
        # journalCommitInterval alone, which is always shorter here.
        ParamDef("syncdelay", 60.0, float, _syncdelay),
        ParamDef(
            "cursorTimeoutMillis",
            Int64(600_000),
            lambda t: Int64(int(t)),
            lambda v: Int64(_positive_int(v)),
        ),
    )
}


class Parameters:
    """Current values; `featureCompatibilityVersion` is read-only and always MongoDB 7.0's."""

    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        self._values = {name: p.default for name, p in PARAMS.items()}
        self._values.update(overrides or {})
        self._listeners: dict[str, list[Callable[[], None]]] = {}

    def on_change(self, name: str, callback: Callable[[], None]) -> None:
        """Call `callback` after every runtime change of `name`."""
        self._listeners.setdefault(name, []).append(callback)

    def get(self, name: str) -> Any:
        if name == "featureCompatibilityVersion":
            return {"version": FEATURE_COMPATIBILITY_VERSION}
        return self._values[name]

    def names(self) -> list[str]:
        return ["featureCompatibilityVersion", *sorted(self._values)]

    def known(self, name: str) -> bool:
        return name == "featureCompatibilityVersion" or name in self._values

    def set(self, name: str, value: Any) -> Any:
        """Validate and set at runtime; returns the old value. Raises CommandError."""
        p = PARAMS.get(name)
        if p is None:
            raise CommandError(ErrorCode.InvalidOptions, f"Unrecognized parameter: {name}")
        if not p.runtime:
            raise CommandError(
                ErrorCode.IllegalOperation, f"not allowed to change [{name}] at runtime"
            )
        old = self._values[name]
        self._values[name] = p.validate(value)
        for callback in self._listeners.get(name, ()):
            callback()
        return old


def parse_startup(pairs: list[str]) -> dict[str, Any]:
    """`--setParameter name=value` pairs to typed values. Raises ValueError with a clear message."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep:
            raise ValueError(f"--setParameter expects name=value, got {pair!r}")
        p = PARAMS.get(name)
        if p is None or not p.startup:
            raise ValueError(f"Unknown --setParameter '{name}'")
        try:
            value = p.from_text(text)
            out[name] = p.validate(value)
        except CommandError as exc:
            raise ValueError(f"Bad value for parameter '{name}': {exc.message}") from None
        except ValueError as exc:
            raise ValueError(f"Bad value for parameter '{name}': {exc}") from None
    return out
