"""Server parameters (getParameter/setParameter/--setParameter): typed, validated, in one table."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.version import FEATURE_COMPATIBILITY_VERSION
from ebbdb.storage.core import portability
from ebbdb.storage.core.limits import DEFAULT_MEMORY_BYTES, DENSIFY_DOCS, LOOKUP_BYTES
from ebbdb.storage.core.values import INT32_MAX, INT32_MIN


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


def _positive_long(name: str, default: Int64) -> ParameterDef:
    """A byte limit that mongod keeps as a long (getParameter gives an Int64): above 0."""
    return ParameterDef(name, default, lambda t: Int64(int(t)), lambda v: Int64(_positive_int(v)))


def _bytes_or_none(value: Any) -> Int64:
    """A number of bytes, 0 for none: a whole number, not negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise CommandError(ErrorCode.BadValue, f"expected an integer, got {value!r}")
    if value < 0:
        raise CommandError(ErrorCode.BadValue, f"must be at least 0, got {value}")
    return Int64(int(value))


#: The least default cap on what operations hold together, whatever the machine.
MIN_TRACKED_MEMORY = 256 * 1024 * 1024


def default_tracked_memory(physical: int | None) -> int:
    """ebbdbMaxTrackedMemoryBytes's default: half the machine's memory, at least 256 MB (1 GB
    where the machine's memory cannot be read)."""
    if physical is None:
        return 4 * MIN_TRACKED_MEMORY
    return max(physical // 2, MIN_TRACKED_MEMORY)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    raise CommandError(ErrorCode.BadValue, f"expected a boolean, got {value!r}")


def _in_range(name: str, low: float, high: float, whole: bool) -> Callable[[Any], Any]:
    """A validator for a number (a whole one, if `whole`) from `low` to `high`, refusing others
    with mongod's message."""

    def validate(value: Any) -> Any:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (whole and int(value) != value)
        ):
            expected = "an integer" if whole else "a number"
            raise CommandError(ErrorCode.BadValue, f"expected {expected}, got {value!r}")
        if not low <= value <= high:
            raise CommandError(
                ErrorCode.BadValue,
                f"{name} must be between {low} and {high}, but attempted to set to: {value}",
            )
        return int(value) if whole else float(value)

    return validate


def _int_greater_than_zero(name: str) -> Callable[[Any], int]:
    """The validator of a parameter mongod stores as an `int` with `validator: {gt: 0}`, with
    mongod's BadValue messages: the value coerced to a 32-bit integer first ("Failed validating
    <name>: Out of bounds coercing to integral value", or "Unable to coerce ..."), then the bound
    ("Invalid value for parameter <name>: <value> is not greater than 0"). Unlike mongod, which
    truncates 1.5 to 1 and reads true as 1, a fraction or a boolean is refused, as ebbdb's other
    integer parameters refuse them."""

    def validate(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CommandError(
                ErrorCode.BadValue,
                f"Failed validating {name}: Unable to coerce value to integral type",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise CommandError(
                ErrorCode.BadValue,
                f"Failed validating {name}: Unable to coerce NaN/Inf to integral type",
            )
        if not INT32_MIN <= value <= INT32_MAX:
            raise CommandError(
                ErrorCode.BadValue,
                f"Failed validating {name}: Out of bounds coercing to integral value",
            )
        if int(value) != value:
            raise CommandError(ErrorCode.BadValue, f"expected an integer, got {value!r}")
        if value <= 0:
            raise CommandError(
                ErrorCode.BadValue,
                f"Invalid value for parameter {name}: {int(value)} is not greater than 0",
            )
        return int(value)

    return validate


@dataclass(frozen=True)
class ParameterDef:
    name: str
    default: Any
    from_text: Callable[[str], Any]  # for --setParameter name=value
    validate: Callable[[Any], Any]  # for setParameter; raises CommandError
    runtime: bool = True  # settable with the setParameter command
    startup: bool = True  # settable with --setParameter


PARAMETERS: dict[str, ParameterDef] = {
    p.name: p
    for p in (
        ParameterDef("ttlMonitorSleepSecs", 60, int, _positive_int),
        ParameterDef("ttlMonitorEnabled", True, _parse_bool, _bool),
        ParameterDef("enableTestCommands", False, _parse_bool, _bool, runtime=False),
        # How often commits are made durable (ms); j/fsync/majority writes do not wait for it.
        ParameterDef(
            "journalCommitInterval", 100, int, _in_range("journalCommitInterval", 1, 500, True)
        ),
        # mongod's data-file flush interval (s, up to mongod's 9,999,999): a sync at least this
        # often; 0 leaves it to journalCommitInterval alone, which is always shorter here.
        ParameterDef("syncdelay", 60.0, float, _in_range("syncdelay", 0, 9_999_999, False)),
        # ebbdb's own: a message must arrive whole within this many seconds of its first byte.
        ParameterDef(
            "incomingMessageTimeoutSecs",
            60.0,
            float,
            _in_range("incomingMessageTimeoutSecs", 0.1, 86_400, False),
        ),
        # Memory limits (storage/core/limits.py, storage/execution/spill.py): a blocking sort and a $group past
        # theirs spill to disk when the operation allows it, else fail with 292.
        ParameterDef(
            "internalQueryMaxBlockingSortMemoryUsageBytes", 104_857_600, int, _positive_int
        ),
        _positive_long("internalDocumentSourceGroupMaxMemoryBytes", Int64(104_857_600)),
        _positive_long("internalLookupStageIntermediateDocumentMaxSizeBytes", Int64(LOOKUP_BYTES)),
        _positive_long("internalDocumentSourceSetWindowFieldsMaxMemoryBytes", Int64(104_857_600)),
        # $densify (storage/aggregate/gaps.py): the documents one may generate (5897900 past
        # them) and what its partitions' state may hold (6007200 past it). Both are `int`s in
        # mongod (query_knobs.idl), getParameter gives a 32-bit integer.
        ParameterDef(
            "internalQueryMaxAllowedDensifyDocs",
            DENSIFY_DOCS,
            int,
            _int_greater_than_zero("internalQueryMaxAllowedDensifyDocs"),
        ),
        ParameterDef(
            "internalDocumentSourceDensifyMaxMemoryBytes",
            DEFAULT_MEMORY_BYTES,
            int,
            _int_greater_than_zero("internalDocumentSourceDensifyMaxMemoryBytes"),
        ),
        ParameterDef("allowDiskUseByDefault", True, _parse_bool, _bool),
        # ebbdb's own: what all operations' stages may hold together (storage/core/memory.py's
        # Pool; 0: no cap). Past it, the operation asking for more gets 146.
        ParameterDef(
            "ebbdbMaxTrackedMemoryBytes",
            Int64(default_tracked_memory(portability.physical_memory())),
            lambda t: Int64(int(t)),
            _bytes_or_none,
        ),
        # Logical sessions (server/session_cache.py): how long an idle session lives, and how
        # often the session cache writes config.system.sessions (both startup only, as mongod's).
        ParameterDef("localLogicalSessionTimeoutMinutes", 30, int, _positive_int, runtime=False),
        ParameterDef("logicalSessionRefreshMillis", 300_000, int, _positive_int, runtime=False),
        # A multi-document transaction open longer than this is aborted (replica-set mode).
        ParameterDef("transactionLifetimeLimitSeconds", 60, int, _positive_int),
        # ebbdb's own: one-document commands (an insert of one document; find, update, delete
        # and findAndModify by `_id` alone; getMore) take the express path (server/express.py).
        # Off, every request takes the general path, which stays the definition: the
        # differential test compares the two byte for byte.
        ParameterDef("ebbdbExpressPath", True, _parse_bool, _bool),
        ParameterDef(
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
        self._values = {name: p.default for name, p in PARAMETERS.items()}
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
        p = PARAMETERS.get(name)
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
        p = PARAMETERS.get(name)
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
