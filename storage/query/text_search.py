"""Text search (MongoDB's `text` index, version 3): languages, tokenizing, case and diacritic
folding, stop words and stemming, the `$text` query's `$search` string, which fields and strings of
a document an index reads (weights, `$**`, the language override), each term's score, and whether
a document matches a search. Stemming is Snowball's (snowballstemmer, imported by the first
language that stems, not by parsing a filter); stop words are mongod's own lists (stop_words.py).
The `text` index kind (storage/indexes/index_kinds/text.py) and the `$text` query operator both
read this module, so an index entry and a re-check agree."""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.stop_words import stop_words

#: MongoDB 7.0's text search languages (textIndexVersion 3): name and ISO 639-1 code -> the
#: language ("none": simple tokenizing, no stop words, no stemming).
_LANGUAGE_CODES = {
    "danish": "da",
    "dutch": "nl",
    "english": "en",
    "finnish": "fi",
    "french": "fr",
    "german": "de",
    "hungarian": "hu",
    "italian": "it",
    "norwegian": "nb",
    "portuguese": "pt",
    "romanian": "ro",
    "russian": "ru",
    "spanish": "es",
    "swedish": "sv",
    "turkish": "tr",
}
LANGUAGES: dict[str, str] = {
    **{name: name for name in _LANGUAGE_CODES},
    **{code: name for name, code in _LANGUAGE_CODES.items()},
    "none": "none",
}
DEFAULT_LANGUAGE = "english"
DEFAULT_LANGUAGE_OVERRIDE = "language"
TEXT_INDEX_VERSION = 3
WILDCARD = "$**"


def language_named(name: str) -> str | None:
    """The language a `default_language`, `$language` or language override value names (MongoDB
    takes names and codes in any case), or None for one it does not support."""
    return LANGUAGES.get(name.lower())


# -- words ------------------------------------------------------------------------------------------


@functools.cache
def _stemmer(language: str) -> Callable[[str], str]:
    if language == "none":
        return lambda w: w
    import snowballstemmer

    return snowballstemmer.stemmer(language).stemWord  # type: ignore[no-any-return]


def _is_word_char(c: str, english: bool = False) -> bool:
    # MongoDB's delimiters are Unicode's white space, dashes, quotation marks, terminal and
    # syntax punctuation: letters, digits, combining marks and `_` make words. In English the
    # apostrophe does too ("don't" is one word, and a stop word).
    return c.isalnum() or c == "_" or unicodedata.category(c)[0] == "M" or (english and c == "'")


def tokens(text: str, language: str = "none") -> list[str]:
    """The words of a string in a language, in order, as written."""
    english = language == "english"
    out: list[str] = []
    start = -1
    for i, c in enumerate(text):
        if _is_word_char(c, english):
            if start < 0:
                start = i
        elif start >= 0:
            out.append(text[start:i])
            start = -1
    if start >= 0:
        out.append(text[start:])
    return out


def fold(text: str, case_sensitive: bool, diacritic_sensitive: bool) -> str:
    """Text as version 3 compares it: lower case unless case sensitive, without diacritics (the
    combining marks of its canonical decomposition) unless diacritic sensitive."""
    if not case_sensitive:
        text = text.lower()
    if not diacritic_sensitive:
        decomposed = unicodedata.normalize("NFD", text)
        text = unicodedata.normalize(
            "NFC", "".join(c for c in decomposed if not unicodedata.combining(c))
        )
    return text


def _lower(word: str, language: str) -> str:
    # Turkish lower-cases a dotless I to a dotless i and a dotted one to i, as mongod's case
    # folding does in its Turkish mode.
    if language == "turkish":
        word = word.replace("I", "ı").replace("İ", "i")
    return word.lower()


def terms(
    text: str, language: str, case_sensitive: bool = False, diacritic_sensitive: bool = False
) -> list[str]:
    """The index terms of a string, as mongod's tokenizer makes them: each word lower-cased is
    looked up in the stop words as it is (diacritics kept: French "être" is a stop word, "etre"
    is not); a word that is not one is stemmed (lower-cased, or as written when case sensitive)
    and then loses its diacritics unless diacritic sensitive."""
    stops = stop_words(language)
    stem = _stemmer(language)
    out = []
    for word in tokens(text, language):
        lowered = _lower(word, language)
        if lowered in stops:
            continue
        term = stem(word if case_sensitive else lowered)
        out.append(term if diacritic_sensitive else fold(term, True, False))
    return out


# -- the $text query --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextQuery:
    """A parsed `$text`: the stemmed terms a document needs one of (`positive`), those it must not
    have (`negated`), the phrases it must (and must not) contain, and the options."""

    search: str
    language: str
    case_sensitive: bool
    diacritic_sensitive: bool
    positive: tuple[str, ...]
    negated: frozenset[str]
    phrases: tuple[str, ...]
    negated_phrases: tuple[str, ...]
    #: The positive terms folded as the index holds them (the same as `positive` unless case or
    #: diacritic sensitive): what the index is read for, and what scores.
    index_terms: tuple[str, ...] = ()

    def spec(self) -> dict[str, Any]:
        """The `$text` document as explain shows it (parsedTextQuery)."""
        return {
            "terms": sorted(self.index_terms),
            "negatedTerms": sorted(self.negated),
            "phrases": list(self.phrases),
            "negatedPhrases": list(self.negated_phrases),
        }


_TEXT_FIELDS = ("$search", "$language", "$caseSensitive", "$diacriticSensitive")


@dataclass(frozen=True)
class TextArgs:
    """`$text`'s arguments as checked when the filter is parsed; `language` None: the index's
    default language (known once the planner found the index)."""

    search: str
    language: str | None
    case_sensitive: bool
    diacritic_sensitive: bool

    def query(self, default_language: str) -> TextQuery:
        return _parse_search(
            self.search,
            self.language or default_language,
            self.case_sensitive,
            self.diacritic_sensitive,
        )


def parse_text(arg: Any) -> TextArgs:
    """Check `{$search, $language, $caseSensitive, $diacriticSensitive}`, with MongoDB's errors."""
    if not isinstance(arg, Mapping):
        raise QueryError("BadValue", "$text expects an object")
    for key in arg:
        if key not in _TEXT_FIELDS:
            raise QueryError("BadValue", f"extra fields in $text: {key}")
    search = arg.get("$search")
    if not isinstance(search, str):
        raise QueryError("BadValue", "$search required and must be a string")
    lang_arg = arg.get("$language")
    if lang_arg is not None and not isinstance(lang_arg, str):
        raise QueryError("BadValue", "$language must be a string")
    for flag in ("$caseSensitive", "$diacriticSensitive"):
        if flag in arg and not isinstance(arg[flag], bool):
            raise QueryError("BadValue", f"{flag} must be a boolean")
    language = None
    if lang_arg is not None:
        language = language_named(lang_arg)
        if language is None:
            raise QueryError("BadValue", f'unsupported language: "{lang_arg}" for $language')
    return TextArgs(
        search,
        language,
        bool(arg.get("$caseSensitive", False)),
        bool(arg.get("$diacriticSensitive", False)),
    )


def _parse_search(search: str, language: str, case: bool, diacritic: bool) -> TextQuery:
    """MongoDB's reading of `$search`: words are OR'd; `"..."` is a phrase (its words are terms
    too); `-word` (a `-` after a delimiter or at the start) negates a word, `-"..."` a phrase."""
    positive: list[str] = []
    negated: set[str] = set()
    phrases: list[str] = []
    negated_phrases: list[str] = []
    english = language == "english"
    i, n = 0, len(search)
    while i < n:
        c = search[i]
        negate = c == "-" and (i == 0 or not _is_word_char(search[i - 1], english)) and i + 1 < n
        if negate:
            i += 1
            c = search[i]
        if c == '"':
            end = search.find('"', i + 1)
            end = n if end < 0 else end
            phrase = search[i + 1 : end]
            if negate:
                negated_phrases.append(phrase)
            else:
                phrases.append(phrase)
                positive.extend(terms(phrase, language, case, diacritic))
            i = end + 1
            continue
        if not _is_word_char(c, english):
            i += 1
            continue
        j = i
        while j < n and _is_word_char(search[j], english):
            j += 1
        found = terms(search[i:j], language, case, diacritic)
        (negated.update if negate else positive.extend)(found)
        i = j
    folded = positive
    if case or diacritic:
        folded = _parse_search(search, language, False, False).positive  # type: ignore[assignment]
    return TextQuery(
        search,
        language,
        case,
        diacritic,
        tuple(dict.fromkeys(positive)),
        frozenset(negated),
        tuple(phrases),
        tuple(negated_phrases),
        tuple(dict.fromkeys(folded)),
    )


# -- what an index reads of a document --------------------------------------------------------------


@dataclass(frozen=True)
class TextSpec:
    """A text index's reading of documents: each field's weight (or every string field, `$**`),
    the default language, the field that overrides it per (sub)document, and the key fields
    before and after the text key (compound text indexes)."""

    weights: tuple[tuple[str, float], ...]
    wildcard: bool
    default_language: str
    language_override: str
    prefix: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ()

    @functools.cached_property
    def _weights(self) -> dict[str, float]:
        return dict(self.weights)

    @functools.cached_property
    def _prefixes(self) -> frozenset[str]:
        """The paths leading to a weighted field (what the walk descends into)."""
        out: set[str] = set()
        for path, _ in self.weights:
            parts = path.split(".")
            out.update(".".join(parts[:k]) for k in range(1, len(parts)))
        return frozenset(out)

    def strings(self, doc: Mapping[str, Any]) -> Iterator[tuple[str, float, str]]:
        """(string, weight, language) for every string the index reads in the document."""
        language = self._language(doc, self.default_language)
        yield from self._walk(doc, "", language)

    def _language(self, doc: Mapping[str, Any], current: str) -> str:
        value = doc.get(self.language_override)
        if value is None and self.language_override not in doc:
            return current
        if not isinstance(value, str):
            raise QueryError(
                "Location17261", "found language override field in document with non-string type"
            )
        named = language_named(value)
        if named is None:
            raise QueryError("Location17262", f"language override unsupported: {value}")
        return named

    def _walk(
        self, doc: Mapping[str, Any], base: str, language: str
    ) -> Iterator[tuple[str, float, str]]:
        for key, value in doc.items():
            path = f"{base}{key}"
            yield from self._value(path, value, language)

    def _value(self, path: str, value: Any, language: str) -> Iterator[tuple[str, float, str]]:
        weight = self._weights.get(path)
        if isinstance(value, list):
            for element in value:
                yield from self._value(path, element, language)
        elif isinstance(value, str):
            if weight is not None:
                yield value, weight, language
            elif self.wildcard:
                yield value, 1.0, language
        elif isinstance(value, Mapping) and (self.wildcard or path in self._prefixes):
            yield from self._walk(value, path + ".", self._language(value, language))

    def term_scores(
        self, doc: Mapping[str, Any], case: bool = False, diacritic: bool = False
    ) -> dict[str, float]:
        """Each term of the document with its score: per string, weight x frequency (a repeat
        counts half the one before: 1 + 1/2 + 1/4 ...) x (0.5 + 0.5 x the term's share of the
        string's terms), x 1.1 when the string is that one word; summed over the strings (MongoDB's
        formula for textIndexVersion 2 and 3)."""
        scores: dict[str, float] = {}
        for text, weight, language in self.strings(doc):
            found = terms(text, language, case, diacritic)
            if not found:
                continue
            counts: dict[str, int] = {}
            freqs: dict[str, float] = {}
            for term in found:
                k = counts.get(term, 0)
                counts[term] = k + 1
                freqs[term] = freqs.get(term, 0.0) + 1.0 / (2**k)
            for term, count in counts.items():
                coeff = 0.5 * count / len(found) + 0.5
                exact = 1.1 if len(text) == len(term) and text.lower() == term.lower() else 1.0
                scores[term] = scores.get(term, 0.0) + weight * freqs[term] * coeff * exact
        return scores

    def matches(self, query: TextQuery, doc: Mapping[str, Any]) -> bool:
        """Whether the document matches the search: one of its terms (none if it has none), none
        of its negated terms, every phrase and no negated phrase, under its case and diacritic
        sensitivity."""
        if not query.positive:
            return False
        found = self.term_scores(doc, query.case_sensitive, query.diacritic_sensitive)
        if not any(t in found for t in query.positive):
            return False
        if any(t in found for t in query.negated):
            return False
        if query.phrases or query.negated_phrases:
            texts = [
                fold(s, query.case_sensitive, query.diacritic_sensitive)
                for s, _, _ in self.strings(doc)
            ]
            for phrase in query.phrases:
                p = fold(phrase, query.case_sensitive, query.diacritic_sensitive)
                if not any(p in t for t in texts):
                    return False
            for phrase in query.negated_phrases:
                p = fold(phrase, query.case_sensitive, query.diacritic_sensitive)
                if any(p in t for t in texts):
                    return False
        return True

    def score(self, query: TextQuery, doc: Mapping[str, Any]) -> float:
        """The document's text score for the search: the scores of the search's terms in it."""
        found = self.term_scores(doc)
        return sum(found.get(t, 0.0) for t in query.index_terms)


class TextBinding:
    """Where a parsed `$text` finds the collection's text index: the filter is parsed without
    the collection (as MongoDB's is, before its planner runs), and the planner binds the index it
    finds here, once, before any document is matched (storage/indexes/planner.py). Unbound, matching
    raises IndexNotFound, MongoDB's error for a collection without a text index."""

    __slots__ = ("args", "spec", "query")

    def __init__(self, args: TextArgs) -> None:
        self.args = args
        self.spec: TextSpec | None = None
        self.query: TextQuery | None = None

    def bind(self, spec: TextSpec) -> TextQuery:
        if self.spec != spec or self.query is None:
            self.spec, self.query = spec, self.args.query(spec.default_language)
        return self.query

    def _bound(self) -> tuple[TextSpec, TextQuery]:
        if self.spec is None or self.query is None:
            raise QueryError("IndexNotFound", "text index required for $text query")
        return self.spec, self.query

    def matches(self, doc: Mapping[str, Any]) -> bool:
        spec, query = self._bound()
        return spec.matches(query, doc)

    def score(self, doc: Mapping[str, Any]) -> float:
        spec, query = self._bound()
        return spec.score(query, doc)


__all__ = [
    "DEFAULT_LANGUAGE",
    "DEFAULT_LANGUAGE_OVERRIDE",
    "LANGUAGES",
    "TEXT_INDEX_VERSION",
    "WILDCARD",
    "TextArgs",
    "TextBinding",
    "TextQuery",
    "TextSpec",
    "fold",
    "language_named",
    "parse_text",
    "terms",
    "tokens",
]
