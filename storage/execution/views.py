"""Views: read-only collections defined by an aggregation pipeline over another collection or view.
As in MongoDB, a database's views are documents of its `system.views` collection
(`{_id: "db.view", viewOn, pipeline[, collation]}`); this module reads, checks (cycles, depth,
stages a view may not hold) and writes them, and resolves a view to the collection it reads and
the pipeline in front of every read. Views are read and written through the query executor,
imported by the first database that has any (not at start)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import bson

from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import NamespaceExists, NamespaceNotFound, QueryError

if TYPE_CHECKING:
    from ebbdb.storage.engine.records import CollectionWrites
    from ebbdb.storage.engine.store import Engine
    from ebbdb.storage.execution.execute import QueryRun

SYSTEM_VIEWS = "system.views"
#: MongoDB's ViewGraph::kMaxViewDepth: views in one chain.
MAX_VIEW_DEPTH = 20
#: Stages a view may not hold: they write (MongoDB reports them by their place in the pipeline).
_WRITING_STAGES = ("$out", "$merge")
_BIG = 1 << 62


@dataclass(frozen=True)
class View:
    """One view: `db.name` reads `db.view_on` through `pipeline`; `collation` is its default
    collation (None: the simple one)."""

    db: str
    name: str
    view_on: str
    pipeline: tuple[Mapping[str, Any], ...]
    collation: Mapping[str, Any] | None = None

    @property
    def ns(self) -> str:
        return f"{self.db}.{self.name}"

    def options(self) -> dict[str, Any]:
        """The view's `options` as listCollections shows them."""
        out: dict[str, Any] = {"viewOn": self.view_on, "pipeline": list(self.pipeline)}
        if self.collation is not None:
            out["collation"] = dict(self.collation)
        return out

    def to_doc(self) -> dict[str, Any]:
        """The view's document in `system.views`."""
        return {"_id": self.ns, **self.options()}

    @classmethod
    def from_doc(cls, db: str, doc: Mapping[str, Any]) -> View | None:
        """The view a `system.views` document defines (None: not a well-formed definition of a
        view of `db`, e.g. one written there by hand)."""
        ns, view_on, pipeline = doc.get("_id"), doc.get("viewOn"), doc.get("pipeline", [])
        if not isinstance(ns, str) or not ns.startswith(f"{db}.") or not isinstance(view_on, str):
            return None
        if not isinstance(pipeline, list) or not all(isinstance(s, Mapping) for s in pipeline):
            return None
        collation = doc.get("collation")
        return cls(
            db,
            ns[len(db) + 1 :],
            view_on,
            tuple(pipeline),
            collation if isinstance(collation, Mapping) else None,
        )


@dataclass(frozen=True)
class Resolved:
    """A view resolved through its chain: the collection it reads and the whole pipeline in front
    of the reader's own stages (the innermost view's stages first)."""

    collection: str
    pipeline: tuple[Mapping[str, Any], ...]
    collation: Mapping[str, Any] | None


# -- reading -----------------------------------------------------------------------------------------


def _run(coll: CollectionInfo, filter: dict[str, Any] | None) -> QueryRun:
    """A query over `coll` (system.views) by the query executor, imported here: by the first
    database that has views."""
    from ebbdb.storage.execution.execute import QueryRun, QuerySpec

    return QueryRun(coll, QuerySpec.parse(filter))


def _documents(
    engine: Engine, coll: CollectionInfo, filter: dict[str, Any] | None
) -> list[dict[str, Any]]:
    run = _run(coll, filter)
    out: list[dict[str, Any]] = []
    while not run.exhausted:
        out += (bson.decode(raw, CODEC) for raw in run.next_chunk(engine, 1 << 31, _BIG))
    return out


def lookup(engine: Engine, db: str, name: str) -> View | None:
    """The view `db.name`, or None (a collection, or nothing). Costs nothing in memory but a
    catalog lookup unless the name is not a collection and the database has views: a short read
    by `_id`, safe on the event loop."""
    if engine.collection(db, name) is not None:
        return None
    catalog = engine.collection(db, SYSTEM_VIEWS)
    if catalog is None:
        return None
    for doc in _documents(engine, catalog, {"_id": f"{db}.{name}"}):
        return View.from_doc(db, doc)
    return None


def views(engine: Engine, db: str) -> list[View]:
    """Every view of `db`, by name."""
    catalog = engine.collection(db, SYSTEM_VIEWS)
    if catalog is None:
        return []
    found = (View.from_doc(db, doc) for doc in _documents(engine, catalog, None))
    return sorted((v for v in found if v is not None), key=lambda v: v.name)


def resolve(engine: Engine, db: str, name: str) -> Resolved | None:
    """What reading `db.name` means if it is a view (None: it is not). Follows at most
    MAX_VIEW_DEPTH views, as MongoDB's resolveView: a longer chain raises ViewDepthLimitExceeded."""
    pipeline: tuple[Mapping[str, Any], ...] = ()
    first: View | None = None
    current = name
    for _ in range(MAX_VIEW_DEPTH):
        view = lookup(engine, db, current)
        if view is None:
            return None if first is None else Resolved(current, pipeline, first.collation)
        first = first or view
        pipeline = view.pipeline + pipeline
        current = view.view_on
    # As MongoDB's: twenty views resolved and the next name not yet known to be a collection.
    raise QueryError(
        "ViewDepthLimitExceeded",
        f"View depth too deep or view cycle detected; maximum depth is {MAX_VIEW_DEPTH}",
    )


# -- checking a definition -----------------------------------------------------------------------------


def check_pipeline(ns: str, pipeline: list[Any]) -> None:
    """Refuse the stages a view may not hold, with MongoDB's codes and words (a stage that writes,
    $changeStream, and stages that read no collection); the caller then parses the pipeline."""
    for i, stage in enumerate(pipeline):
        name = next(iter(stage), "") if isinstance(stage, Mapping) and len(stage) == 1 else ""
        if name in _WRITING_STAGES:
            raise QueryError(
                "OptionNotSupportedOnView",
                f"Invalid pipeline for view {ns} :: caused by :: The aggregation stage {name} in "
                f"location {i} of the pipeline cannot be used in the view definition of {ns} "
                "because it writes to disk",
            )
        if name == "$changeStream" and i == 0:
            raise QueryError(
                "OptionNotSupportedOnView",
                f"Invalid pipeline for view {ns} :: caused by :: $changeStream cannot be used in "
                "a view definition",
            )
        if name == "$documents":
            raise QueryError(
                "InvalidNamespace",
                f"Invalid pipeline for view {ns} :: caused by :: '$documents' cannot be used in a "
                "view definition",
            )


def _check_graph(engine: Engine, view: View) -> None:
    """MongoDB's ViewGraph checks for a new or changed view: no cycle through it, and no chain
    through it longer than MAX_VIEW_DEPTH views (both ways: the views it reads and those that
    read it)."""
    by_name = {v.name: v for v in views(engine, view.db)}
    by_name[view.name] = view
    # The chain below: its views, in order (a cycle comes back to the new view).
    below = 0
    path = [view.name]
    current = view.view_on
    while current in by_name:
        path.append(current)
        if current == view.name:
            # MongoDB names the starting view, then the path walked back to it.
            chain = " => ".join(f"{view.db}.{n}" for n in reversed(path))
            raise QueryError("GraphContainsCycle", f"View cycle detected: {view.ns} => {chain}")
        below += 1
        if below > MAX_VIEW_DEPTH:
            break
        current = by_name[current].view_on
    # The longest chain of views above (reading this one, directly or not).
    readers: dict[str, list[str]] = {}
    for v in by_name.values():
        readers.setdefault(v.view_on, []).append(v.name)
    above = 0
    level = [view.name]
    while level and above <= MAX_VIEW_DEPTH:
        level = [r for name in level for r in readers.get(name, ())]
        above += bool(level)
    if below + above + 1 > MAX_VIEW_DEPTH:
        raise QueryError(
            "ViewDepthLimitExceeded",
            f"View depth limit exceeded; maximum depth is {MAX_VIEW_DEPTH}",
        )


# -- writing -----------------------------------------------------------------------------------------


def _record_of(engine: Engine, w: CollectionWrites, ns: str) -> tuple[int, bytes] | None:
    """(record id, stored value) of the view document `ns` inside the write."""
    if w.info is None:
        return None
    rids = _run(w.info, {"_id": ns}).record_ids(engine, w.now_ms, 1)
    for rid in rids:
        value = w.get(rid)
        if value is not None:
            return rid, value
    return None


def create_view(engine: Engine, view: View, now_ms: int) -> None:
    """Store a new view (a storage write: run it on the writer). Raises NamespaceExists when a
    collection or view has the name, GraphContainsCycle or ViewDepthLimitExceeded."""
    validate_collection_name(view.db, view.name)

    def run(w: CollectionWrites) -> None:
        if engine.collection(view.db, view.name) is not None or _record_of(engine, w, view.ns):
            raise NamespaceExists(f"Collection {view.ns} already exists.")
        _check_graph(engine, view)
        w.insert(bson.encode(view.to_doc(), codec_options=CODEC))

    engine.modify(view.db, SYSTEM_VIEWS, run, now_ms)


def modify_view(
    engine: Engine,
    db: str,
    name: str,
    view_on: str | None,
    pipeline: list[Any] | None,
    now_ms: int,
) -> View:
    """Give view `db.name` a new `view_on` and/or `pipeline` (what is not given stays). Raises
    NamespaceNotFound if it is not a view, GraphContainsCycle or ViewDepthLimitExceeded."""

    def run(w: CollectionWrites) -> View:
        ns = f"{db}.{name}"
        found = _record_of(engine, w, ns)
        current = lookup(engine, db, name) if found else None
        if found is None or current is None:
            raise NamespaceNotFound(f"ns does not exist: {ns}")
        changed = View(
            db,
            name,
            current.view_on if view_on is None else view_on,
            current.pipeline if pipeline is None else tuple(pipeline),
            current.collation,
        )
        _check_graph(engine, changed)
        doc = changed.to_doc()
        rid, value = found
        w.replace(rid, value, bson.encode(doc, codec_options=CODEC), doc)
        return changed

    return engine.modify(db, SYSTEM_VIEWS, run, now_ms)


def drop_view(engine: Engine, db: str, name: str, now_ms: int) -> bool:
    """Drop view `db.name`; False when there is no such view."""

    def run(w: CollectionWrites) -> bool:
        found = _record_of(engine, w, f"{db}.{name}")
        if found is None:
            return False
        w.delete(*found)
        return True

    if engine.collection(db, SYSTEM_VIEWS) is None:
        return False
    return engine.modify(db, SYSTEM_VIEWS, run, now_ms)
