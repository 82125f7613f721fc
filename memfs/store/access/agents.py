"""The agents of a personal memory: names registered on first use.

In personal mode (memfs/config.py ``PersonalConfig``) one uid, the owner, runs every
agent, and names the agent on each request. A valid name (1-64 letters, digits, '.',
'_', '-') that is new is registered by its first use; ``ROOT/state/agents.json``
(mode 0600, shared by the daemons on the root) keeps each name with the uid that
registered it and when it was first and last seen. A name is never removed or given
to another identity: a request naming an agent that another uid registered is
refused.

Names cannot trap: a name is lowercase (`check_agent_name`: ``Claude`` is refused with
``claude`` as the hint, on every way in, so that one spelling is one agent); an agent
can be renamed (`rename`: the old name is kept, refused with the new one as the hint)
and retired (`retire`: its name refused until ``undo``).

Changes are made under an flock (``ROOT/state/locks/agents.lock``) by re-reading the
file, written atomically (memfs/store/fs/statefile.py). Each use looks whether the file
changed (a stat: another daemon on the root may have retired or renamed the name) and
re-reads it then. Last-seen times are written at most once a minute per agent, by the request
that finds its time stale: no disk write for almost every request.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from memfs.config import check_name
from memfs.errors import MemfsError
from memfs.store.errors import InvalidInput, NotFound, PermissionDenied, refused_when_full
from memfs.store.fs import statefile

SEEN_EVERY = 60.0  # seconds: how stale a written last-seen time may get


ACTIVE, RETIRED, RENAMED = "active", "retired", "renamed"  # an agent's states


@dataclass(frozen=True)
class AgentRecord:
    name: str
    uid: int
    first_seen: float
    last_seen: float
    state: str = ACTIVE
    renamed_to: str | None = None  # state RENAMED: the name it goes by now
    changed_at: float | None = None  # when it was retired or renamed

    def stored(self) -> dict[str, object]:
        """The record as agents.json keeps it (an active agent's: as before states)."""
        fields = {k: v for k, v in asdict(self).items() if k != "name"}
        if self.state == ACTIVE:
            for key in ("state", "renamed_to", "changed_at"):
                fields.pop(key)
        return fields

    def refusal(self) -> str | None:
        """Why this name may not act (retired, renamed), or None."""
        if self.state == RETIRED:
            return (f"agent {self.name!r} is retired: pick another name, or reuse this one "
                    f"on purpose with `memfs agent retire {self.name} --undo`")
        if self.state == RENAMED:
            return f"agent {self.name!r} was renamed to {self.renamed_to!r}: use that name"
        return None


def check_agent_name(name: str) -> str:
    """``name`` if it is a valid agent name: 1-64 of lowercase letters, digits, '.',
    '_', '-', starting with a letter or digit. Raises InvalidInput, naming the
    lowercase spelling when that is the only fault (one spelling, one agent)."""
    try:
        check_name("agent", name)
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    if name != name.lower():
        raise InvalidInput(f"bad agent name {name!r}: agent names are lowercase (one "
                           f"spelling, one agent): use {name.lower()!r}")
    return name


class AgentRegistry:
    """The registered agents of one root, for one owner uid; thread-safe. A
    ``Collection`` of names (``in`` says whether a name is registered)."""

    def __init__(self, state_dir: Path, owner: int) -> None:
        self.path = state_dir / "agents.json"
        self._lock_path = state_dir / "locks" / "agents.lock"
        self.owner = owner
        self._mutex = threading.Lock()
        self._records: dict[str, AgentRecord] = {}
        self._signature: tuple[int, int, int] | None = None

    # -- reading ------------------------------------------------------------------

    def _read(self) -> dict[str, AgentRecord]:
        """The records on disk (none without a file); raises MemfsError when it is
        unreadable or malformed (it is then never overwritten)."""
        text = statefile.read_text(self.path)
        if text is None:
            return {}
        try:
            data = json.loads(text)
            return {name: AgentRecord(name=name, **fields)
                    for name, fields in data["agents"].items()}
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise MemfsError(f"{self.path} is malformed ({error!r}); fix or remove it"
                             ) from None

    def _refresh(self) -> dict[str, AgentRecord]:
        """The records, re-read when the file changed since the last look."""
        try:
            st = self.path.stat()
            signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            signature = (0, 0, 0)
        with self._mutex:
            if signature != self._signature:
                self._records = self._read()
                self._signature = signature
            return self._records

    def __contains__(self, name: object) -> bool:
        if name in self._records:  # never removed: a name once seen stays (its state aside)
            return True
        try:
            return name in self._refresh()
        except MemfsError:
            return False

    def __iter__(self) -> Iterator[str]:
        """The active names (the mount lists these; a retired or renamed one is still
        ``in``: known, and refused with the reason when it acts)."""
        return iter(sorted(name for name, record in self._refresh().items()
                           if record.state == ACTIVE))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def list(self) -> list[AgentRecord]:
        """Every registered agent, by name."""
        return sorted(self._refresh().values(), key=lambda record: record.name)

    # -- using ----------------------------------------------------------------------

    def use(self, name: str, now: float | None = None) -> AgentRecord:
        """The record of agent ``name`` as the owner uses it: registered now if new,
        its last-seen time noted (written when SEEN_EVERY old). Raises InvalidInput
        (not a valid name: not lowercase included), PermissionDenied (registered by
        another uid; retired; renamed), NoSpace, MemfsError (the file cannot be
        read)."""
        now = time.time() if now is None else now
        record = self._refresh().get(name)  # a stat: changed by another daemon?
        if record is not None and record.uid == self.owner and record.state == ACTIVE and \
                now - record.last_seen < SEEN_EVERY:
            return record
        check_agent_name(name)
        with self._changing() as records:
            record = records.get(name)
            if record is not None and record.uid != self.owner:
                raise PermissionDenied(
                    f"agent {name!r} of this memory was registered by uid {record.uid}, not "
                    f"by uid {self.owner}: a name never changes hands; pick another name")
            refused = None if record is None else record.refusal()
            if refused is not None:
                raise PermissionDenied(refused)
            if record is None or now - record.last_seen >= SEEN_EVERY:
                record = AgentRecord(name, self.owner, now, now) if record is None \
                    else replace(record, last_seen=now)
                records[name] = record
        return record

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, AgentRecord]]:
        """The records under the file's lock, to change in place: written (atomically)
        when they changed, unless the block raised."""
        with statefile.locked(self._lock_path), refused_when_full():
            records = self._read()
            before = dict(records)
            yield records
            if records != before:
                data = {"agents": {n: r.stored() for n, r in sorted(records.items())}}
                statefile.write_atomically(self.path, json.dumps(data, indent=1) + "\n")
        with self._mutex:
            self._records = records
            self._signature = None  # our own write: read again at the next miss

    def _own(self, records: dict[str, AgentRecord], name: str) -> AgentRecord:
        record = records.get(name)
        if record is None:
            known = ", ".join(sorted(records)) or "none yet"
            raise NotFound(f"no agent named {name!r} (registered: {known})")
        if record.uid != self.owner:
            raise PermissionDenied(f"agent {name!r} was registered by uid {record.uid}, not "
                                   f"by uid {self.owner}")
        return record

    def rename(self, old: str, new: str, now: float | None = None) -> AgentRecord:
        """Agent ``old`` goes by ``new`` from now on (same first-seen time); ``old``
        stays in the file, refused with ``new`` as the hint. Returns the new record.
        Raises NotFound (no ``old``), InvalidInput (a bad ``new``; ``new`` known
        already; ``old`` not active), PermissionDenied, NoSpace."""
        now = time.time() if now is None else now
        check_agent_name(new)
        with self._changing() as records:
            record = self._own(records, old)
            if record.state != ACTIVE:
                raise InvalidInput(record.refusal() or f"agent {old!r} is not active")
            if new in records:
                raise InvalidInput(f"agent {new!r} exists already ({records[new].state}): "
                                   "rename to a name never used")
            records[new] = replace(record, name=new, last_seen=now)
            records[old] = replace(record, state=RENAMED, renamed_to=new, changed_at=now)
        return records[new]

    def retire(self, name: str, *, undo: bool = False,
               now: float | None = None) -> AgentRecord:
        """Retire agent ``name`` (its name refused from now on), or with ``undo`` make
        a retired one active again. Raises NotFound, InvalidInput (not in the state
        to change), PermissionDenied, NoSpace."""
        now = time.time() if now is None else now
        want, was = (ACTIVE, RETIRED) if undo else (RETIRED, ACTIVE)
        with self._changing() as records:
            record = self._own(records, name)
            if record.state != was:
                raise InvalidInput(f"agent {name!r} is {record.state}, not {was}")
            records[name] = replace(record, state=want, changed_at=None if undo else now)
        return records[name]
