"""The memory model's requests (sessions, brief, tasks, decisions): pydantic models
with no I/O, part of the one request union in control/protocol/wire.py.

Every request may name the structured ``store``; without it the agent's only
structured store is used.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from control.protocol.base import BaseRequest

TEXT = 65536  # longest note, goal, summary, title, body, decision or reason
Text = Annotated[str, Field(max_length=TEXT)]
Id = Annotated[str, Field(min_length=1, max_length=200)]


class _MemoryRequest(BaseRequest):
    store: str | None = Field(default=None, max_length=64)


class SessionStartRequest(_MemoryRequest):
    op: Literal["session_start"]
    goal: str = Field(default="", max_length=TEXT)


class SessionCheckpointRequest(_MemoryRequest):
    op: Literal["session_checkpoint"]
    session: Id
    note: Text


class SessionHandoffRequest(_MemoryRequest):
    op: Literal["session_handoff"]
    session: Id
    summary: Text
    next: Text


class SessionListRequest(_MemoryRequest):
    op: Literal["session_list"]
    agent: str | None = Field(default=None, max_length=64)  # only this agent's sessions
    state: Literal["open", "closed"] | None = None
    limit: int = Field(default=50, ge=1, le=10_000)


class SessionShowRequest(_MemoryRequest):
    op: Literal["session_show"]
    session: Id


class BriefRequest(_MemoryRequest):
    op: Literal["brief"]
    max_bytes: int = Field(default=4096, ge=512, le=1 << 20)


class TaskAddRequest(_MemoryRequest):
    op: Literal["task_add"]
    task: Id
    title: str = Field(max_length=1000)
    body: str = Field(default="", max_length=TEXT)


class TaskListRequest(_MemoryRequest):
    op: Literal["task_list"]
    status: Literal["open", "claimed", "expired", "done"] | None = None


class TaskShowRequest(_MemoryRequest):
    op: Literal["task_show"]
    task: Id


class TaskClaimRequest(_MemoryRequest):
    op: Literal["task_claim"]
    task: Id
    ttl: str = Field(default="60m", max_length=16)  # 45s, 30m, 2h, 1d
    session: str | None = Field(default=None, max_length=200)


class TaskCheckpointRequest(_MemoryRequest):
    op: Literal["task_checkpoint"]
    task: Id
    note: Text


class TaskCompleteRequest(_MemoryRequest):
    op: Literal["task_complete"]
    task: Id
    note: str | None = Field(default=None, max_length=TEXT)


class TaskReleaseRequest(_MemoryRequest):
    op: Literal["task_release"]
    task: Id
    force: bool = False  # delegates only: release another agent's lease


class DecisionRecordRequest(_MemoryRequest):
    op: Literal["decision_record"]
    title: str = Field(max_length=1000)
    decision: Text
    reason: Text
    context: str | None = Field(default=None, max_length=TEXT)
    consequences: str | None = Field(default=None, max_length=TEXT)
    supersedes: str | None = Field(default=None, max_length=200)


class DecisionListRequest(_MemoryRequest):
    op: Literal["decision_list"]
    status: Literal["accepted", "superseded", "all"] = "accepted"


class DecisionShowRequest(_MemoryRequest):
    op: Literal["decision_show"]
    decision: Id


MEMORY_REQUESTS = (
    SessionStartRequest | SessionCheckpointRequest | SessionHandoffRequest | SessionListRequest
    | SessionShowRequest | BriefRequest | TaskAddRequest | TaskListRequest | TaskShowRequest
    | TaskClaimRequest | TaskCheckpointRequest | TaskCompleteRequest | TaskReleaseRequest
    | DecisionRecordRequest | DecisionListRequest | DecisionShowRequest
)
MEMORY_OPS = ("session_start", "session_checkpoint", "session_handoff", "session_list",
              "session_show", "brief", "task_add", "task_list", "task_show", "task_claim",
              "task_checkpoint", "task_complete", "task_release", "decision_record",
              "decision_list", "decision_show")
