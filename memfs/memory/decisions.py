"""Decision records, ``decisions/YYYY-MM-DD-SLUG.md``::

    ---
    title: Use SQLite for the test database
    date: 2026-09-12
    status: accepted
    author: coder
    supersedes: null
    superseded_by: null
    ---

    ## Decision

    > Feature tests run against in-memory SQLite.

    ## Reason

    > Tests run in parallel across worktrees; a shared MySQL database interfered.

(optional ``## Context`` and ``## Consequences``). Decisions are never deleted or
edited; recording one that supersedes another marks the old one superseded and links
both ways, in one commit of both files, which lands whole or not at all after any crash
(memfs/store/write/store.py). Stores written by an older memfs may hold half a supersede:
readers take a decision as superseded when its own record names a successor that
exists *or* another record supersedes it, and `repairs` lists the records to mend at
start (an old record not yet marked, or one naming a successor that does not exist).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memfs.memory import records as r
from memfs.memory.errors import Closed
from memfs.store.errors import InvalidInput, NotFound

FOLDER = "decisions"
DECISION_ID_PATTERN = r"^\d{4}-\d{2}-\d{2}-[a-z0-9][a-z0-9-]{0,60}$"
DECISION_ID = re.compile(DECISION_ID_PATTERN)
SECTIONS = ("Decision", "Reason", "Context", "Consequences")


@dataclass(frozen=True)
class Decision:
    id: str
    fields: dict[str, Any]
    sections: dict[str, str]

    def as_dict(self, superseded_by: str | None = None) -> dict[str, Any]:
        """The record, with ``superseded_by`` as the link readers take (`superseder`)."""
        link = superseded_by
        return {"id": self.id, "title": self.fields.get("title"),
                "date": self.fields.get("date"), "author": self.fields.get("author"),
                "status": "superseded" if link else "accepted",
                "supersedes": self.fields.get("supersedes"), "superseded_by": link,
                **{name.lower(): self.sections.get(name) for name in SECTIONS}}


def path_of(decision_id: str) -> str:
    if not DECISION_ID.fullmatch(decision_id):
        raise InvalidInput(f"bad decision id {decision_id!r}: ids look like "
                           "2026-11-30-use-sqlite-for-tests")
    return f"{FOLDER}/{decision_id}.md"


def parse(name: str, data: bytes) -> Decision | None:
    if not name.endswith(".md") or not DECISION_ID.fullmatch(name[:-3]):
        return None
    fields, body = r.split_front_matter(data.decode("utf-8", "replace"))
    if not isinstance(fields.get("title"), str):
        return None
    sections: dict[str, str] = {}
    parts = re.split(r"^## (Decision|Reason|Context|Consequences)$", body, flags=re.M)
    for title, text in zip(parts[1::2], parts[2::2], strict=True):
        sections[title] = r.unquote([line for line in text.strip("\n").split("\n")
                                     if line.startswith(">")])
    return Decision(name[:-3], fields, sections)


def render(fields: dict[str, Any], sections: dict[str, str]) -> bytes:
    body = "".join(f"\n## {name}\n\n{r.quote(sections[name])}\n"
                   for name in SECTIONS if sections.get(name))
    return (r.front_matter(fields) + body).encode()


def new_id(title: str, now: float, taken: set[str]) -> str:
    base = f"{r.day(now)}-{r.slugify(title)}"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    return candidate


def recorded(title: str, decision: str, reason: str, context: str | None,
             consequences: str | None, agent: str, now: float, decision_id: str,
             supersedes: str | None) -> bytes:
    fields = {"title": title, "date": r.day(now), "status": "accepted", "author": agent,
              "supersedes": supersedes, "superseded_by": None}
    return render(fields, {"Decision": decision, "Reason": reason, "Context": context or "",
                           "Consequences": consequences or ""})


def superseded(current: bytes | None, old_id: str, new_id: str,
               exists: Callable[[str], bool]) -> bytes:
    """The old record marked superseded by ``new_id``. ``exists(id)``: whether a
    decision record ``id`` exists (a link to a missing one does not count). Raises
    NotFound, InvalidInput (already superseded)."""
    if current is None:
        raise NotFound(f"no decision {r.literal(old_id)} to supersede")
    old = parse(f"{old_id}.md", current)
    if old is None:
        raise InvalidInput(f"decisions/{old_id}.md is not a decision memfs can read")
    successor = old.fields.get("superseded_by")
    if isinstance(successor, str) and exists(successor):
        raise Closed(f"decision {r.literal(old_id)} is already superseded by "
                     f"{r.literal(successor)}; supersede that one instead")
    return _linked(old, new_id)


def _linked(record: Decision, successor: str | None) -> bytes:
    status = "superseded" if successor else "accepted"
    return render(dict(record.fields, status=status, superseded_by=successor),
                  record.sections)


def links(decisions: dict[str, Decision]) -> dict[str, str]:
    """old id -> the id of a record that supersedes it (from the new records' side)."""
    return {str(d.fields["supersedes"]): d.id for d in decisions.values()
            if d.fields.get("supersedes")}


def superseder(record: Decision, decisions: dict[str, Decision],
               links: dict[str, str]) -> str | None:
    """The id of the record that supersedes ``record``, as readers take it: its own
    link when that record exists, else a record that says it supersedes it."""
    own = record.fields.get("superseded_by")
    if isinstance(own, str) and own in decisions:
        return own
    return links.get(record.id)


def repairs(decisions: dict[str, Decision]) -> list[tuple[str, str | None]]:
    """(old id, the successor its record should name) for each record to mend: one
    another record supersedes that does not say so yet, or one that names a successor
    that does not exist (None: it is accepted again)."""
    found = links(decisions)
    mend: list[tuple[str, str | None]] = []
    for record in decisions.values():
        own = record.fields.get("superseded_by") or None
        wanted = superseder(record, decisions, found)
        if own != wanted:
            mend.append((record.id, wanted))
    return sorted(mend)


def mended(current: bytes | None, decision_id: str, successor: str | None) -> bytes | None:
    """The record of ``decision_id`` naming ``successor`` (None: none); None when it
    is gone or unreadable (nothing to mend)."""
    record = None if current is None else parse(f"{decision_id}.md", current)
    return None if record is None else _linked(record, successor)


def describe(record: dict[str, Any]) -> str:
    """A decision as `Decision.as_dict` gives it, as plain text for people and models:
    its names as JSON strings, its texts quoted (see memfs/memory/records.py)."""
    lines = [f"{r.literal(record['id'])} [{record['status']}] ({r.literal(record['date'])}, "
             f"by {r.literal(record['author'])})", r.quoted(record["title"])]
    for link in ("supersedes", "superseded_by"):
        if record[link]:
            lines.append(f"{link.replace('_', ' ')}: {r.literal(record[link])}")
    for section in SECTIONS:
        if record.get(section.lower()):
            lines.append(f"## {section}\n{r.quoted(record[section.lower()])}")
    return "\n".join(lines)
