"""Validation of user-supplied memory paths (``STORE/PATH``), free of I/O.

A name memfs takes is printable (`str.isprintable`): no control, format (bidirectional
overrides, zero-width characters), line or paragraph separator, private-use,
surrogate or unassigned character, and no space but the ASCII one. So no name can
start a line, hide a character or reorder text wherever it is shown.
"""

from __future__ import annotations

import functools
import os
import unicodedata
from dataclasses import dataclass

from memfs.store.errors import InvalidInput

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_DEPTH = 64
MOUNT_PREFIXES = ("/memory/",)
PRINTABLE = ("a name holds printable characters only (no control, format, line or paragraph "
             "separator, private-use or unassigned character)")


@dataclass(frozen=True, order=True)
class MemPath:
    """A validated path inside a store: ``parts`` are the components below the store."""

    store: str
    parts: tuple[str, ...]

    @functools.cached_property
    def rel(self) -> str:
        """The path below the store, ``a/b.md`` (kept: a change's landing asks often)."""
        return "/".join(self.parts)

    @functools.cached_property
    def encoded(self) -> bytes:
        """``rel`` as the bytes a system call takes (kept: the mount reuses its
        MemPaths for every open)."""
        return os.fsencode("/".join(self.parts))

    def __str__(self) -> str:
        return f"{self.store}/{self.rel}" if self.parts else self.store


def nameable(rel: str) -> bool:
    """Whether a name found on disk can be named in a request: printable throughout (a
    byte that is not UTF-8 arrives as a surrogate, which is not)."""
    return rel.isprintable()


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that a name may not hold, described
    (``U+2028 LINE SEPARATOR``), or None when it is printable throughout."""
    if text.isprintable():
        return None
    char = next(c for c in text if not c.isprintable())
    if unicodedata.category(char) == "Cs":  # how a byte that is not UTF-8 arrives
        return f"U+{ord(char):04X} (not valid UTF-8)"
    kind = unicodedata.name(char, "") or f"(category {unicodedata.category(char)})"
    return f"U+{ord(char):04X} {kind}"


def check_component(name: str) -> str:
    """Return ``name`` if it is a safe single path component, else raise InvalidInput."""
    if name in ("", ".", ".."):
        raise InvalidInput(f"bad path component {name!r}")
    bad = unprintable(name)
    if bad is not None:
        raise InvalidInput(f"path component {name!r} contains {bad}; {PRINTABLE}")
    if "/" in name:
        raise InvalidInput(f"path component {name!r} contains '/'")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidInput(f"path component is longer than {MAX_NAME_BYTES} bytes")
    return name


@functools.cache
def rel_path_pattern() -> str:
    """A JSON Schema pattern (ECMA-262, read alike by Python's re) of the paths below a
    store that `parse_path` takes: names of printable characters (the class is built
    from `str.isprintable` itself), none empty, ``.`` or ``..``, joined by ``/``. It
    counts characters where parse_path counts UTF-8 bytes: at most 63 a name (255
    bytes); with a maxLength of REL_PATH_CHARS (MAX_PATH_BYTES with the store), every
    path it takes fits. At most MAX_DEPTH - 1 names deep (a lookahead counting the
    '/': a bound around a bounded name would be unrolled past regex engines' size
    limits)."""
    any_char, no_dot = printable_class("/"), printable_class("/.")
    # a name: 1-63 characters, not "." or ".." (said without lookaheads, which test
    # generators cannot follow, and with no bound around a bounded name, which regex
    # engines unroll past their size limits: the depth is the description's)
    name = (f"(?:[{no_dot}][{any_char}]{{0,62}}|\\.[{no_dot}][{any_char}]{{0,61}}"
            f"|\\.\\.[{any_char}]{{1,61}})")
    return rf"^(?!(?:[^/]*/){{{MAX_DEPTH - 1}}}){name}(?:/{name})*$"


@functools.cache
def glob_pattern() -> str:
    """A JSON Schema pattern of the globs below a store the HTTP API takes (its
    ``glob`` parameter, checked there with this very pattern): names as
    `rel_path_pattern`'s (1-63 printable characters, not ``.`` or ``..``), which may
    hold the wildcards ``*``, ``?`` and ``[...]``, joined by ``/``; no bracket range
    (``[a-z]``: one reversed is refused, which no pattern can see)."""
    any_char, no_dot = printable_class("/"), printable_class("/.")
    name = (f"(?:[{no_dot}][{any_char}]{{0,62}}|\\.[{no_dot}][{any_char}]{{0,61}}"
            f"|\\.\\.[{any_char}]{{1,61}})")
    return rf"^(?!.*\[[!^]?\]?[^\]]*-){name}(?:/{name})*$"


@functools.cache
def printable_class(but: str = "") -> str:
    """The inside of a regex class of exactly the characters `str.isprintable` takes
    (what a name may hold) but those of ``but``, literally, for JSON Schema patterns
    (as `rel_path_pattern`)."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x110000):
        if chr(code).isprintable() and chr(code) not in but:
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(_in_class(low) if low == high else
                   f"{_in_class(low)}-{_in_class(high)}" for low, high in ranges)


REL_PATH_CHARS = (MAX_PATH_BYTES - 65) // 4  # with STORE/ (64 + 1 bytes), 4 bytes a character


def _in_class(code: int) -> str:
    char = chr(code)
    return "\\" + char if char in "\\]^-[" else char


def parse_path(raw: str, *, allow_store_only: bool = False, mount: str | None = None) -> MemPath:
    """Parse ``STORE/PATH`` (or ``/memory/STORE/PATH``) into a MemPath.

    Guarantees: no empty, ``.`` or ``..`` components, printable names, bounded
    length and depth, not absolute. Store-level paths are rejected unless
    ``allow_store_only``.
    """
    if not isinstance(raw, str):
        raise InvalidInput("path must be a string")
    if "\x00" in raw:
        raise InvalidInput("path contains a NUL character")
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidInput(f"path is longer than {MAX_PATH_BYTES} bytes")
    prefixes = MOUNT_PREFIXES + ((mount.rstrip("/") + "/",) if mount else ())
    for prefix in prefixes:
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    if raw.startswith("/"):
        raise InvalidInput(f"absolute path {raw!r}: use STORE/PATH")
    raw = raw.rstrip("/")
    if not raw:
        raise InvalidInput("empty path: use STORE/PATH")
    names = raw.split("/")
    if len(names) > MAX_DEPTH:
        raise InvalidInput(f"path is deeper than {MAX_DEPTH} components")
    for name in names:
        check_component(name)
    if len(names) == 1 and not allow_store_only:
        raise InvalidInput(f"{raw!r} names a store, not a file: use STORE/PATH")
    return MemPath(names[0], tuple(names[1:]))
