"""The MCP signatures of the memory tools (sessions, brief, tasks, decisions), added to
the server built by control/mcp/server.py. Like there, no ``from __future__ import
annotations``: the SDK reads these annotations when the tools are added."""

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from control.mcp.memory import (
    BRIEF_DESCRIPTION,
    DECISION_LIST_DESCRIPTION,
    DECISION_RECORD_DESCRIPTION,
    SESSION_CHECKPOINT_DESCRIPTION,
    SESSION_HANDOFF_DESCRIPTION,
    SESSION_START_DESCRIPTION,
    TASK_CHECKPOINT_DESCRIPTION,
    TASK_CLAIM_DESCRIPTION,
    TASK_COMPLETE_DESCRIPTION,
    TASK_CREATE_DESCRIPTION,
    TASK_LIST_DESCRIPTION,
    TASK_RELEASE_DESCRIPTION,
    AgentTools,
)
from control.mcp.types import OptionalText, result_of

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

Store = Annotated[OptionalText, Field(
    description="The structured store (omit when you have only one).")]
TaskId = Annotated[str, Field(description="The task id, e.g. add-rate-limiting.",
                              min_length=1, max_length=64)]
Note = Annotated[str, Field(description="A few lines of text.", min_length=1,
                            max_length=65536)]


def add_memory_tools(server: "MCPServer[Any]", tools: AgentTools,
                     run_sync: "Callable[..., Awaitable[Any]] | None" = None) -> None:
    """Add memory_brief, session_*, task_* and decision_* to ``server``, each run in a
    worker thread by ``run_sync`` (default anyio's ``to_thread.run_sync``)."""
    import anyio.to_thread
    from mcp_types import CallToolResult, ToolAnnotations

    run = run_sync or anyio.to_thread.run_sync

    async def memory_brief(store: Store = None) -> CallToolResult:  # type: ignore[assignment]
        return result_of(await run(tools.brief, store))

    async def session_start(
        goal: Annotated[OptionalText, Field(description="What this session is for.")] = None,  # type: ignore[assignment]
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.session_start, goal or "", store))

    async def session_checkpoint(
        note: Note,
        session: Annotated[OptionalText, Field(
            description="Omit: the session started here.")] = None,  # type: ignore[assignment]
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.session_checkpoint, note, session, store))

    async def session_handoff(
        summary: Annotated[str, Field(description="What was done.", min_length=1,
                                      max_length=65536)],
        next: Annotated[str, Field(description="What should happen next.", min_length=1,
                                   max_length=65536)],
        session: Annotated[OptionalText, Field(
            description="Omit: the session started here.")] = None,  # type: ignore[assignment]
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.session_handoff, summary, next, session, store))

    async def task_create(
        id: TaskId,
        title: Annotated[str, Field(description="One line.", min_length=1, max_length=1000)],
        body: Annotated[OptionalText, Field(description="Details.")] = None,  # type: ignore[assignment]
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.task_create, id, title, body or "", store))

    async def task_list(
        status: Annotated[Literal["open", "claimed", "expired", "done"] | None, Field(
            description="Only tasks with this status.")] = None,
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.task_list, status, store))

    async def task_claim(
        id: TaskId,
        ttl: Annotated[str, Field(description="Lease time: 45s, 30m, 2h.",
                                  max_length=16)] = "60m",
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.task_claim, id, ttl, store))

    async def task_checkpoint(id: TaskId, note: Note,
                              store: Store = None) -> CallToolResult:  # type: ignore[assignment]
        return result_of(await run(tools.task_checkpoint, id, note, store))

    async def task_complete(
        id: TaskId,
        note: Annotated[OptionalText, Field(description="How it was done.")] = None,  # type: ignore[assignment]
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.task_complete, id, note, store))

    async def task_release(id: TaskId, store: Store = None) -> CallToolResult:  # type: ignore[assignment]
        return result_of(await run(tools.task_release, id, store))

    async def decision_record(
        title: Annotated[str, Field(description="One line.", min_length=1, max_length=1000)],
        decision: Annotated[str, Field(description="What was decided.", min_length=1,
                                       max_length=65536)],
        reason: Annotated[str, Field(description="Why.", min_length=1, max_length=65536)],
        context: Annotated[OptionalText, Field(description="Optional background.")] = None,  # type: ignore[assignment]
        consequences: Annotated[OptionalText, Field(
            description="Optional: what follows from it.")] = None,  # type: ignore[assignment]
        supersedes: Annotated[OptionalText, Field(
            description="The id of the decision this one replaces.")] = None,  # type: ignore[assignment]
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.decision_record, title, decision, reason, context,
                                   consequences, supersedes, store))

    async def decision_list(
        status: Annotated[Literal["accepted", "superseded", "all"], Field(
            description="Which decisions.")] = "accepted",
        id: Annotated[OptionalText, Field(description="One decision in full.")] = None,  # type: ignore[assignment]
        store: Store = None,  # type: ignore[assignment]
    ) -> CallToolResult:
        return result_of(await run(tools.decision_list, status, id, store))

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    changes = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                              idempotent_hint=False, open_world_hint=False)
    for fn, description, annotations, title in (
        (memory_brief, BRIEF_DESCRIPTION, reads, "Start-of-session brief"),
        (session_start, SESSION_START_DESCRIPTION, changes, "Start a session"),
        (session_checkpoint, SESSION_CHECKPOINT_DESCRIPTION, changes, "Session checkpoint"),
        (session_handoff, SESSION_HANDOFF_DESCRIPTION, changes, "Hand off the session"),
        (task_create, TASK_CREATE_DESCRIPTION, changes, "Add a task"),
        (task_list, TASK_LIST_DESCRIPTION, reads, "List tasks"),
        (task_claim, TASK_CLAIM_DESCRIPTION, changes, "Claim a task"),
        (task_checkpoint, TASK_CHECKPOINT_DESCRIPTION, changes, "Task checkpoint"),
        (task_complete, TASK_COMPLETE_DESCRIPTION, changes, "Complete a task"),
        (task_release, TASK_RELEASE_DESCRIPTION, changes, "Release a task"),
        (decision_record, DECISION_RECORD_DESCRIPTION, changes, "Record a decision"),
        (decision_list, DECISION_LIST_DESCRIPTION, reads, "List decisions"),
    ):
        server.add_tool(fn, title=title, description=description, annotations=annotations,
                        structured_output=False)
