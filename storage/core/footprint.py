"""What CPython holds for a value, in bytes: the count memory trackers charge (storage/core/memory.py).

Not MongoDB's Value::getApproximateSize (limits.py's `approximate_size`), which counts what a
value would take in mongod: a decoded document here costs its dict, its own key strings (the BSON
decoder makes new ones for every document), and an object for every value that is not a singleton.
The figures are sys.getsizeof's, which include the garbage collector's header; a container seen
twice (a value built by doubling) counts once, as it is held once.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping
from typing import Any

from bson import Decimal128, Int64, ObjectId, Timestamp

_getsizeof = sys.getsizeof

#: Values of a fixed size: ints are mostly past the small cached ones; True, False and None are
#: singletons; an ObjectId holds a 12-byte bytes object besides itself.
_FIXED: dict[type, int] = {
    int: 28,
    float: 24,
    bool: 0,
    type(None): 0,
    Int64: 44,
    datetime.datetime: 48,
    ObjectId: _getsizeof(ObjectId()) + _getsizeof(b"x" * 12),
    Decimal128: _getsizeof(Decimal128("1")) + _getsizeof(b"x" * 16),
    Timestamp: _getsizeof(Timestamp(0, 0)) + 56,
}

_CONTAINERS = (Mapping, list, tuple)
#: The containers a value holds when it is not flat (other Mappings are rare: walked as well).
_CONTAINER_TYPES = frozenset((dict, list, tuple))

#: What holding one more item costs a list (its slot), or a dict (its entry and index, amortised).
LIST_SLOT = 8
DICT_ENTRY = 32


def footprint(value: Any, cap: int = sys.maxsize) -> int:
    """The bytes CPython holds for `value` and what it refers to. Stops walking once past `cap`
    (a value built to be huge costs little to measure)."""
    t = type(value)
    size = _FIXED.get(t)
    if size is not None:
        return size
    if t is str or t is bytes:
        return _getsizeof(value)
    if t is dict:
        values = value.values()
        if _CONTAINER_TYPES.isdisjoint(map(type, values)):
            # The common case, a flat document, measured in C-level passes: getsizeof is about
            # right for every scalar (it counts True, False and None, which are shared, and
            # leaves out an ObjectId's 12 bytes: a few dozen bytes either way).
            return _getsizeof(value) + sum(map(_getsizeof, value)) + sum(map(_getsizeof, values))
    elif t is list or t is tuple:
        if _CONTAINER_TYPES.isdisjoint(map(type, value)):
            return _getsizeof(value) + sum(map(_getsizeof, value))
    elif not isinstance(value, _CONTAINERS):
        return _getsizeof(value)
    total = 0
    seen: set[int] = set()
    stack = [value]
    while stack:
        container = stack.pop()
        if id(container) in seen:
            continue
        seen.add(id(container))
        if isinstance(container, Mapping):
            if type(container) is not dict:  # RawBSONDocument and the like: measured decoded
                container = dict(container)
            total += _getsizeof(container)
            for key in container:
                total += _getsizeof(key)
            items: Any = container.values()
        else:
            total += _getsizeof(container)
            items = container
        for item in items:
            ti = type(item)
            fixed = _FIXED.get(ti)
            if fixed is not None:
                total += fixed
            elif ti is str or ti is bytes:
                total += _getsizeof(item)
            elif ti is dict or ti is list or ti is tuple or isinstance(item, _CONTAINERS):
                stack.append(item)
            else:
                total += _getsizeof(item)
        if total > cap:
            break
    return total


def state_footprint(obj: Any, depth: int = 3) -> int:
    """What a state object (an accumulator) holds of its own: itself and the values of its slots
    and attributes, walked `depth` levels, leaving out what it only shares (functions and the
    compiled expressions they are)."""
    if depth == 0 or callable(obj):
        return 0
    t = type(obj)
    if t in _FIXED or t is str or t is bytes or isinstance(obj, _CONTAINERS):
        return footprint(obj)
    total = _getsizeof(obj)
    names: list[str] = []
    for cls in t.__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names.extend((slots,) if isinstance(slots, str) else slots)
    values = [getattr(obj, name, None) for name in names]
    values.extend(getattr(obj, "__dict__", {}).values())
    return total + sum(state_footprint(v, depth - 1) for v in values)


__all__ = ["DICT_ENTRY", "LIST_SLOT", "footprint", "state_footprint"]
