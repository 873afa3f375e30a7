"""Date-like strings where a TTL index needs a date: which strings look like dates (ISO 8601,
RFC 2822, JavaScript's Date.toString), the one such string a native TTL index meets in a document,
and the notices of them, gathered where documents are written, that the TTL monitor logs. Kept
apart from storage/expiry/status.py (the ttlStatus count) because every write path holds the
notices: the email package (RFC 2822 dates) is imported by the first string shaped like one."""

from __future__ import annotations

import datetime
import functools
import re
import threading
from dataclasses import dataclass
from typing import Any

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.expiry import ttl
from ebbdb.storage.query.compare import RANK_DATE, rank
from ebbdb.storage.query.paths import MISSING, leaves, split

# -- strings that look like dates ------------------------------------------------------------------

_ISO = r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z|z|[+-]\d{2}(?::?\d{2})?)?)?"
#: JavaScript's Date.prototype.toString, what a Date becomes when an application stringifies it.
_JS = r"[A-Z][a-z]{2} [A-Z][a-z]{2} \d{2} \d{4} \d{2}:\d{2}:\d{2} GMT[+-]\d{4}\b.*"
_LONGEST = 100


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The two patterns, compiled by the first string that could be a date (not at import)."""
    return re.compile(_ISO), re.compile(_JS)


def looks_like_date(s: str) -> bool:
    """Whether a string reads as a date or date-time: ISO 8601 (`2024-01-01`,
    `2024-01-01T00:00:00.000Z`, with an offset or a space), RFC 2822 (`Mon, 01 Jan 2024 00:00:00
    GMT`) or JavaScript's Date.toString. Only real calendar dates count."""
    s = s.strip()
    if not 10 <= len(s) <= _LONGEST:
        return False
    iso, js = _patterns()
    if iso.fullmatch(s):
        try:
            datetime.date.fromisoformat(s[:10])
        except ValueError:
            return False
        return True
    if js.fullmatch(s):
        return True
    if "," in s[:5] or s[:1].isdigit():
        import email.utils

        try:
            return email.utils.parsedate_to_datetime(s) is not None
        except (TypeError, ValueError, IndexError):
            return False
    return False


def date_string(value: Any) -> str | None:
    """`value`, or the first element of an array `value`, that is a date-like string."""
    for item in value if isinstance(value, list) else (value,):
        if isinstance(item, str) and looks_like_date(item):
            return item
    return None


def has_date(value: Any) -> bool:
    """Whether `value`, or an element of an array `value`, is a date."""
    return any(rank(item) == RANK_DATE for item in (value if isinstance(value, list) else (value,)))


def date_string_in(ix: IndexInfo, doc: dict[str, Any]) -> str | None:
    """A date-like string the native TTL index's path yields in a document it gives no date,
    or None (also when its partial filter rejects the document)."""
    pred = ix.partial_predicate
    if pred is not None and not pred(doc):
        return None
    values = [v for v in leaves(doc, split(ix.key[0][0])) if v is not MISSING]
    if any(has_date(v) for v in values):
        return None
    return next((s for v in values if (s := date_string(v)) is not None), None)


# -- the notices ---------------------------------------------------------------


@dataclass(frozen=True)
class DateStringNotice:
    """A native TTL index met a date-like string where it needs a date: in which collection and
    index, and the first document's `_id` and string."""

    ns: str
    index: str
    field: str
    id: Any
    value: str


class DateStringNotices:
    """Date-like strings in TTL fields, noticed where documents are written and TTL indexes built
    (the writer thread), at most once per index for the life of the engine; the TTL monitor takes
    the new ones and logs them. Costs nothing for documents that have their dates."""

    def __init__(self) -> None:
        self._seen: set[int] = set()  # TTL index ids (unique in a data directory)
        self._new: list[DateStringNotice] = []
        self._lock = threading.Lock()

    def check(self, coll: CollectionInfo, doc: dict[str, Any], header: bytes) -> None:
        """Look at a document just written with this header: does a native TTL index of the
        collection find no date but a date-like string?"""
        native = ttl.rules_for(coll).native
        if not native:
            return
        dated = {ix_id for ix_id, _ms in ttl.read_meta(header).dates}
        for ix, _e in native:
            if ix.id in dated or ix.id in self._seen:
                continue
            s = date_string_in(ix, doc)
            if s is None:
                continue
            with self._lock:
                if ix.id not in self._seen:
                    self._seen.add(ix.id)
                    self._new.append(
                        DateStringNotice(coll.ns, ix.name, ix.key[0][0], doc.get("_id"), s)
                    )

    def take(self) -> list[DateStringNotice]:
        """The notices not taken yet."""
        with self._lock:
            new, self._new = self._new, []
        return new
