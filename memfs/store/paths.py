"""Validation of user-supplied memory paths (``STORE/PATH``), free of I/O."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from memfs.store.errors import InvalidInput

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
MAX_DEPTH = 64
MOUNT_PREFIXES = ("/memory/",)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, order=True)
class MemPath:
    """A validated path inside a store: ``parts`` are the components below the store."""

    store: str
    parts: tuple[str, ...]

    @property
    def rel(self) -> str:
        return "/".join(self.parts)

    @functools.cached_property
    def encoded(self) -> bytes:
        """``rel`` as the bytes a system call takes (kept: the mount reuses its
        MemPaths for every open)."""
        return os.fsencode("/".join(self.parts))

    def __str__(self) -> str:
        return f"{self.store}/{self.rel}" if self.parts else self.store


def check_component(name: str) -> str:
    """Return ``name`` if it is a safe single path component, else raise InvalidInput."""
    if name in ("", ".", ".."):
        raise InvalidInput(f"bad path component {name!r}")
    if _CONTROL.search(name):
        raise InvalidInput(f"path component {name!r} contains a NUL or control character")
    if "/" in name:
        raise InvalidInput(f"path component {name!r} contains '/'")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"path component {name!r} is not valid UTF-8") from None
    if len(encoded) > MAX_NAME_BYTES:
        raise InvalidInput(f"path component is longer than {MAX_NAME_BYTES} bytes")
    return name


def parse_path(raw: str, *, allow_store_only: bool = False, mount: str | None = None) -> MemPath:
    """Parse ``STORE/PATH`` (or ``/memory/STORE/PATH``) into a MemPath.

    Guarantees: no empty, ``.`` or ``..`` components, no control characters, bounded
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
