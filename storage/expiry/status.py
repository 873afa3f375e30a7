"""Why a document does or does not expire: a collection's TTL rules as objects that map a stored
document to its expiry time or to the reason it never expires, the read-only count behind the
ttlStatus command, and the notices of date-like strings in TTL fields that the TTL monitor logs.

Which strings look like dates, and the notices of them, are storage/expiry/date_strings.py's.

A rule kind is a builder registered with `rule_kind`: given a collection's catalog entry it yields
the `Rule`s of that kind: the native TTL index, the Cosmos `_ts` default, and the rules a
collection's own options set (clustered: the `_id` date; time series: the timeField). Whether a
document is hidden stays decided by `ttl.expired`: a new kind must be part of that predicate too."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import bson

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import NamespaceNotFound
from ebbdb.storage.core.values import type_name
from ebbdb.storage.expiry import ttl
from ebbdb.storage.expiry.date_strings import date_string
from ebbdb.storage.query.paths import MISSING, leaves, split


class Scanner(Protocol):
    """The one read the count makes (storage.engine's Reader)."""

    def scan(self, coll: CollectionInfo) -> Iterator[tuple[int, bytes]]: ...


class Source(Protocol):
    """What the count needs of storage.engine's Engine: the catalog and a read transaction."""

    def collection(self, db: str, name: str) -> CollectionInfo | None: ...

    def read(self) -> AbstractContextManager[Scanner]: ...


class Reason(enum.Enum):
    """Why a rule never expires a document; the values are the names ttlStatus reports. For the
    fields of a native index the order is the order of the checks (the first that holds wins)."""

    PARTIAL_FILTER = "partialFilterMismatch"  # the index's partialFilterExpression rejects it
    FIELD_MISSING = "fieldMissing"  # the indexed path reaches no value
    DATE_STRING = "dateString"  # a string that looks like a date, where a BSON Date is needed
    ARRAY_WITHOUT_DATES = "arrayWithoutDates"  # an array, none of whose elements is a date
    NOT_A_DATE = "notADate"  # anything else: null, a number, an ordinary string, ...
    TTL_MINUS_ONE = "ttlMinusOne"  # Cosmos: the document's own `ttl` is -1
    INVALID_TTL = "invalidTtl"  # Cosmos, default -1: a `ttl` that Cosmos would not honour
    NO_DEFAULT_TTL = "noDefaultTtl"  # Cosmos, default -1: the document has no `ttl` at all


@dataclass(frozen=True, slots=True)
class Never:
    """A rule's verdict that a document never expires: why, and the value that decided it
    (MISSING when there is none)."""

    reason: Reason
    value: Any = MISSING


class Stored:
    """One stored record as rules see it: its header (`meta`), and its document, decoded only when
    a rule asks for it (a document whose header already answers is never decoded)."""

    __slots__ = ("_doc", "_value", "meta")

    def __init__(self, value: bytes) -> None:
        self._value = value
        self.meta = ttl.read_meta(value)
        self._doc: dict[str, Any] | None = None

    @property
    def doc(self) -> dict[str, Any]:
        if self._doc is None:
            self._doc = bson.decode(ttl.body(self._value), CODEC)
        return self._doc

    def top_level(self, name: str) -> Any:
        """The document's root-level field `name`, or MISSING; decodes only when the name's bytes
        occur in the BSON at all."""
        if name.encode() + b"\x00" not in self._value:
            return MISSING
        return self.doc.get(name, MISSING)


#: A rule's answer for one document: its expiry time (ms since the epoch), or why it never expires.
Expiry = int | Never


@dataclass(frozen=True)
class Rule:
    """One TTL rule of a collection. `kind` names the rule kind, `index` the index that sets it,
    `field` the document field it reads (`_ts`: the server-kept last-modified time), `seconds`
    its expireAfterSeconds (the Cosmos default: -1 or more), `expiry` maps a stored document to
    its Expiry, and `ignored`, where a rule can ignore a field the document sets, returns that
    ignored value (MISSING: nothing ignored); `ignores` names that field."""

    kind: str
    index: str | None  # None: the collection's options set the rule (time series)
    field: str
    seconds: int
    expiry: Callable[[Stored], Expiry]
    partial_filter: dict[str, Any] | None = None
    ignores: str | None = None
    ignored: Callable[[Stored], Any] | None = None


RuleKind = Callable[[CollectionInfo], Iterable[Rule]]
_KINDS: list[RuleKind] = []


def rule_kind(builder: RuleKind) -> RuleKind:
    """Register a builder of one kind of rules (a decorator)."""
    _KINDS.append(builder)
    return builder


def rules_of(coll: CollectionInfo) -> list[Rule]:
    """Every TTL rule of a collection, in registration order, then index order."""
    return [rule for builder in _KINDS for rule in builder(coll)]


def no_date(ix: IndexInfo, doc: dict[str, Any]) -> Never:
    """Why a native TTL index finds no date in a document (the checks of Reason, in order)."""
    pred = ix.partial_predicate
    if pred is not None and not pred(doc):
        return Never(Reason.PARTIAL_FILTER)
    values = [v for v in leaves(doc, split(ix.key[0][0])) if v is not MISSING]
    if not values:
        return Never(Reason.FIELD_MISSING)
    for v in values:
        s = date_string(v)
        if s is not None:
            return Never(Reason.DATE_STRING, s)
    for v in values:
        if isinstance(v, list):
            return Never(Reason.ARRAY_WITHOUT_DATES, v)
    return Never(Reason.NOT_A_DATE, values[0])


# -- the two rule kinds of storage/expiry/ttl.py ---------------------------------------------------------


@rule_kind
def native_rules(coll: CollectionInfo) -> Iterator[Rule]:
    """A TTL index on a date field: the earliest date the header holds, plus E seconds."""
    for ix, e in ttl.rules_for(coll).native:

        def expiry(s: Stored, ix: IndexInfo = ix, e: int = e) -> Expiry:
            for ix_id, ms in s.meta.dates:
                if ix_id == ix.id:
                    return ms + e * 1000
            return no_date(ix, s.doc)

        yield Rule("ttlIndex", ix.name, ix.key[0][0], e, expiry, ix.partial_filter)


@rule_kind
def cosmos_rules(coll: CollectionInfo) -> Iterator[Rule]:
    """The `_ts` TTL index: the document's valid `ttl`, else the default D, from its last write."""
    rules = ttl.rules_for(coll)
    d, ix = rules.cosmos, rules.cosmos_index
    if d is None or ix is None:
        return

    def expiry(s: Stored) -> Expiry:
        m = s.meta
        if m.ttl > 0:
            return m.modified + m.ttl * 1000
        if m.ttl == -1:
            return Never(Reason.TTL_MINUS_ONE, -1)
        if d > 0:
            return m.modified + d * 1000
        own = s.top_level("ttl")
        return Never(Reason.NO_DEFAULT_TTL) if own is MISSING else Never(Reason.INVALID_TTL, own)

    def ignored(s: Stored) -> Any:
        # Under a default D > 0 an invalid `ttl` is not a reason to live forever, only a
        # reason to live D seconds instead of what the document asked for.
        return s.top_level("ttl") if s.meta.ttl == 0 and d > 0 else MISSING

    yield Rule("cosmos", ix.name, ttl.COSMOS_FIELD, d, expiry, ignores="ttl", ignored=ignored)


@rule_kind
def collection_rules(coll: CollectionInfo) -> Iterator[Rule]:
    """A clustered collection's expiry by the `_id` date, a time series collection's by the
    timeField: the date the header holds (under the `_id` index's id), plus E seconds. Switched
    off (`expireAfterSeconds` unset or "off"), the collection has no such rule."""
    for rule in ttl.collection_rules(coll):
        if rule.seconds is None:
            continue

        def expiry(
            s: Stored, space: int = rule.space, e: int = rule.seconds, name: str = rule.field
        ) -> Expiry:
            for ix_id, ms in s.meta.dates:
                if ix_id == space:
                    return ms + e * 1000
            value = s.doc.get(name, MISSING)
            if value is MISSING:
                return Never(Reason.FIELD_MISSING)
            text = date_string(value)
            return (
                Never(Reason.DATE_STRING, text)
                if text is not None
                else Never(Reason.NOT_A_DATE, value)
            )

        index = "_id_" if rule.kind == "clustered" else None
        yield Rule(rule.kind, index, rule.field, rule.seconds, expiry)


# -- the count ------------------------------------------------------------------------------------


@dataclass
class Sample:
    """Documents that share one outcome: how many, the first one's `_id` and the value that
    decided (MISSING: none), and for notADate the BSON types met."""

    count: int = 0
    id: Any = MISSING
    value: Any = MISSING
    types: dict[str, int] = field(default_factory=dict)

    def add(self, s: Stored, value: Any, with_type: bool = False) -> None:
        if not self.count:
            self.id, self.value = s.doc.get("_id"), value
        self.count += 1
        if with_type:
            t = type_name(value)
            self.types[t] = self.types.get(t, 0) + 1


@dataclass
class Tally:
    """What one rule (or, with rule None, all of them together) says of a collection."""

    rule: Rule | None
    will_expire: int = 0
    next_expiry: int | None = None
    expired: int = 0
    never: int = 0
    reasons: dict[Reason, Sample] = field(default_factory=dict)
    ignored: Sample = field(default_factory=Sample)

    def add(self, at: int | None, now_ms: int) -> None:
        if at is None:
            self.never += 1
        elif at <= now_ms:
            self.expired += 1
        else:
            self.will_expire += 1
            if self.next_expiry is None or at < self.next_expiry:
                self.next_expiry = at


@dataclass(frozen=True)
class TtlStatus:
    """A collection's TTL status at `now_ms`: `documents` stored (expired ones included), the
    collection as a whole (by ttl.expires_at, what hiding uses) and each rule."""

    ns: str
    now_ms: int
    documents: int
    overall: Tally
    rules: tuple[Tally, ...]


def ttl_status(engine: Source, coll: CollectionInfo, now_ms: int) -> TtlStatus:
    """Count, in one read transaction, what each TTL rule of the collection does with each of its
    documents at `now_ms`. Reads every record (a diagnostic: call it off the event loop); decodes
    only the documents some rule cannot answer for from the record header. Raises
    NamespaceNotFound if the collection is gone."""
    current = engine.collection(coll.db, coll.name)
    if current is None:
        raise NamespaceNotFound(f"Collection '{coll.ns}' does not exist")
    rules = ttl.rules_for(current)
    overall = Tally(None)
    tallies = [Tally(rule) for rule in rules_of(current)]
    documents = 0
    with engine.read() as reader:
        for _rid, value in reader.scan(current):
            documents += 1
            s = Stored(value)
            overall.add(ttl.expires_at(s.meta, rules) if rules.active else None, now_ms)
            for tally in tallies:
                assert tally.rule is not None
                verdict = tally.rule.expiry(s)
                if isinstance(verdict, Never):
                    tally.add(None, now_ms)
                    sample = tally.reasons.setdefault(verdict.reason, Sample())
                    sample.add(s, verdict.value, verdict.reason is Reason.NOT_A_DATE)
                else:
                    tally.add(verdict, now_ms)
                if tally.rule.ignored is not None:
                    own = tally.rule.ignored(s)
                    if own is not MISSING:
                        tally.ignored.add(s, own)
    for tally in tallies:
        tally.reasons = {r: tally.reasons[r] for r in Reason if r in tally.reasons}
    return TtlStatus(current.ns, now_ms, documents, overall, tuple(tallies))
