"""Projection: inclusion or exclusion of (dotted) fields, with MongoDB's `_id` rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage.errors import QueryError

# A projection tree: field -> subtree, or True at a leaf.
_Tree = dict[str, Any]


@dataclass(frozen=True)
class Projection:
    inclusion: bool
    tree: _Tree
    include_id: bool

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any]
        if self.inclusion:
            out = _include(doc, self.tree)
            if self.include_id and "_id" in doc and "_id" not in self.tree:
                out = {"_id": doc["_id"], **out}
            return out
        out = _exclude(doc, self.tree)
        if not self.include_id:
            out.pop("_id", None)
        return out


def _truthy(value: Any) -> bool | None:
    """1/true include, 0/false exclude; None for anything that is not a plain flag."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    return None


def parse_projection(spec: dict[str, Any] | None) -> Projection | None:
    """Parse a projection document; None means "whole documents". Raises QueryError."""
    if not spec:
        return None
    include_id = True
    inclusion: bool | None = None
    tree: _Tree = {}
    for path, value in spec.items():
        flag = _truthy(value)
        if flag is None:
            if isinstance(value, dict) and value and next(iter(value)).startswith("$"):
                op = next(iter(value))
                raise QueryError("NotImplemented", f"projection operator {op} is not supported yet")
            if isinstance(value, dict):
                raise QueryError(
                    "BadValue",
                    "An empty sub-projection is not a valid value. Found empty object at path",
                )
            raise QueryError("BadValue", f"projection value for {path} must be a number or bool")
        if path.startswith("$"):
            raise QueryError(
                "BadValue",
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            )
        if path == "_id":
            include_id = flag
            if flag:
                tree_set(tree, path)
            continue
        if inclusion is None:
            inclusion = flag
        elif inclusion != flag:
            if inclusion:
                raise QueryError(
                    "Location31254", f"Cannot do exclusion on field {path} in inclusion projection"
                )
            raise QueryError(
                "Location31253", f"Cannot do inclusion on field {path} in exclusion projection"
            )
        tree_set(tree, path)
    if inclusion is None:
        # Only _id was named: {_id: 0} excludes it, {_id: 1} includes only it.
        if include_id:
            return Projection(True, {"_id": True}, True)
        return Projection(False, {}, False)
    if not inclusion:
        tree.pop("_id", None)
    return Projection(inclusion, tree, include_id)


def tree_set(tree: _Tree, path: str) -> None:
    parts = path.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if child is True:
            return  # a parent is already named whole
        node = node.setdefault(part, {})
    node[parts[-1]] = True


def _include(value: Any, tree: _Tree) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            sub = tree.get(k)
            if sub is True:
                out[k] = v
            elif sub is not None:
                if isinstance(v, (dict, list)):
                    out[k] = _include(v, sub)
        return out
    if isinstance(value, list):
        return [_include(e, tree) for e in value if isinstance(e, (dict, list))]
    return value


def _exclude(value: Any, tree: _Tree) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            sub = tree.get(k)
            if sub is True:
                continue
            out[k] = _exclude(v, sub) if sub is not None else v
        return out
    if isinstance(value, list):
        return [_exclude(e, tree) if isinstance(e, (dict, list)) else e for e in value]
    return value
