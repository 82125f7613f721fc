"""Exceptions of ranked recall, each naming its error code (memfs/errors.py)."""

from __future__ import annotations

from memfs.errors import MemfsError


class RecallError(MemfsError):
    """Recall could not answer (an index failed and is being rebuilt): internal."""


class BadQuery(RecallError):
    """The query has no word to look for, or is too long."""

    code = "invalid"
