"""Stages that keep or drop documents (and, for $redact, parts of them): $match, by the query
engine's matcher, and $redact, by an expression's verdict.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, Variables, error
from ebbdb.storage.query.expressions import Expression, compile_expression
from ebbdb.storage.query.geo_match import NEAR_REFUSED, near_leaves
from ebbdb.storage.query.match import ParsedFilter, compile_filter, parse_filter
from ebbdb.storage.query.match_tree import conditions, text_nodes, uses_expr
from ebbdb.storage.query.projection import render_value as render

# $redact's system variables and the values they stand for.
_REDACT_VARIABLES = {"DESCEND": "descend", "PRUNE": "prune", "KEEP": "keep"}


# -- $match ------------------------------------------------------------------------------------------


class Match(Stage, name="$match"):
    """The filter, parsed once. With $expr its predicate depends on the run's variables, so it is
    rebuilt per run (`dynamic`); the parse at pipeline parse time reports a malformed filter then,
    as MongoDB does."""

    parsed: ParsedFilter
    dynamic: bool

    @classmethod
    def of(cls, flt: dict[str, Any], defined: frozenset[str] = frozenset()) -> Match:
        parsed = parse_filter(flt, dict.fromkeys(defined), javascript=False)
        if near_leaves(parsed.tree):
            # Proximity sorts: only find (and $geoNear) can, never a pipeline's $match.
            raise error(5626500, NEAR_REFUSED)
        return cls(parsed, uses_expr(parsed.tree))

    @property
    def filter(self) -> Mapping[str, Any]:
        return self.parsed.filter

    @property
    def has_text(self) -> bool:
        return bool(text_nodes(self.parsed.tree))

    def expr_part(self, defined: frozenset[str]) -> Match:
        """The $match of only this one's top-level conditions that use $expr (what is left to do
        after a read that did the others)."""
        kept = {k: v for k, v, node in conditions(self.parsed) if uses_expr(node)}
        return Match.of(kept, defined)

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        if ctx.collation is not None:
            flt, c = self.parsed.filter, ctx.collation
            predicate = parse_filter(flt, ctx.variables, collation=c).predicate
        elif self.dynamic:
            predicate = compile_filter(self.parsed.filter, ctx.variables)
        else:
            predicate = self.parsed.predicate
        return (d for d in docs if predicate(d))


@STAGES.stage("$match", document=(15959, "the match filter must be an expression in an object"))
def _parse_match(spec: Any, defined: frozenset[str]) -> Stage:
    return Match.of(dict(spec), defined)


# -- $redact -----------------------------------------------------------------------------------------


class _Redact(Stage, name="$redact"):
    expr: Expression

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        variables = {**ctx.variables, **_REDACT_VARIABLES}
        for doc in docs:
            out = self._redact(doc, variables)
            if out is not None:
                yield out

    def _redact(self, doc: Doc, variables: Variables) -> Doc | None:
        # TODO: $$ROOT below the top level is the sub-document here, not the whole document (the
        # expression interface has one document argument for both).
        verdict = self.expr(doc, variables)
        if isinstance(verdict, str) and verdict == "keep":
            return doc
        if isinstance(verdict, str) and verdict == "prune":
            return None
        if not (isinstance(verdict, str) and verdict == "descend"):
            raise error(
                17053,
                "$redact's expression should not return anything aside from the variables $$KEEP,"
                f" $$DESCEND, and $$PRUNE, but returned {render(verdict)}",
            )
        out: Doc = {}
        for key, value in doc.items():
            if isinstance(value, dict):
                sub = self._redact(value, variables)
                if sub is not None:
                    out[key] = sub
            elif isinstance(value, list):
                out[key] = self._redact_list(value, variables)
            else:
                out[key] = value
        return out

    def _redact_list(self, values: list[Any], variables: Variables) -> list[Any]:
        out: list[Any] = []
        for value in values:
            if isinstance(value, dict):
                sub = self._redact(value, variables)
                if sub is not None:
                    out.append(sub)
            elif isinstance(value, list):
                out.append(self._redact_list(value, variables))
            else:
                out.append(value)
        return out


@STAGES.stage("$redact")
def _parse_redact(spec: Any, defined: frozenset[str]) -> Stage:
    return _Redact(compile_expression(spec, defined | frozenset(_REDACT_VARIABLES)))
