"""Exceptions of the memory model, each saying when it is raised and naming its error
code (memfs/errors.py)."""

from __future__ import annotations

from memfs.errors import MemfsError
from memfs.memory.records import literal


class LeaseHeld(MemfsError):
    """A claim (or a task operation) met another agent's unexpired lease; ``holder``
    and ``expires_at`` name it."""

    code = "lease_held"

    def __init__(self, task: str, holder: str, expires_at: str) -> None:
        super().__init__(f"task {literal(task)} is leased by {literal(holder)} until "
                         f"{literal(expires_at)}; wait, or pick another task")
        self.task, self.holder, self.expires_at = task, holder, expires_at


class LeaseLost(MemfsError):
    """The caller no longer holds the task's lease: it expired and another agent
    claimed it, or it was released or completed; ``holder`` is who holds it now."""

    code = "lease_lost"

    def __init__(self, task: str, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.task, self.holder = task, holder


class Closed(MemfsError):
    """The record no longer takes this operation: a session handed off (closed), a task
    done, a decision superseded. A state of the record, not a mistake in the request:
    another agent may have closed it meanwhile."""

    code = "closed"


class AlreadyExists(MemfsError):
    """A task id (or another record's name) is taken: a conflict, as a file someone
    else created first."""

    code = "conflict"
