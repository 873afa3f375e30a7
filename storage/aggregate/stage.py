"""What every stage family shares: the Stage contract and the one registry the families register
their parsers in, and the context a stage runs with (how to read collections: Source and its Read).
The document-path helpers the stages use live in fields.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, dataclass_transform

from ebbdb.storage.aggregate.arguments import Arguments, Refusal, extract
from ebbdb.storage.core.collation import Collation
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.limits import MemoryLimits
from ebbdb.storage.core.values import type_name

Doc = dict[str, Any]
Variables = Mapping[str, Any]


def error(code: int, message: str) -> QueryError:
    """MongoDB's error for a numbered assertion (codeName `Location<code>`)."""
    return QueryError(f"Location{code}", message)


@dataclass(frozen=True)
class Read:
    """What the first read of a collection does for the stages: the documents matching `filter`, in
    `sort` order, after `skip`, at most `limit` (0: no limit). `empty` when the leading $skip and
    $limit leave nothing; such a read is never asked of a Source. `hint` (an index name or key
    pattern) picks the index of the pipeline's first read (the aggregate command's `hint`)."""

    filter: dict[str, Any] | None = None
    sort: dict[str, Any] | None = None
    skip: int = 0
    limit: int = 0
    empty: bool = False
    hint: Any = None


class Source(Protocol):
    """How stages read collections. `documents` yields what `read` selects of `collection` (nothing
    if it does not exist). Raises QueryError for a malformed filter or sort."""

    def documents(self, collection: str, read: Read) -> Iterator[Doc]: ...

    @property
    def limits(self) -> MemoryLimits:
        """The memory the operation's blocking stages may hold, and whether they may spill."""
        ...

    def view(self, collection: str) -> tuple[str, list[Mapping[str, Any]]] | None:
        """If `collection` is a view: the collection it reads and the stages in front of every
        read of it (None: not a view). Raises QueryError for a chain of views too deep."""
        ...


@dataclass(frozen=True)
class Context:
    """What a running stage may use: how to read collections, the variables in scope, and the
    collection the pipeline runs on (None for one that starts with $documents)."""

    source: Source
    variables: Variables
    collection: str | None = None
    #: The collation strings compare under in $match, $sort and grouping (None: simple).
    collation: Collation | None = None

    @property
    def limits(self) -> MemoryLimits:
        return self.source.limits


@dataclass_transform(frozen_default=True)
class Stage:
    """One parsed stage: `run` turns the stream of documents before it into the stream after it.

    A stage class names its stage and declares its parsed arguments as fields:
    `class Skip(Stage, name="$skip"): count: int` is a frozen dataclass whose `name` is "$skip"."""

    name: ClassVar[str] = ""
    #: The stage makes its own documents instead of reading the collection's ($documents,
    #: $collStats, $indexStats): it comes first, and nothing is read for it.
    makes_input: ClassVar[bool] = False

    def __init_subclass__(cls, name: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name
        dataclass(frozen=True)(cls)

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        raise NotImplementedError


# -- the registry ------------------------------------------------------------------------------------

#: A stage's parser: its argument and the user variables in scope -> the parsed stage; raises
#: QueryError with MongoDB's code for a malformed argument.
Parser = Callable[[Any, frozenset[str]], Stage]
_P = TypeVar("_P", bound=Parser)


@dataclass(frozen=True)
class Placement:
    """Where MongoDB allows a stage (its position rules)."""

    first: bool = False  # only as the first stage
    last: bool = False  # only as the last stage
    in_facet: bool = True  # allowed within $facet
    in_subpipeline: bool = True  # allowed within $lookup's and $unionWith's pipelines
    #: MongoDB's own error for a `first` stage elsewhere (None: 40602's).
    not_first: tuple[int, str] | None = None


ANYWHERE = Placement()


@dataclass(frozen=True)
class StageKind:
    """A stage name MongoDB knows, where it may stand, and its parser (None: ebbdb does not run it,
    which is reported once the pipeline's shape is known to be valid)."""

    name: str
    parser: Parser | None
    placement: Placement


class StageRegistry:
    """Stage name -> StageKind. Each family module registers its stages with `@STAGES.stage(name)`
    on their parsers, as the command modules register their handlers."""

    def __init__(self) -> None:
        self._kinds: dict[str, StageKind] = {}

    def stage(
        self,
        name: str,
        placement: Placement = ANYWHERE,
        document: tuple[int | str, str] | None = None,
        arguments: type[Arguments] | None = None,
    ) -> Callable[[_P], _P]:
        """Register the decorated parser for the stage `name`. With `document` (a code, or a
        codeName, and a message, in which "{type}" stands for the specification's BSON type), a
        specification that is not a document is that error before the parser sees it. With
        `arguments`, the parser is given the specification extracted into that class (which
        declares its rules, a document's included) instead of the specification."""

        def register(parser: _P) -> _P:
            run: Parser = parser
            if arguments is not None:
                run = _extracted(parser, name, arguments)
            if document is not None:
                run = _document_first(run, Refusal(*document))
            self._add(StageKind(name, run, placement))
            return parser

        return register

    def unsupported(self, placement: Placement, *names: str) -> None:
        """Declare stages MongoDB has and ebbdb does not run (NotImplemented)."""
        for name in names:
            self._add(StageKind(name, None, placement))

    def _add(self, kind: StageKind) -> None:
        if kind.name in self._kinds:
            raise ValueError(f"stage {kind.name!r} registered twice")
        self._kinds[kind.name] = kind

    def lookup(self, name: str) -> StageKind | None:
        return self._kinds.get(name)

    def kinds(self) -> list[StageKind]:
        return list(self._kinds.values())


def _document_first(parser: Parser, refusal: Refusal) -> Parser:
    def parse(spec: Any, defined: frozenset[str]) -> Stage:
        if not isinstance(spec, Mapping):
            raise refusal.error(type=type_name(spec))
        return parser(spec, defined)

    return parse


def _extracted(parser: Parser, name: str, arguments: type[Arguments]) -> Parser:
    def parse(spec: Any, defined: frozenset[str]) -> Stage:
        return parser(extract(arguments, name, spec, defined), defined)

    return parse


#: The one registry every stage family registers into.
STAGES = StageRegistry()
