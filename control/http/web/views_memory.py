"""The page builders of a structured store's task board, decisions and sessions (see
control/http/web/look.py); each reads through the memory ops of the protocol."""

from __future__ import annotations

from typing import Any

from memfs.control.http.web.look import Look, Page, expired_at
from memfs.memory.records import parse_iso
from memfs.store.errors import InvalidInput

DONE_SHOWN = 100
SESSIONS_SHOWN = 100


def _structured(look: Look, store: str) -> dict[str, Any]:
    info = look.store(store)
    if not info["structured"]:
        raise InvalidInput(f"store {store} is not structured: it keeps no sessions, tasks "
                           "or decisions (structured = true in the config)")
    return info


def _at(text: object) -> float:
    try:
        return parse_iso(str(text))
    except ValueError:
        return 0.0


def tasks_page(look: Look, store: str) -> Page:
    """The board: open, claimed (holder, lease time left), expired (a hazard: who
    abandoned it, since when), done (the newest DONE_SHOWN)."""
    info = _structured(look, store)
    columns: dict[str, list[dict[str, Any]]] = {"open": [], "claimed": [], "expired": [],
                                                "done": []}
    for task in look.op("task_list", store=store)["tasks"]:
        status = task["status"] if task["status"] in columns else "open"
        if status == "expired":
            task["expired_at"] = expired_at(task)
        columns[status].append(task)
    columns["expired"].sort(key=lambda t: t.get("expired_at") or 0)
    columns["claimed"].sort(key=lambda t: t.get("lease_seconds_left", 0))
    columns["done"].sort(key=lambda t: _at(t.get("completed_at")), reverse=True)
    done_total = len(columns["done"])
    columns["done"] = columns["done"][:DONE_SHOWN]
    return Page("tasks.html", {"store": info, "columns": columns, "done_total": done_total},
                live=store)


def decisions_page(look: Look, store: str) -> Page:
    """Accepted decisions first, then superseded ones; each links to what it
    supersedes and to what superseded it (both ways, as anchors on this page)."""
    info = _structured(look, store)
    found = look.op("decision_list", store=store, status="all")["decisions"]
    ids = {d["id"] for d in found}
    accepted = [d for d in found if d["status"] == "accepted"]
    superseded = [d for d in found if d["status"] != "accepted"]
    return Page("decisions.html", {"store": info, "accepted": accepted,
                                   "superseded": superseded, "ids": ids}, live=store)


def sessions_page(look: Look, store: str, agent: str | None) -> Page:
    """A timeline per agent: its sessions, newest first, each with its checkpoints
    and handoffs in order (the handoff's next step highlighted)."""
    info = _structured(look, store)
    listed = look.op("session_list", store=store, agent=agent or None,
                     limit=SESSIONS_SHOWN)["sessions"]
    timelines: dict[str, list[dict[str, Any]]] = {}
    for item in listed:
        session = look.op("session_show", store=store, session=item["id"])
        timelines.setdefault(session["agent"], []).append(session)
    return Page("sessions.html", {"store": info, "timelines": list(timelines.items()),
                                  "only": agent or "", "shown": len(listed),
                                  "limit": SESSIONS_SHOWN}, live=store)
