"""Tasks with leases, as JSON files ``tasks/ID.json``.

The rules (the source article's, plus expiry and reclaim):

* a claim fails with LeaseHeld while another agent's lease is unexpired; claiming
  one's own lease again extends it; an expired lease can be claimed by anyone;
* only the holder checkpoints (which extends the lease), completes or releases; a
  former holder whose lease another agent took gets LeaseLost, so does a holder whose
  task was released or completed meanwhile; a delegate may release with force;
* time is the daemon's clock, UTC.

Status is ``open``, ``claimed`` or ``done`` on disk; ``expired`` (claimed, lease run
out) is derived when reading, never written, so it needs no timer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memfs.memory import records as r
from memfs.memory.errors import AlreadyExists, Closed, LeaseHeld, LeaseLost
from memfs.store.errors import InvalidInput, NotFound

FOLDER = "tasks"
DEFAULT_TTL = 3600
STATUSES = ("open", "claimed", "expired", "done")


def path_of(task_id: str) -> str:
    return f"{FOLDER}/{r.check_slug('task id', task_id)}.json"


@dataclass(frozen=True)
class Task:
    """A task as stored (``data``), with the status it has at ``now``."""

    data: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def lease(self) -> dict[str, Any] | None:
        lease = self.data.get("lease")
        return lease if isinstance(lease, dict) else None

    def status(self, now: float) -> str:
        lease = self.lease
        if self.data.get("status") == "claimed" and lease is not None:
            return "expired" if r.parse_iso(str(lease["expires_at"])) <= now else "claimed"
        return str(self.data.get("status", "open"))

    def view(self, now: float) -> dict[str, Any]:
        """The task as callers see it: its data, the status now, seconds left."""
        shown = dict(self.data, status=self.status(now))
        lease = self.lease
        if lease is not None:
            shown["lease_seconds_left"] = max(0, int(r.parse_iso(lease["expires_at"]) - now))
        return shown


def parse(name: str, data: bytes) -> Task | None:
    if not name.endswith(".json"):
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        return None
    return Task(value)


def render(task: dict[str, Any]) -> bytes:
    return (json.dumps(task, indent=2, ensure_ascii=False) + "\n").encode()


def _load(current: bytes | None, task_id: str) -> dict[str, Any]:
    if current is None:
        raise NotFound(f"no task {r.literal(task_id)} (task_list shows the tasks)")
    task = parse(f"{task_id}.json", current)
    if task is None:
        raise InvalidInput(f"tasks/{task_id}.json is not a task file memfs can read")
    return dict(task.data)


def created(current: bytes | None, task_id: str, title: str, body: str, agent: str,
            now: float) -> dict[str, Any]:
    if current is not None:
        raise AlreadyExists(f"task {r.literal(task_id)} exists already; pick another id")
    return {"id": task_id, "title": title, "body": body, "status": "open",
            "created_by": agent, "created_at": r.iso(now), "lease": None, "holders": [],
            "checkpoints": [], "completed_by": None, "completed_at": None,
            "completion_note": None}


def claimed(current: bytes | None, task_id: str, agent: str, session: str | None,
            ttl: int, now: float) -> dict[str, Any]:
    task = _load(current, task_id)
    if task.get("status") == "done":
        raise Closed(f"task {r.literal(task_id)} is done; nothing to claim")
    lease = task.get("lease")
    if isinstance(lease, dict) and lease.get("agent") != agent and \
            r.parse_iso(lease["expires_at"]) > now:
        raise LeaseHeld(task_id, str(lease["agent"]), str(lease["expires_at"]))
    task["status"] = "claimed"
    task["lease"] = {"agent": agent, "session": session, "claimed_at": r.iso(now),
                     "expires_at": r.iso(now + ttl), "ttl_seconds": ttl}
    holders = list(task.get("holders") or [])
    if agent not in holders:
        holders.append(agent)
    task["holders"] = holders
    return task


def _held(task: dict[str, Any], task_id: str, agent: str, now: float, *,
          force: bool = False) -> dict[str, Any]:
    """The lease ``agent`` holds on the task (even expired, while nobody took it);
    LeaseLost if it held the task and lost it, LeaseHeld if another agent holds an
    unexpired lease, LeaseLost ("claim it first") otherwise."""
    lease = task.get("lease")
    if task.get("status") == "done":
        raise LeaseLost(task_id, f"task {r.literal(task_id)} was completed by "
                        f"{r.literal(task.get('completed_by'))}")
    if not isinstance(lease, dict):
        raise LeaseLost(task_id, f"you do not hold task {r.literal(task_id)}: it is not "
                        "claimed (claim it first)")
    if lease.get("agent") != agent and not force:
        holder = str(lease.get("agent"))
        if agent in (task.get("holders") or []):
            raise LeaseLost(task_id, f"your lease on task {r.literal(task_id)} was lost: "
                            f"{r.literal(holder)} holds it until "
                            f"{r.literal(lease.get('expires_at'))}", holder)
        if r.parse_iso(str(lease.get("expires_at"))) > now:
            raise LeaseHeld(task_id, holder, str(lease.get("expires_at")))
        raise LeaseLost(task_id, f"you do not hold task {r.literal(task_id)} (the lease of "
                        f"{r.literal(holder)} expired): claim it first", holder)
    return lease


def checkpointed(current: bytes | None, task_id: str, agent: str, note: str,
                 now: float) -> dict[str, Any]:
    task = _load(current, task_id)
    lease = dict(_held(task, task_id, agent, now))
    lease["expires_at"] = r.iso(now + int(lease.get("ttl_seconds") or DEFAULT_TTL))
    task["lease"] = lease
    task["status"] = "claimed"
    task["checkpoints"] = [*task.get("checkpoints", []),
                           {"at": r.iso(now), "agent": agent, "note": note}]
    return task


def completed(current: bytes | None, task_id: str, agent: str, note: str | None,
              now: float) -> dict[str, Any]:
    task = _load(current, task_id)
    _held(task, task_id, agent, now)
    task.update(status="done", lease=None, completed_by=agent, completed_at=r.iso(now),
                completion_note=note)
    return task


def released(current: bytes | None, task_id: str, agent: str, now: float, *,
             force: bool) -> dict[str, Any]:
    task = _load(current, task_id)
    _held(task, task_id, agent, now, force=force)
    task.update(status="open", lease=None)
    return task


def handed_over(current: bytes | None, task_id: str, holder: str, to: str | None
                ) -> dict[str, Any]:
    """``holder``'s lease moved to agent ``to`` as it is (the holder was renamed), or
    released (``to`` None: the holder was retired). LeaseLost when ``holder`` no
    longer holds it."""
    task = _load(current, task_id)
    lease = task.get("lease")
    if task.get("status") != "claimed" or not isinstance(lease, dict) or \
            lease.get("agent") != holder:
        raise LeaseLost(task_id, f"{r.literal(holder)} no longer holds task {task_id}")
    if to is None:
        task.update(status="open", lease=None)
        return task
    task["lease"] = {**lease, "agent": to}
    holders = list(task.get("holders") or [])
    task["holders"] = holders if to in holders else [*holders, to]
    return task
