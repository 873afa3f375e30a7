"""What a command naming a view is refused, MongoDB's codes and words, checked by the dispatcher
before the command's arguments are extracted. Reading and defining views is server/views.py's,
which imports the aggregation pipeline: this module does not, so that every request can be
guarded without it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ebbdb.server.errors import CommandError, ErrorCode, write_error
from ebbdb.storage.core.collation import normalise
from ebbdb.storage.execution import views

if TYPE_CHECKING:
    from ebbdb.storage.engine.store import Engine

#: Write commands: their statements' field and the counts of their reply.
_WRITES: dict[str, tuple[str, tuple[str, ...]]] = {
    "insert": ("documents", ("n",)),
    "update": ("updates", ("n", "nModified")),
    "delete": ("deletes", ("n",)),
}
#: Commands that need a collection and answer a view with "is a view, not a collection".
_COLLECTION_ONLY = frozenset(
    {"findAndModify", "createIndexes", "listIndexes", "dropIndexes", "collStats"}
)
#: Reads that run on a view as an aggregation (a collation other than the view's is refused).
_READS = frozenset({"find", "aggregate", "count", "distinct"})
#: find options an aggregation cannot express, in the order MongoDB checks them (its
#: query_request_helper::asAggregationCommand): InvalidPipelineOperator.
_FIND_REFUSED = ("min", "max", "returnKey", "showRecordId")
_FIND_REFUSED_FLAGS = ("noCursorTimeout", "allowPartialResults")
_GUARDED = _READS | _COLLECTION_ONLY | set(_WRITES) | {"validate", "renameCollection"}


def not_a_collection(ns: str) -> CommandError:
    return CommandError(
        ErrorCode.CommandNotSupportedOnView, f"Namespace {ns} is a view, not a collection"
    )


def guard(engine: Engine, command: str, db: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
    """Run before a command's arguments are extracted: raise MongoDB's error for a command a
    view refuses (CommandNotSupportedOnView; for find, InvalidPipelineOperator for an option an
    aggregation cannot express, and OptionNotSupportedOnView for another collation), or return
    the reply of a write command on a view (one write error per statement, the first alone when
    ordered). None: nothing to say, run the command."""
    if command not in _GUARDED:
        return None
    target = next(iter(body.values()), None)
    if command == "renameCollection":
        _guard_rename(engine, target, body.get("to"))
        return None
    if type(target) is not str:  # the extractor says what is wrong (Code is a str subclass)
        return None
    view = views.lookup(engine, db, target)
    if view is None:
        return None
    if command in _WRITES:
        return _refused_writes(command, view.ns, body)
    if command in _COLLECTION_ONLY:
        raise not_a_collection(view.ns)
    if command == "validate":
        raise CommandError(ErrorCode.CommandNotSupportedOnView, "Cannot validate a view")
    if command == "find":
        _guard_find(body)
    _guard_collation(view, body.get("collation"))
    return None


def _refused_writes(command: str, ns: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
    field, counts = _WRITES[command]
    statements = body.get(field)
    if not isinstance(statements, list) or not statements:
        return None  # the extractor says what is wrong with them
    ordered = body.get("ordered", True) is not False
    refused = not_a_collection(ns)
    reply: dict[str, Any] = dict.fromkeys(counts, 0)
    reply["writeErrors"] = [
        write_error(i, refused) for i in range(1 if ordered else len(statements))
    ]
    reply["ok"] = 1.0
    return reply


def _guard_find(body: Mapping[str, Any]) -> None:
    def refused(message: str) -> CommandError:
        return CommandError(ErrorCode.InvalidPipelineOperator, message)

    for name in _FIND_REFUSED[:2]:
        value = body.get(name)
        if isinstance(value, Mapping) and value:
            raise refused(f"Option {name} not supported in aggregation.")
    for name in _FIND_REFUSED[2:]:
        if body.get(name) is True:
            raise refused(f"Option {name} not supported in aggregation.")
    if body.get("tailable") is True:
        raise refused("Tailable cursors are not supported in aggregation.")
    for name in _FIND_REFUSED_FLAGS:
        if body.get(name) is True:
            raise refused(f"Option {name} not supported in aggregation.")
    sort = body.get("sort")
    if isinstance(sort, Mapping) and "$natural" in sort:
        raise refused("Sort option $natural not supported in aggregation.")
    # An aggregation has no singleBatch, but find_one's (limit 1) is let through.
    if body.get("singleBatch") is True and body.get("limit") != 1:
        raise refused("Option singleBatch not supported in aggregation.")


def _guard_collation(view: views.View, collation: Any) -> None:
    """A read on a view uses the view's collation; naming another is refused."""
    if not isinstance(collation, Mapping):
        return  # none given, or the extractor's to refuse
    same = (normalise(collation) if collation else None) == view.collation
    if not same:
        raise CommandError(
            ErrorCode.OptionNotSupportedOnView, "Cannot override a view's default collation"
        )


def _guard_rename(engine: Engine, source: Any, to: Any) -> None:
    for ns, is_source in ((source, True), (to, False)):
        if not isinstance(ns, str) or "." not in ns:
            continue
        db, _, name = ns.partition(".")
        if views.lookup(engine, db, name) is None:
            continue
        if is_source:
            raise CommandError(ErrorCode.CommandNotSupportedOnView, f"cannot rename view: {ns}")
        raise CommandError(ErrorCode.NamespaceExists, f"a view already exists with that name: {ns}")
