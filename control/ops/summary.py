"""The ``summary`` op: how much the agent's memory holds, as counts (notes, tasks by
state, decisions by state, sessions open and closed) of one structured store, declared
with its request model, its handler, its REST endpoint and its MCP tool
(control/ops/registry.py). Like every read of records it records nothing."""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from typing_extensions import TypedDict  # pydantic reads it (see jail/rg_json.py)

from memfs.control.ops.history import STORE
from memfs.control.ops.memory import MemoryRequest
from memfs.control.ops.registry import Call, Rest, Tool, operation
from memfs.memory import decisions, sessions, tasks
from memfs.memory.records import literal


class SummaryRequest(MemoryRequest):  # a memory op: a store that is not structured is 404 over HTTP
    op: Literal["summary"]


class Counts(TypedDict):
    total: int


class TaskCounts(Counts):
    open: int
    claimed: int
    expired: int
    done: int


class DecisionCounts(Counts):
    accepted: int
    superseded: int


class SessionCounts(Counts):
    open: int
    closed: int


class SummaryOutput(TypedDict):
    """memory_summary's structured result: the same counts as its text."""

    store: str
    notes: int
    tasks: TaskCounts
    decisions: DecisionCounts
    sessions: SessionCounts


SUMMARY_DESCRIPTION = """\
How much your memory holds, at a glance: the number of notes (files outside the
sessions, tasks and decisions folders), of tasks by state (open, claimed, expired, done),
of decisions (accepted, superseded) and of sessions (open, closed) in your structured
store. Cheap, and it changes nothing: use it to see whether there is anything to read
before you search, or how much work is open."""


def _counts(states: Counter[str], keys: tuple[str, ...]) -> dict[str, int]:
    return {key: states[key] for key in keys} | {"total": sum(states.values())}


def summary_text(result: dict[str, Any]) -> str:
    """The counts as one sentence per kind, the store a JSON string."""
    t, d, s = result["tasks"], result["decisions"], result["sessions"]
    return (f"Store {literal(result['store'])}: {result['notes']} notes.\n"
            f"Tasks: {t['open']} open, {t['claimed']} claimed, {t['expired']} expired, "
            f"{t['done']} done.\n"
            f"Decisions: {d['accepted']} accepted, {d['superseded']} superseded.\n"
            f"Sessions: {s['open']} open, {s['closed']} closed.")


@operation(SummaryRequest, summary="How much the memory holds: notes, tasks, decisions, "
           "sessions", rest=Rest("GET", f"{STORE}/summary"),
           tool=Tool("memory_summary", SUMMARY_DESCRIPTION, title="Memory at a glance",
                     render=summary_text, output=SummaryOutput))
def summary(call: Call, request: SummaryRequest) -> dict[str, Any]:
    memory, agent = call.memory, call.agent
    store = memory.store_for(agent, request.store)
    records = (f"{store}/{folder}/" for folder in (sessions.FOLDER, tasks.FOLDER,
                                                   decisions.FOLDER))
    kept = tuple(records)
    notes = [path for path in call.engine.list(agent, [f"{store}/**"])
             if not path.startswith(kept)]
    task_states = Counter(task["status"] for task in memory.task_list(agent, store))
    decision_states = Counter(d["status"] for d in memory.decision_list(agent, store, "all"))
    session_states = Counter(s["state"] for s in memory.session_list(agent, store,
                                                                     limit=1 << 31))
    return {"store": store, "notes": len(notes),
            "tasks": _counts(task_states, ("open", "claimed", "expired", "done")),
            "decisions": _counts(decision_states, ("accepted", "superseded")),
            "sessions": _counts(session_states, ("open", "closed"))}
