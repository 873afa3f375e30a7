"""The collection options of schema validation and of change stream images, as create and collMod
take them: types and values checked as MongoDB's IDL checks them, the validator parsed (refused
with MongoDB's codes), and what the catalog stores."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import Kind, OneOf, arg
from ebbdb.server.errors import ErrorCode
from ebbdb.storage.catalog.schema import VALIDATION_ACTIONS, VALIDATION_LEVELS, parse_validator


@dataclass(frozen=True)
class ChangeStreamImages:
    """`changeStreamPreAndPostImages: {enabled: <bool>}`."""

    enabled: bool = arg("enabled", Kind.STRICT_BOOL, required=True)


def enumeration(command: str, field: str, values: tuple[str, ...]) -> OneOf:
    """MongoDB's IDL refusal of a value its enumeration does not name (2 BadValue)."""
    return OneOf(
        values,
        f"Enumeration value '{{value}}' for field '{command}.{field}' is not a valid value.",
        ErrorCode.BadValue,
    )


def level_check(command: str) -> OneOf:
    return enumeration(command, "validationLevel", VALIDATION_LEVELS)


def action_check(command: str) -> OneOf:
    return enumeration(command, "validationAction", VALIDATION_ACTIONS)


def schema_options(
    validator: Mapping[str, Any] | None,
    level: str | None,
    action: str | None,
    images: ChangeStreamImages | None,
) -> dict[str, Any]:
    """The options to store for what the command gave (None: the option goes, as an empty
    validator and disabled images are not shown by listCollections). Raises QueryError for a
    validator MongoDB refuses."""
    out: dict[str, Any] = {}
    if validator is not None:
        parse_validator(validator)
        out["validator"] = dict(validator) if validator else None
    if level is not None:
        out["validationLevel"] = level
    if action is not None:
        out["validationAction"] = action
    if images is not None:
        out["changeStreamPreAndPostImages"] = {"enabled": True} if images.enabled else None
    return out
