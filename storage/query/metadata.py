"""A document's metadata (MongoDB's `$meta`): the text score a `$text` query gives each matching
document travels with the decoded document, which projections, sorts and expressions read."""

from __future__ import annotations

from typing import Any

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import render
from ebbdb.storage.query.paths import MISSING

TEXT_SCORE = "textScore"
#: The keywords MongoDB 7.0 knows; only textScore has a value here (the others are Atlas
#: Search's, or about the plan).
KEYWORDS = frozenset(
    {
        "textScore",
        "randVal",
        "searchScore",
        "searchHighlights",
        "geoNearDistance",
        "geoNearPoint",
        "recordId",
        "indexKey",
        "sortKey",
        "searchScoreDetails",
        "searchSequenceToken",
        "vectorSearchScore",
    }
)


class Scored(dict[str, Any]):
    """A decoded document with its text score."""

    __slots__ = ("text_score",)

    def __init__(self, doc: dict[str, Any], score: float) -> None:
        super().__init__(doc)
        self.text_score = score


def with_text_score(doc: dict[str, Any], score: float) -> dict[str, Any]:
    return Scored(doc, score)


def keep_metadata(source: Any, out: dict[str, Any]) -> dict[str, Any]:
    """`out` (a stage's reshaping of `source`) with `source`'s metadata, as MongoDB's documents
    keep theirs through $project, $addFields and the like."""
    if type(source) is Scored and type(out) is not Scored:
        return Scored(out, source.text_score)
    return out


def text_score(doc: Any) -> float:
    """The document's text score; 40218 when it has none (no `$text` found it)."""
    score = getattr(doc, "text_score", MISSING)
    if score is MISSING:
        raise QueryError(
            "Location40218", "query requires text score metadata, but it is not available"
        )
    return float(score)


def check_keyword(arg: Any) -> str:
    """A `$meta` argument: textScore; NotImplemented for MongoDB's others, 17308 for the rest."""
    if isinstance(arg, str) and arg == TEXT_SCORE:
        return arg
    if isinstance(arg, str) and arg in KEYWORDS:
        raise QueryError("NotImplemented", f"$meta {arg!r} is not supported")
    shown = arg if isinstance(arg, str) else render(arg)
    raise QueryError("Location17308", f"Unsupported argument to $meta: {shown}")


__all__ = [
    "Scored",
    "TEXT_SCORE",
    "check_keyword",
    "keep_metadata",
    "text_score",
    "with_text_score",
]
