"""The root of memfs's exceptions.

An exception memfs raises on purpose names its error code with the class attribute
``code``: the engine's and the memory model's (subclasses of `MemfsError`), the jail's
(jail/errors.py, which imports nothing of memfs). So "which exception is which code"
is said once, next to each class, and the dispatcher's ``describe`` only reads it.

Standard library only and cheap to import.
"""

from __future__ import annotations


class MemfsError(Exception):
    """Base class of every error memfs raises on purpose. ``code`` names its error code;
    None (this base's): a failure of memfs itself, which the edges log and
    answer ``internal``."""

    code: str | None = None
