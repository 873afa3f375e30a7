"""The collection options of schema validation and of change stream images, as create and collMod
take them: types and values checked as MongoDB's IDL checks them, the validator parsed (refused
with MongoDB's codes), and what the catalog stores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import Kind, OneOf, arg
from ebbdb.server.errors import ErrorCode
from ebbdb.storage.catalog.schema import VALIDATION_ACTIONS, VALIDATION_LEVELS, parse_validator


@dataclass(frozen=True)
class ChangeStreamImages:
    """`changeStreamPreAndPostImages: {enabled: <bool>}`."""

    enabled: bool = arg("enabled", Kind.STRICT_BOOL, required=True)


def enumerated(field: str, values: tuple[str, ...]) -> Any:
    """Declare a string field that MongoDB's IDL types as an enumeration of `values`: another
    string is refused (2 BadValue) in its words, which name the command's field."""
    message = f"Enumeration value '{{value}}' for field '{{command}}.{field}' is not a valid value."
    return arg(field, Kind.STRING, check=OneOf(values, message, ErrorCode.BadValue))


@dataclass(frozen=True)
class ValidationOptions:
    """create's and collMod's schema validation options, declared once: a field group
    (server/arguments.py `group`), read as each command's own fields."""

    validator: dict[str, Any] | None = arg("validator", Kind.DOC)
    level: str | None = enumerated("validationLevel", VALIDATION_LEVELS)
    action: str | None = enumerated("validationAction", VALIDATION_ACTIONS)


def schema_options(
    validation: ValidationOptions, images: ChangeStreamImages | None
) -> dict[str, Any]:
    """The options to store for what the command gave (None: the option goes, as an empty
    validator and disabled images are not shown by listCollections). Raises QueryError for a
    validator MongoDB refuses."""
    out: dict[str, Any] = {}
    validator = validation.validator
    if validator is not None:
        parse_validator(validator)
        out["validator"] = dict(validator) if validator else None
    if validation.level is not None:
        out["validationLevel"] = validation.level
    if validation.action is not None:
        out["validationAction"] = validation.action
    if images is not None:
        out["changeStreamPreAndPostImages"] = {"enabled": True} if images.enabled else None
    return out
