"""Glob patterns over ``STORE/PATH`` strings: ``*``, ``?``, ``[...]`` and ``**``. Pure."""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a glob: ``*`` and ``?`` stay inside one component, ``**`` spans any
    number of components (``a/**/b`` matches ``a/b`` and ``a/x/y/b``), a pattern
    naming a directory (``notes`` or ``notes/``) matches everything below it."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    # A pattern that names a directory lists what is below it.
    return re.compile("".join(out).rstrip("/") + "(?:/.*)?\\Z", re.DOTALL)


def literal_store(pattern: str) -> str | None:
    """The store a pattern is limited to, when its first component has no wildcard."""
    first = pattern.split("/", 1)[0]
    return None if any(ch in first for ch in "*?[") else first
