"""The `text` index kind: `{title: "text", body: "text"}`, `{"$**": "text"}`, and compound text
indexes with ascending/descending keys before and after the text fields. Stored as MongoDB stores
it: the key `{..., _fts: "text", _ftsx: 1, ...}` with the text fields in `weights`. Each entry is
(prefix values, term, the term's score in the document, suffix values); the words, languages and
scores are storage/query/text_search.py's."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ebbdb.storage.catalog.info import IndexInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_float
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.index_kinds.registry import Bodies, IndexKind, Key, PlainBodies, register
from ebbdb.storage.indexes.plans import Planning
from ebbdb.storage.query.paths import MISSING, leaves, split
from ebbdb.storage.query.text_search import (
    DEFAULT_LANGUAGE,
    DEFAULT_LANGUAGE_OVERRIDE,
    TEXT_INDEX_VERSION,
    WILDCARD,
    TextSpec,
    language_named,
)

FTS, FTSX = "_fts", "_ftsx"
#: MongoDB's bound on a field's weight (MAX_WORD_WEIGHT).
_MAX_WEIGHT = 100_000


def _error(code: int, message: str) -> QueryError:
    return QueryError(f"Location{code}", message)


def _is_text(direction: Any) -> bool:
    return isinstance(direction, str) and direction == "text"


def _split_key(key: Key) -> tuple[list[tuple[str, Any]], list[str], list[tuple[str, Any]]]:
    """(fields before the text fields, the text fields, fields after), with MongoDB's checks of
    a text key pattern (fts_spec's codes). A pattern already in the stored form ({_fts: "text",
    _ftsx: 1}) gives no text fields: its weights say them."""
    before: list[tuple[str, Any]] = []
    texts: list[str] = []
    after: list[tuple[str, Any]] = []
    fixed = False
    i = 0
    while i < len(key):
        field, d = key[i]
        if field == FTS:
            if not _is_text(d):
                raise _error(17271, 'expecting _fts:"text"')
            if i + 1 >= len(key) or key[i + 1][0] != FTSX:
                raise _error(17274, "expected _ftsx after _fts")
            if not (is_number(key[i + 1][1]) and to_float(key[i + 1][1]) == 1):
                raise _error(17272, "expecting _ftsx:1")
            fixed = True
            i += 2
            continue
        if field == FTSX:
            raise _error(17274, "expected _ftsx after _fts")
        if _is_text(d):
            if after or (fixed and not texts):
                raise _error(17389, "'text' fields in index must all be adjacent")
            texts.append(field)
        else:
            if not is_number(d) or to_float(d) not in (1.0, -1.0):
                raise _error(17273, "expected value 1 or -1 for non-text key in compound index")
            (after if texts or fixed else before).append((field, d))
        i += 1
    return before, texts, after


def _weights(texts: list[str], option: Any) -> dict[str, int]:
    out: dict[str, int] = dict.fromkeys(texts, 1)
    if isinstance(option, Mapping):
        for field, w in option.items():
            if not is_number(w):
                raise _error(17283, "weight for text index needs numeric type")
            out[field] = int(to_float(w))
    elif isinstance(option, str) and option == WILDCARD:
        out[WILDCARD] = 1
    elif option is not None:
        raise _error(17284, "text index option 'weights' must be an object")
    for field, w in out.items():
        if not 0 < w < _MAX_WEIGHT:
            raise _error(16674, "score for word too high")
        if field != WILDCARD:
            if not field:
                raise _error(17294, "weight cannot be on an empty field")
            for part in field.split("."):
                if not part:
                    raise _error(17291, "weight cannot have empty path component")
                if part.startswith("$"):
                    raise _error(17292, "weight cannot have path component with $ prefix")
    if not out:
        raise QueryError("CannotCreateIndex", "text index needs at least one text field")
    return dict(sorted(out.items()))  # MongoDB keeps them in field-name order


def check(key: Key, options: dict[str, Any]) -> dict[str, Any]:
    """Validate a text index (fts_spec's rules and codes) and return what listIndexes shows
    beyond key and name: weights, default_language, language_override, textIndexVersion."""
    before, texts, after = _split_key(key)
    for field, _ in (*before, *after):
        if field in (FTS, FTSX):
            raise _error(17289, "text index with reserved fields _fts/_ftsx not allowed")
    if "expireAfterSeconds" in options:
        # MongoDB's text key is {_fts: "text", _ftsx: 1}: two fields, so never a TTL index.
        raise QueryError(
            "CannotCreateIndex",
            "TTL indexes are single-field indexes, compound indexes do not support TTL.",
        )
    weights = _weights(texts, options.get("weights"))
    language = options.get("default_language", DEFAULT_LANGUAGE)
    if not isinstance(language, str):
        raise _error(17263, "default_language needs a string type")
    if language_named(language) is None:
        raise _error(17264, f"default_language is not valid: {language}")
    override = options.get("language_override", DEFAULT_LANGUAGE_OVERRIDE)
    if not isinstance(override, str) or not override or override.startswith("$") or "." in override:
        raise _error(17136, "language_override is not valid")
    version = options.get("textIndexVersion", TEXT_INDEX_VERSION)
    if not is_number(version):
        raise _error(17293, "text index option 'textIndexVersion' must be a number")
    if to_float(version) != TEXT_INDEX_VERSION:
        raise _error(16730, f"bad textIndexVersion: {int(to_float(version))}")
    return {
        "weights": weights,
        "default_language": language,
        "language_override": override,
        "textIndexVersion": TEXT_INDEX_VERSION,
    }


def stored_key(key: Key) -> Key:
    """The key pattern MongoDB stores (and listIndexes shows): the text fields become
    `_fts: "text", _ftsx: 1`, the others stay where they are."""
    before, _texts, after = _split_key(key)
    return (*before, (FTS, "text"), (FTSX, 1), *after)


@functools.lru_cache(maxsize=256)
def _spec(
    key: Key, weights: tuple[tuple[str, float], ...], language: str, override: str
) -> TextSpec:
    fts = next(i for i, (f, _) in enumerate(key) if f == FTS)
    named = language_named(language) or DEFAULT_LANGUAGE
    return TextSpec(
        tuple((f, w) for f, w in weights if f != WILDCARD),
        any(f == WILDCARD for f, _ in weights),
        named,
        override,
        tuple(f for f, _ in key[:fts]),
        tuple(f for f, _ in key[fts + 2 :]),
    )


def spec_of(ix: IndexInfo) -> TextSpec:
    """How a stored text index reads documents."""
    o = ix.options
    weights = tuple((str(f), float(w)) for f, w in dict(o.get("weights", {})).items())
    return _spec(
        ix.key,
        weights,
        str(o.get("default_language", DEFAULT_LANGUAGE)),
        str(o.get("language_override", DEFAULT_LANGUAGE_OVERRIDE)),
    )


def _scalar(ix: IndexInfo, doc: dict[str, Any], path: str) -> Any:
    found = [v for v in leaves(doc, split(path)) if v is not MISSING]
    if not found:
        return None
    if len(found) > 1 or isinstance(found[0], list):
        # MongoDB cannot index an array in a compound text index's other fields.
        raise _error(16675, "cannot have a multi-key as a prefix of a text index")
    return found[0]


def bodies(ix: IndexInfo, doc: dict[str, Any], plain: PlainBodies) -> Bodies:
    """One entry per term of the document: (prefix values, term, score, suffix values)."""
    spec = spec_of(ix)
    before = tuple(_scalar(ix, doc, f) for f in spec.prefix)
    after = tuple(_scalar(ix, doc, f) for f in spec.suffix)
    directions = ix.directions
    out = []
    for term, score in spec.term_scores(doc).items():
        values = (*before, term, score, *after)
        shown = (
            dict(zip(spec.prefix, before))
            | {FTS: term, FTSX: score}
            | dict(zip(spec.suffix, after))
        )
        out.append((keys.encode_compound(values, directions), shown))
    return out, len(out) > 1


def term_prefix(ix: IndexInfo, prefix_values: tuple[Any, ...], term: str) -> bytes:
    """The key bytes every entry of `term` (under these prefix values) starts with."""
    n = len(prefix_values) + 1
    return keys.encode_compound((*prefix_values, term), ix.directions[:n])


TEXT = register(
    IndexKind(
        "text",
        check,
        bodies,
        frozenset({"weights", "default_language", "language_override", "textIndexVersion"}),
        stored_key,
        # Only documents with words have entries: it serves $text alone (storage/indexes/text_plan.py).
        Planning(chosen=False),
    )
)
