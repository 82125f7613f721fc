"""Sessions: one agent's stretch of work as an append-only log, ended by a handoff.

``sessions/YYYY-MM-DD-AGENT-XXXX.md``::

    ---
    agent: coder
    started: 2026-11-30T13:22:59Z
    goal: "Add rate limiting"
    state: open
    ---

    ## 2026-11-30T13:40:00Z checkpoint

    > Route middleware added, tests next

    ## 2026-11-30T14:05:00Z handoff

    **Summary**

    > Middleware and tests done

    **Next**

    > Document the limits in the README

A session belongs to its agent: only that agent checkpoints or hands off. Entries are
only ever added; the handoff closes the session (``state: closed``), after which
nothing is added. Agents' text is stored as quoted blocks, so it can never forge an
entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memfs.memory import records as r
from memfs.memory.errors import Closed
from memfs.store.errors import InvalidInput, NotFound, PermissionDenied

FOLDER = "sessions"
SESSION_ID_PATTERN = r"^\d{4}-\d{2}-\d{2}-[A-Za-z0-9._-]{1,64}-[0-9a-f]{4}$"
SESSION_ID = re.compile(SESSION_ID_PATTERN)
_ENTRY = re.compile(
    r"^## (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{3})?Z) (checkpoint|handoff)$", re.M)


@dataclass(frozen=True)
class Entry:
    at: str
    kind: str  # checkpoint | handoff
    note: str = ""  # a checkpoint's text
    summary: str = ""  # a handoff's
    next: str = ""


@dataclass(frozen=True)
class Session:
    id: str
    agent: str
    started: str
    goal: str
    state: str  # open | closed
    entries: tuple[Entry, ...] = field(default=())

    @property
    def handoff(self) -> Entry | None:
        return next((e for e in reversed(self.entries) if e.kind == "handoff"), None)

    @property
    def last_at(self) -> str:
        return self.entries[-1].at if self.entries else self.started

    def as_dict(self) -> dict[str, Any]:
        handoff = self.handoff
        return {
            "id": self.id, "agent": self.agent, "started": self.started, "goal": self.goal,
            "state": self.state, "last_at": self.last_at,
            "summary": handoff.summary if handoff else None,
            "next": handoff.next if handoff else None,
            "entries": [{"at": e.at, "kind": e.kind, "note": e.note, "summary": e.summary,
                         "next": e.next} for e in self.entries],
        }


def path_of(session_id: str) -> str:
    if not SESSION_ID.fullmatch(session_id):
        raise InvalidInput(f"bad session id {session_id!r}: ids look like "
                           "2026-11-30-coder-a91f")
    return f"{FOLDER}/{session_id}.md"


def new_session(agent: str, goal: str, at: float) -> tuple[Session, str]:
    """A new session and its file text."""
    session = Session(f"{r.day(at)}-{agent}-{r.token()}", agent, r.iso_ms(at), goal, "open")
    return session, render_head(session)


def render_head(session: Session) -> str:
    head = r.front_matter({"agent": session.agent, "started": session.started,
                           "goal": session.goal or None, "state": session.state})
    if session.goal:
        head += f"\n# Session {session.id}\n\n{r.quote(session.goal)}\n"
    return head


def render_entry(entry: Entry) -> str:
    body = r.quote(entry.note) if entry.kind == "checkpoint" else (
        f"**Summary**\n\n{r.quote(entry.summary)}\n\n**Next**\n\n{r.quote(entry.next)}")
    return f"\n## {entry.at} {entry.kind}\n\n{body}\n"


def parse(name: str, data: bytes) -> Session | None:
    """A session file (None: not one)."""
    if not name.endswith(".md") or not SESSION_ID.fullmatch(name[:-3]):
        return None
    fields, body = r.split_front_matter(data.decode("utf-8", "replace"))
    agent, started, state = fields.get("agent"), fields.get("started"), fields.get("state")
    if not (isinstance(agent, str) and isinstance(started, str) and isinstance(state, str)):
        return None
    goal = fields.get("goal")
    marks = list(_ENTRY.finditer(body))
    entries = []
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(body)
        lines = body[mark.end():end].strip("\n").split("\n")
        if mark.group(2) == "checkpoint":
            entries.append(Entry(mark.group(1), "checkpoint", note=r.unquote(lines)))
        else:
            summary, following = _section(lines, "**Summary**"), _section(lines, "**Next**")
            entries.append(Entry(mark.group(1), "handoff", summary=summary, next=following))
    return Session(name[:-3], agent, started, goal if isinstance(goal, str) else "", state,
                   tuple(entries))


def _section(lines: list[str], title: str) -> str:
    """The quoted lines after ``title``, up to the next bold title."""
    if title not in lines:
        return ""
    taken = []
    for line in lines[lines.index(title) + 1:]:
        if line.startswith("**"):
            break
        if line.startswith(">"):
            taken.append(line)
    return r.unquote(taken)


def check_own(current: bytes | None, session_id: str, agent: str) -> Session:
    """The open session ``session_id`` of ``agent`` (``current``: its file's bytes).
    Raises NotFound (no such session), InvalidInput (not one memfs can read), Closed
    (handed off) or PermissionDenied (another agent's)."""
    if current is None:
        raise NotFound(f"no session {r.literal(session_id)}: name one of your open sessions "
                       "(session_start makes one)")
    session = parse(f"{session_id}.md", current)
    if session is None:
        raise InvalidInput(f"session {r.literal(session_id)} is not a session file memfs can read")
    if session.agent != agent:
        raise PermissionDenied(f"session {r.literal(session_id)} belongs to "
                               f"{r.literal(session.agent)}; only its agent adds to it or "
                               "claims tasks in it")
    if session.state != "open":
        raise Closed(f"session {r.literal(session_id)} was handed off and is closed; start a new "
                     "session")
    return session


def appended(current: bytes | None, session_id: str, agent: str, entry: Entry,
             *, close: bool = False) -> bytes:
    """The session file with ``entry`` added (and closed by a handoff). Raises
    NotFound, PermissionDenied (another agent's session), Closed (handed off)."""
    if current is None:
        raise NotFound(f"no session {r.literal(session_id)}")
    check_own(current, session_id, agent)
    text = current.decode("utf-8", "replace")
    if close:
        head, body = text.split("\n---\n", 1)
        text = head.replace("\nstate: open", "\nstate: closed", 1) + "\n---\n" + body
    return (text + render_entry(entry)).encode()
