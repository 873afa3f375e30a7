"""Schema validation: a collection's `validator` (query operators and `$jsonSchema`), its
`validationLevel` and `validationAction`. Checked inside the write transaction, before a document
is stored: a failure is DocumentValidationFailure (121) with MongoDB 5+'s `errInfo`
({failingDocumentId, details}), or, under `warn`, a logged warning and the write goes on.

The validator itself is parsed by storage/query/validator.py, imported by the first collection
that has one: a write to a collection without a validator, and start-up, never import it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.errors import DocumentValidationFailure

if TYPE_CHECKING:
    from ebbdb.storage.query.validator import Validator

log = logging.getLogger("ebbdb.storage")

VALIDATION_LEVELS = ("off", "strict", "moderate")
VALIDATION_ACTIONS = ("error", "warn")


class _LogEvent(NamedTuple):
    """What the server's log formatter reads to write mongod's structured line (id, msg, attr)."""

    id: int
    msg: str
    attr: dict[str, Any]
    ctx: str | None = None


# -- the collection's rules ------------------------------------------------------------------------

#: Parsed validators by collection id, with the validator document they were parsed from (a
#: collMod stores a new one, so an entry is reused only for the same document object).
_CACHE: dict[int, tuple[Any, Validator]] = {}
_CACHE_MAX = 1024


def _validator(info: CollectionInfo) -> Validator | None:
    spec = info.options.get("validator")
    if not spec:
        return None
    cached = _CACHE.get(info.id)
    if cached is not None and cached[0] is spec:
        return cached[1]
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    from ebbdb.storage.query.validator import Validator

    validator = Validator(spec)
    _CACHE[info.id] = (spec, validator)
    return validator


def check(
    info: CollectionInfo,
    doc: dict[str, Any],
    old: dict[str, Any] | None = None,
    bypass: bool = False,
) -> None:
    """Check a document about to be stored in the collection (`old`: the version it replaces).
    Raises DocumentValidationFailure when the validator refuses it under `error`; under `warn`
    logs MongoDB's warning instead. `moderate` lets an update through when the document it
    replaces already failed; `off` and `bypass` check nothing."""
    if bypass:
        return
    validator = _validator(info)
    if validator is None:
        return
    level = info.options.get("validationLevel", "strict")
    if level == "off" or validator.matches(doc):
        return
    err_info = {"failingDocumentId": doc.get("_id"), "details": validator.details(doc)}
    if info.options.get("validationAction", "error") == "warn":
        attr = {"namespace": info.ns, "document": doc, "errInfo": err_info}
        event = _LogEvent(20294, "Document would fail validation", attr)
        log.warning("Document would fail validation: %s", info.ns, extra={"event": event})
        return
    if level == "moderate" and old is not None and not validator.matches(old):
        return
    raise DocumentValidationFailure(err_info)


def parse_validator(spec: Mapping[str, Any]) -> Validator:
    """The validator of create and collMod (see storage/query/validator.py). Raises QueryError
    with MongoDB's code, the message prefixed as MongoDB prefixes it."""
    from ebbdb.storage.query import validator

    return validator.parse_validator(spec)


__all__ = [
    "VALIDATION_ACTIONS",
    "VALIDATION_LEVELS",
    "DocumentValidationFailure",
    "check",
    "parse_validator",
]
