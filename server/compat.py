"""README's generated sections, made from the registries so that they cannot drift from the code:
the compatibility table (commands, aggregation stages, query, update and expression operators,
$group accumulators, index key types and options) and the server parameter table.

Run this module with `python -m`: with no argument it prints the sections; `--write README.md`
replaces README's copies (each between its two marker comments); `--check README.md` exits with
status 1 when a copy is stale. tests/test_compat_table.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ebbdb.server.parameters import PARAMETERS
from ebbdb.server.registry import REGISTRY
from ebbdb.server.version import FEATURE_COMPATIBILITY_VERSION
from ebbdb.storage.aggregate.stage import STAGES
from ebbdb.storage.indexes import specs as indexes
from ebbdb.storage.indexes.index_kinds import kinds as index_kinds
from ebbdb.storage.query.expressions import objects as expression_objects
from ebbdb.storage.query.expressions.accumulators import ACCUMULATORS
from ebbdb.storage.query.expressions.core import OPERATORS as EXPRESSION_OPERATORS
from ebbdb.storage.query.match import FIELD_OPERATORS, TOP_LEVEL_OPERATORS
from ebbdb.storage.query.update_parse import UPDATE_OPERATORS

#: What each server parameter accepts: (kind, low, high), kind "integer", "number" or "boolean";
#: `high` None for no upper bound. tests/test_compat_table.py probes each parameter's validator
#: at these bounds, so the words cannot drift from the code.
PARAMETER_VALUES: dict[str, tuple[str, float | None, float | None]] = {
    "allowDiskUseByDefault": ("boolean", None, None),
    "internalDocumentSourceGroupMaxMemoryBytes": ("integer", 1, None),
    "internalQueryMaxBlockingSortMemoryUsageBytes": ("integer", 1, None),
    "internalLookupStageIntermediateDocumentMaxSizeBytes": ("integer", 1, None),
    "internalDocumentSourceSetWindowFieldsMaxMemoryBytes": ("integer", 1, None),
    "internalQueryMaxAllowedDensifyDocs": ("integer", 1, 2_147_483_647),
    "internalDocumentSourceDensifyMaxMemoryBytes": ("integer", 1, 2_147_483_647),
    "cursorTimeoutMillis": ("integer", 1, None),
    "ebbdbExpressPath": ("boolean", None, None),
    "ebbdbMaxTrackedMemoryBytes": ("integer", 0, None),
    "enableTestCommands": ("boolean", None, None),
    "incomingMessageTimeoutSecs": ("number", 0.1, 86_400),
    "journalCommitInterval": ("integer", 1, 500),
    "localLogicalSessionTimeoutMinutes": ("integer", 1, None),
    "logicalSessionRefreshMillis": ("integer", 1, None),
    "syncdelay": ("number", 0, 9_999_999),
    "transactionLifetimeLimitSeconds": ("integer", 1, None),
    "ttlMonitorEnabled": ("boolean", None, None),
    "ttlMonitorSleepSecs": ("integer", 1, None),
}

#: Defaults that depend on the machine, as the table words them.
PARAMETER_DEFAULTS_SHOWN: dict[str, str] = {
    "ebbdbMaxTrackedMemoryBytes": "half the machine's memory, at least 268435456",
}

#: What each server parameter does, for the table.
PARAMETER_NOTES: dict[str, str] = {
    "allowDiskUseByDefault": "a find or aggregate that does not give `allowDiskUse` may spill "
    "blocking sorts and groups to disk (see Limits)",
    "internalDocumentSourceGroupMaxMemoryBytes": "bytes the groups of a `$group` (and "
    "`$bucket`, `$sortByCount`) may hold before spilling to disk, or failing with 292 without "
    "disk use (see Limits)",
    "internalLookupStageIntermediateDocumentMaxSizeBytes": "bytes the `$lookup` results of one "
    "document may take (as mongod measures values), past which 4568; MongoDB Atlas's value, "
    "as results past it could not be returned in one document (a self-managed mongod's default "
    "is 104857600)",
    "internalDocumentSourceSetWindowFieldsMaxMemoryBytes": "bytes one `$setWindowFields` "
    "partition may hold; past it, without disk use, 5414201 (with disk use ebbdb goes on "
    "holding it, counted against `ebbdbMaxTrackedMemoryBytes`: it does not spill windows)",
    "internalQueryMaxAllowedDensifyDocs": "documents one `$densify` may generate (those it "
    "passes through do not count); the one past them fails with 5897900, naming this limit",
    "internalDocumentSourceDensifyMaxMemoryBytes": "bytes a `$densify` may hold of its "
    "partitions' state (every partition's at once for `full` bounds, the current one's "
    "otherwise); past it, 6007200 (`$densify` does not spill)",
    "internalQueryMaxBlockingSortMemoryUsageBytes": "bytes a blocking sort (find, `$sort`) "
    "may hold before spilling to disk, or failing with 292 without disk use (see Limits)",
    "cursorTimeoutMillis": "an idle cursor is closed after this many milliseconds",
    "ebbdbExpressPath": "ebbdb's own: one-document commands (an insert of one document; "
    "find, update, delete and findAndModify by `_id` alone; getMore) skip the general "
    "machinery they cannot need; false sends every request down the general path, which "
    "answers byte for byte the same",
    "ebbdbMaxTrackedMemoryBytes": "ebbdb's own: bytes all operations' stages (sorts, groups, "
    "accumulators, `$lookup` results, `$facet` inputs, windows) may hold together, counted as "
    "Python holds them; past it the operation asking for more fails with 146 "
    "`ExceededMemoryLimit` and the others go on (0: no cap; serverStatus `ebbdb.memory` shows "
    "what is held)",
    "enableTestCommands": "the `ttlClock` and `ttlMonitorPass` commands exist (see Time to "
    "live), and the test commands of fail points and sessions, and `resetTestState` (what the "
    "pytest plugin sends before each test)",
    "incomingMessageTimeoutSecs": "ebbdb's own: a client's message must arrive whole within "
    "this many seconds of its first byte, or the connection is closed (slow or truncated "
    "messages cannot hold memory for ever)",
    "journalCommitInterval": "commits are synced to disk at least this often, in milliseconds "
    "(see Durability)",
    "localLogicalSessionTimeoutMinutes": "a logical session unused this many minutes ends with "
    "its cursors and transaction; hello's `logicalSessionTimeoutMinutes` and the TTL index of "
    "`config.system.sessions` follow it (see Transactions and change streams)",
    "logicalSessionRefreshMillis": "how often sessions in use are written to "
    "`config.system.sessions`, ended ones removed and idle ones timed out",
    "syncdelay": "mongod's flush interval in seconds, also `--syncdelay`: the background sync "
    "runs every `journalCommitInterval`, or this if shorter (0: no bound of its own)",
    "transactionLifetimeLimitSeconds": "a multi-document transaction (replica-set mode) open "
    "longer than this many seconds is aborted",
    "ttlMonitorEnabled": "while false, no TTL pass runs (reads still hide expired documents)",
    "ttlMonitorSleepSecs": "seconds between TTL passes; a new value wakes the monitor at once",
}

#: Notes on index options, by option name (each must be an option storage/indexes/specs.py accepts).
_INDEX_OPTION_NOTES = {
    "collation": "ICU collations (see Collation); the collection's default when none is given",
    "expireAfterSeconds": "TTL, both models",
}

_NOT_YET = "not yet (238 `NotImplemented`)"

#: Stages the aggregate command runs itself when they open a pipeline (server/commands/aggregate.py
#: turns them into the documents they list), which the storage registry knows only by position.
SERVER_STAGES = ("$currentOp", "$listLocalSessions", "$listSessions")


# -- rendering ----------------------------------------------------------------------------------------


def _text(s: str) -> str:
    """Docstring text as a table cell: one line, `|` escaped, and outside `code` the characters
    Markdown would read as emphasis."""
    parts = " ".join(s.split()).split("`")
    for i, part in enumerate(parts):
        for ch in ("\\", "*", "_", "|") if i % 2 == 0 else ("|",):
            part = part.replace(ch, "\\" + ch)
        parts[i] = part
    return "`".join(parts)


def _names(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in sorted(names, key=lambda n: (n.lower(), n))) or "-"


def _split(table: dict[str, bool]) -> tuple[list[str], list[str]]:
    return [n for n, runs in table.items() if runs], [n for n, runs in table.items() if not runs]


def commands_table() -> str:
    rows = [
        "| command | also | database | what it does |",
        "| --- | --- | --- | --- |",
    ]
    for cmd in REGISTRY.commands():
        where = "any"
        if cmd.admin_only:
            where = "`admin`"
        if cmd.test_only:
            where += ", test only"
        summary = cmd.help.split("\n\n")[0]
        aliases = ", ".join(f"`{a}`" for a in cmd.aliases)
        rows.append(f"| `{cmd.name}` | {aliases} | {where} | {_text(summary)} |")
    return "\n".join(rows)


def language_table() -> str:
    stages = {kind.name: kind.parser is not None for kind in STAGES.kinds()}
    stages.update(dict.fromkeys(SERVER_STAGES, True))
    expressions = {
        name: name not in expression_objects.UNSUPPORTED for name in EXPRESSION_OPERATORS
    }
    for name in expression_objects.UNSUPPORTED:
        assert name in EXPRESSION_OPERATORS, name
    for option in _INDEX_OPTION_NOTES:
        assert option in indexes.OPTIONS, option
    options = [
        f"`{o}` ({_INDEX_OPTION_NOTES[o]})" if o in _INDEX_OPTION_NOTES else f"`{o}`"
        for o in sorted(indexes.OPTIONS, key=str.lower)
    ]
    rows: list[tuple[str, list[str], list[str], str, str]] = []

    def family(title: str, table: dict[str, bool], runs_note: str = "", not_note: str = "") -> None:
        runs, not_yet = _split(table)
        rows.append((title, runs, not_yet, runs_note, not_note))

    family("Aggregation stages", stages)
    family("Query operators on a field", FIELD_OPERATORS)
    family("Top-level query operators", TOP_LEVEL_OPERATORS)
    family(
        "Update operators",
        dict.fromkeys(UPDATE_OPERATORS, True),
        "; `$push` with `$each`, `$slice`, `$sort`, `$position`; `$addToSet` with `$each`; "
        "positional `$`, `$[]` and `$[<identifier>]` with `arrayFilters`; pipeline-style "
        "updates (`$set`/`$addFields`, `$project`, `$unset`, `$replaceRoot`/`$replaceWith`, with "
        "`let` and a statement's `c`)",
    )
    family("Expression operators", expressions)
    family("`$group` accumulators", dict.fromkeys(ACCUMULATORS, True))
    out = [f"| | ebbdb runs | {_NOT_YET} |", "| --- | --- | --- |"]
    for title, runs, not_yet, runs_note, not_note in rows:
        count = f"{len(runs)} of {len(runs) + len(not_yet)}" if not_yet else f"all {len(runs)}"
        missing = "; ".join(x for x in (_names(not_yet) if not_yet else "", not_note) if x)
        out.append(f"| {title} ({count}) | {_names(runs)}{runs_note} | {missing or '-'} |")
    kinds = index_kinds.registered()
    # A wildcard index is named by its `$**` key, not by a type string.
    shown = sorted(("`$**` (wildcard)" if k == "wildcard" else f"`{k}`") for k in kinds)
    not_yet = [*indexes.UNSUPPORTED_TYPES, *(() if "wildcard" in kinds else ("$**",))]
    out.append(
        f"| Index key types | `1` and `-1` (any positive or negative number): single-field, "
        f"compound, multikey; {', '.join(shown) + '; ' if shown else ''}up to "
        f"{indexes.MAX_INDEXES} indexes per collection, `_id_` included | {_names(not_yet)} |"
    )
    out.append(f"| Index options | {', '.join(options)} | - |")
    return "\n".join(out)


def compatibility() -> str:
    return "\n\n".join(
        [
            "#### Commands",
            commands_table(),
            "#### Query language and indexes",
            language_table(),
        ]
    )


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _range(kind: str, low: float | None, high: float | None) -> str:
    if kind == "boolean" or low is None:
        return "boolean"
    if high is None:
        return f"{kind} ≥ {low:,}"
    return f"{kind}, {low:,} to {high:,}"


def parameters() -> str:
    rows = [
        "| parameter | default | values | set at runtime | what it does |",
        "| --- | --- | --- | --- | --- |",
        f'| `featureCompatibilityVersion` | `{{version: "{FEATURE_COMPATIBILITY_VERSION}"}}` '
        "| - | no (read only) | the MongoDB feature set ebbdb speaks as (getParameter only) |",
    ]
    for name in sorted(PARAMETERS):
        p = PARAMETERS[name]
        if name not in PARAMETER_VALUES or name not in PARAMETER_NOTES:
            raise KeyError(f"server parameter {name!r} needs an entry in server/compat.py")
        runtime = "yes" if p.runtime else "no (start only)"
        shown = PARAMETER_DEFAULTS_SHOWN.get(name) or f"`{_value(p.default)}`"
        rows.append(
            f"| `{name}` | {shown} | {_range(*PARAMETER_VALUES[name])} | {runtime} "
            f"| {PARAMETER_NOTES[name]} |"
        )
    return "\n".join(rows)


#: Each generated section of README, by the name its markers carry.
SECTIONS: dict[str, Callable[[], str]] = {
    "compatibility": compatibility,
    "parameters": parameters,
}


def markers(name: str) -> tuple[str, str]:
    note = "generated from the registries: edit the code, then run server/compat.py with --write"
    return f"<!-- {name} begin: {note} -->", f"<!-- {name} end -->"


def replace(readme: str) -> str:
    """README's text with every generated section made afresh. Raises ValueError when a
    section's markers are missing."""
    for name, render in SECTIONS.items():
        begin, end = markers(name)
        head, found, rest = readme.partition(begin + "\n")
        _, found_end, tail = rest.partition(end)
        if not (found and found_end):
            raise ValueError(f"README has no {begin!r} ... {end!r} section")
        readme = f"{head}{begin}\n{render()}\n{end}{tail}"
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", metavar="README", help="update README's generated sections")
    what.add_argument("--check", metavar="README", help="exit 1 if they are stale")
    args = parser.parse_args(argv)
    if args.write is None and args.check is None:
        for name, render in SECTIONS.items():
            begin, end = markers(name)
            print(f"{begin}\n{render()}\n{end}\n")
        return 0
    path = Path(args.write or args.check)
    text = path.read_text(encoding="utf-8")
    fresh = replace(text)
    if args.write is not None:
        if fresh != text:
            path.write_text(fresh, encoding="utf-8")
        return 0
    if fresh != text:
        print(f"{path}: the generated sections are stale; run with --write {path}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
