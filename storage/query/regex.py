"""Regular expressions: MongoDB speaks PCRE, ebbdb runs Python's `re`; this is the one place the
spellings that differ are translated (the matcher's $regex and the expressions' $regex* use it)."""

from __future__ import annotations


def pcre_to_python(pattern: str) -> str:
    """The few PCRE spellings Python's re lacks: named groups `(?<name>...)`, `\\z`, and PCRE's
    `\\Z` (end, or before a final newline)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            d = pattern[i + 1]
            if not in_class and d == "z":
                out.append("\\Z")
            elif not in_class and d == "Z":
                out.append("(?=\\n?\\Z)")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            # A ']' first in a class (after an optional '^') is a literal.
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):
                out.append("]")
                i += 1
            continue
        elif pattern.startswith("(?<", i) and i + 3 < n and pattern[i + 3] not in "=!":
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)
