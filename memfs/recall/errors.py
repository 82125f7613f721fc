"""Exceptions of ranked recall, each naming its error code (memfs/errors.py)."""

from __future__ import annotations

from memfs.errors import MemfsError


class RecallError(MemfsError):
    """Recall could not answer (an index failed and is being rebuilt): internal."""


class BadQuery(RecallError):
    """The query has no word to look for, or is too long."""

    code = "invalid"


class RecallOff(RecallError):
    """This daemon keeps no recall index (config ``recall = false``)."""

    code = "invalid"

    def __init__(self) -> None:
        super().__init__("ranked recall is off on this daemon (config: recall = false); "
                         "search with ripgrep instead")
