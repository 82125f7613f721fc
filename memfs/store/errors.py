"""Exceptions raised by the store engine and its helpers.

Each class says when it is raised. The edges translate them: the control server into
protocol error codes, the FUSE view into errnos, the CLI into exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass


class MemfsError(Exception):
    """Base class of every error the engine raises on purpose."""


class InvalidInput(MemfsError):
    """A request is malformed: bad path (``..``, absolute, control characters, too long),
    a path that crosses a symlink or names a directory or special file, bad mode."""


class TooLarge(MemfsError):
    """Content exceeds the configured per-file size limit."""


class PermissionDenied(MemfsError):
    """The agent is unknown, not attached to the store, or attached read-only and asked
    to write; or a non-delegate tried to act for another agent."""


class NotFound(MemfsError):
    """The store or file does not exist (for an agent allowed to know it)."""


@dataclass(frozen=True)
class LastWrite:
    """Who last committed a file through memfs, and when (epoch seconds)."""

    agent: str | None
    at: float | None


class Conflict(MemfsError):
    """A version check failed: the file is not the version the agent last saw.

    ``current`` is the file's digest now (None if it does not exist), ``seen`` the
    digest the agent last read or wrote (None if it never read this file), and
    ``last_write`` who changed the file last.
    """

    def __init__(
        self, path: str, current: str | None, seen: str | None, last_write: LastWrite | None
    ) -> None:
        self.path = path
        self.current = current
        self.seen = seen
        self.last_write = last_write
        super().__init__(self.describe())

    def describe(self) -> str:
        if self.current is None:
            what = f"{self.path} was deleted since you last read it"
        elif self.seen is None:
            what = f"{self.path} exists and you have not read it"
        else:
            what = f"{self.path} changed since you last read it"
        if self.last_write is not None and self.last_write.agent is not None:
            import time

            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.last_write.at or 0))
            what += f" (last written by {self.last_write.agent} at {stamp})"
        return what + "; read it again, then retry (or force to overwrite on purpose)"
