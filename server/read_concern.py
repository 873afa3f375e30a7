"""Read concerns on a one-member replica set, as MongoDB 7.0 parses and honours them (a standalone
server takes `readConcern` and ignores it, as it always has).

- `local` and `available`: the data as committed.
- `majority`, `linearizable` and `snapshot`: the majority commit point of a one-member set whose
  writes are majority-committed once journaled (writeConcernMajorityJournalDefault). The read waits
  until every commit it could see is synced, so it never shows a write a crash could take back.
- `afterClusterTime`: a lone primary has reached every cluster time it has given out; a later one
  is refused as mongod refuses a time past its cluster time.
- `snapshot` outside a transaction: find, aggregate and distinct only; `atClusterTime` is the
  present (ebbdb keeps no history: an older time is 239 SnapshotTooOld once something was
  written after it).
- `linearizable`: read commands only (find, aggregate, count, distinct).

Inside a transaction (a command with `autocommit`) the transaction's own rules apply
(server/transactions.py): nothing here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson.timestamp import Timestamp

from ebbdb.server.arguments import Kind, type_mismatch
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.storage.core.values import render, type_name

LEVELS = ("local", "majority", "linearizable", "available", "snapshot")
#: The fields of a readConcern document (the internal ones mongod's own nodes send included).
_FIELDS = frozenset(
    {
        "level",
        "afterClusterTime",
        "atClusterTime",
        "afterOpTime",
        "provenance",
        "allowTransactionTableSnapshot",
        "$_waitLastStableRecoveryTimestamp",
    }
)
#: The commands that take readConcern snapshot outside a transaction (MongoDB 5.0 and later).
SNAPSHOT_COMMANDS = frozenset({"find", "aggregate", "distinct"})
#: The commands that take readConcern linearizable.
LINEARIZABLE_COMMANDS = frozenset({"find", "aggregate", "count", "distinct"})
#: Levels whose reads see only majority-committed (for one member: journaled) writes.
_DURABLE_LEVELS = frozenset({"majority", "linearizable", "snapshot"})


@dataclass(frozen=True)
class ReadConcern:
    level: str = "local"
    after_cluster_time: Timestamp | None = None
    at_cluster_time: Timestamp | None = None

    @property
    def wants_durable(self) -> bool:
        """Whether the read must wait for a sync of everything committed so far."""
        return self.level in _DURABLE_LEVELS


LOCAL = ReadConcern()


def parse(command: str, value: Any) -> ReadConcern:
    """The read concern of a command on a replica set. Raises CommandError as mongod does for a
    malformed one (14, 40415, 2, 72), or one the command does not take (72)."""
    if value is None:
        return LOCAL
    if not isinstance(value, Mapping):
        raise type_mismatch(f"{command}.readConcern", value, Kind.DOC)
    for key in value:
        if key not in _FIELDS:
            raise CommandError(
                ErrorCode.Location40415, f"BSON field 'readConcern.{key}' is an unknown field."
            )
    level = value.get("level", "local")
    if not isinstance(level, str):
        raise type_mismatch("readConcern.level", level, Kind.STRING)
    if level not in LEVELS:
        raise CommandError(
            ErrorCode.BadValue,
            f"Enumeration value '{level}' for field 'readConcern.level' is not a valid value.",
        )
    after = _timestamp(value, "afterClusterTime")
    at = _timestamp(value, "atClusterTime")
    if after is not None and at is not None:
        raise CommandError(
            ErrorCode.InvalidOptions,
            "Can not specify both afterClusterTime and atClusterTime",
        )
    if after is not None and level not in ("local", "majority", "snapshot"):
        raise CommandError(
            ErrorCode.InvalidOptions,
            "afterClusterTime field can be set only if level is equal to local, majority or "
            "snapshot",
        )
    if at is not None and level != "snapshot":
        raise CommandError(
            ErrorCode.InvalidOptions, "atClusterTime field can be set only if level is snapshot"
        )
    if "afterOpTime" in value and level == "linearizable":
        raise CommandError(
            ErrorCode.FailedToParse, "afterOpTime not compatible with linearizable read concern"
        )
    concern = ReadConcern(level, after, at)
    allowed = {"snapshot": SNAPSHOT_COMMANDS, "linearizable": LINEARIZABLE_COMMANDS}.get(level)
    if allowed is not None and command not in allowed:
        raise CommandError(
            ErrorCode.InvalidOptions,
            f"Command {command} does not support {{ readConcern: {render(dict(value))} }} :: "
            "caused by :: read concern not supported",
        )
    return concern


def _timestamp(value: Mapping[str, Any], name: str) -> Timestamp | None:
    ts = value.get(name)
    if ts is None and name not in value:
        return None
    if not isinstance(ts, Timestamp):
        raise CommandError(
            ErrorCode.TypeMismatch,
            f"BSON field 'readConcern.{name}' is the wrong type '{type_name(ts)}', expected type "
            "'timestamp'",
        )
    if ts.time == 0:
        raise CommandError(
            ErrorCode.InvalidOptions, f"readConcern {name} value must not be a null timestamp"
        )
    return ts


def check_time(concern: ReadConcern, cluster_time: Timestamp) -> None:
    """Refuse a read after or at a cluster time this member has not reached (72, mongod's
    words), or at a time older than the newest write (the cluster time), whose data ebbdb no
    longer has (239)."""
    for name, target in (
        ("afterClusterTime", concern.after_cluster_time),
        ("atClusterTime", concern.at_cluster_time),
    ):
        if target is not None and target > cluster_time:
            raise CommandError(
                ErrorCode.InvalidOptions,
                f"readConcern {name} value must not be greater than the current clusterTime. "
                f"Requested clusterTime: {_ts_text(target)}; current clusterTime: "
                f"{_ts_text(cluster_time)}",
            )
    at = concern.at_cluster_time
    if at is not None and at < cluster_time:
        raise CommandError(
            ErrorCode.SnapshotTooOld,
            f"Read timestamp {_ts_text(at)} is older than the oldest available timestamp.",
        )


def _ts_text(ts: Timestamp) -> str:
    """A Timestamp as mongod's LogicalTime::toString writes it."""
    return f"{{ ts: Timestamp({ts.time}, {ts.inc}) }}"
