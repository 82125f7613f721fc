"""Exceptions raised by the store engine and its helpers.

Each class says when it is raised and names its error code (memfs/errors.py: the one
table of what each code is at every edge); the FUSE view turns them into errnos.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from memfs.errors import MemfsError


class InvalidInput(MemfsError):
    """A request is malformed: bad path (``..``, absolute, control characters, too long),
    a path that crosses a symlink or names a directory or special file, bad mode."""

    code = "invalid"


class TooLarge(MemfsError):
    """Content exceeds the configured per-file size limit. ``size`` and ``limit``:
    its size and ``max_file_size``, in bytes, when known."""

    code = "too_large"

    def __init__(self, message: str, size: int | None = None, limit: int | None = None
                 ) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class PermissionDenied(MemfsError):
    """The agent is unknown, not attached to the store, or attached read-only and asked
    to write; or a non-delegate tried to act for another agent."""

    code = "permission_denied"


class AgentRequired(PermissionDenied):
    """A personal memory was asked something without the name of the agent asking:
    the message says how to name it."""

    def __init__(self) -> None:
        super().__init__(
            "this is a personal memory: name the agent you are on every call, e.g. "
            "`memfs --agent claude ...` or `export MEMFS_AGENT=claude` (MCP: `memfs mcp "
            "--agent claude`)")


class NotFound(MemfsError):
    """The store or file does not exist for the agent: a store it is not attached to
    is one that does not exist. ``near``: names it may have meant (``STORE`` or
    ``STORE/PATH``), drawn only from what the agent can see (memfs/store/read/near.py)."""

    code = "not_found"

    def __init__(self, message: str, near: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.near = list(near)


class NotAFolder(NotFound, InvalidInput):
    """A component of the path is a file (or anything else but a folder): nothing is
    below it, so the path does not exist (not_found, also for what catches
    InvalidInput); a change that would make it is refused with `PathTaken`."""


class PathTaken(MemfsError):
    """A change would make a file below a component that is a file, not a folder: the
    name is taken (nothing was changed)."""

    code = "conflict"


class NoSpace(MemfsError):
    """The memory's file system is full (ENOSPC or EDQUOT) and the change was refused
    before anything of it landed: nothing was changed."""

    code = "no_space"


class refused_when_full:  # used as a function: with refused_when_full():
    """Raise NoSpace for an ENOSPC or EDQUOT inside (``what``: what was not done, for
    the message). Wrap only steps after which nothing has changed yet. (A class, not a
    generator: it wraps several system calls of every write.)"""

    __slots__ = ("what",)

    def __init__(self, what: str = "") -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpace(f"the memory's disk is full ({os.strerror(error.errno)})"
                          f"{': ' + self.what if self.what else ''}; nothing was changed"
                          ) from error


@dataclass(frozen=True, slots=True)
class LastWrite:
    """Who last committed a file through memfs, and when (epoch seconds)."""

    agent: str | None
    at: float | None


ABSENT = "absent"  # a seen record or expectation meaning "I saw that no file was there"


class Conflict(MemfsError):
    """A version check failed: the file is not the version the agent last saw.

    ``current`` is the file's digest now (None if it does not exist); ``seen`` what the
    failing check expected: a digest, ``ABSENT`` (the agent saw no file there) or None
    (it never read this file); ``last_write`` who changed the file last; ``agent`` the
    writer whose check failed.
    """

    code = "conflict"

    def __init__(self, path: str, current: str | None, seen: str | None,
                 last_write: LastWrite | None, agent: str | None = None) -> None:
        self.path = path
        self.current = current
        self.seen = seen
        self.last_write = last_write
        self.agent = agent
        super().__init__(self.describe())

    def describe(self) -> str:
        if self.current is None:
            what = f"{self.path} was deleted since you last read it"
        elif self.seen is None:
            what = f"{self.path} exists and you have not read it"
        elif self.seen == ABSENT:
            what = f"{self.path} was created since you found it absent"
        else:
            what = f"{self.path} changed since you last read it"
        last = self.last_write
        if last is not None and last.agent is not None:
            import time

            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last.at or 0))
            if last.agent == self.agent:
                what += (f" (last written by you, {last.agent}, at {stamp}: by another of your "
                         "connections, an append made without reading the file, or a write "
                         "whose reply you did not get)")
            else:
                what += f" (last written by {last.agent} at {stamp})"
        return what + "; read it again, then retry (or force to overwrite on purpose)"


class ConditionFailed(Conflict):
    """The caller's own condition on the file's current version (HTTP's If-Match or
    If-None-Match) does not hold: nothing was changed. A conflict (its code and
    details), which HTTP answers 412."""

    def describe(self) -> str:
        now = f"at version {self.current}" if self.current else "absent"
        return (f"{self.path} is {now}, which your request's If-Match / If-None-Match "
                "excludes; nothing was changed")
