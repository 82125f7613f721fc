"""The agents of a personal memory: names registered on first use.

In personal mode (memfs/config.py ``PersonalConfig``) one uid, the owner, runs every
agent, and names the agent on each request. A valid name (1-64 letters, digits, '.',
'_', '-') that is new is registered by its first use; ``ROOT/state/agents.json``
(mode 0600, shared by the daemons on the root) keeps each name with the uid that
registered it and when it was first and last seen. A name is never removed or given
to another identity: a request naming an agent that another uid registered is
refused.

Changes are made under an flock (``ROOT/state/locks/agents.lock``) by re-reading the
file, written atomically (memfs/store/statefile.py). A name once known is answered
from memory (names are never removed); an unknown one re-reads the file when it
changed. Last-seen times are written at most once a minute per agent, by the request
that finds its time stale: no disk write for almost every request.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from memfs.config import check_name
from memfs.errors import MemfsError
from memfs.store import statefile
from memfs.store.errors import InvalidInput, PermissionDenied, refused_when_full

SEEN_EVERY = 60.0  # seconds: how stale a written last-seen time may get


@dataclass(frozen=True)
class AgentRecord:
    name: str
    uid: int
    first_seen: float
    last_seen: float


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
        if name in self._records:  # never removed: a name once seen stays
            return True
        try:
            return name in self._refresh()
        except MemfsError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._refresh()))

    def __len__(self) -> int:
        return len(self._refresh())

    def list(self) -> list[AgentRecord]:
        """Every registered agent, by name."""
        return sorted(self._refresh().values(), key=lambda record: record.name)

    # -- using ----------------------------------------------------------------------

    def use(self, name: str, now: float | None = None) -> AgentRecord:
        """The record of agent ``name`` as the owner uses it: registered now if new,
        its last-seen time noted (written when SEEN_EVERY old). Raises InvalidInput
        (not a valid name), PermissionDenied (registered by another uid), NoSpace,
        MemfsError (the file cannot be read)."""
        now = time.time() if now is None else now
        record = self._records.get(name)
        if record is not None and record.uid == self.owner and \
                now - record.last_seen < SEEN_EVERY:
            return record
        try:
            check_name("agent", name)
        except ValueError as error:
            raise InvalidInput(str(error)) from None
        with statefile.locked(self._lock_path), refused_when_full():
            records = self._read()
            record = records.get(name)
            if record is not None and record.uid != self.owner:
                raise PermissionDenied(
                    f"agent {name!r} of this memory was registered by uid {record.uid}, not "
                    f"by uid {self.owner}: a name never changes hands; pick another name")
            if record is None or now - record.last_seen >= SEEN_EVERY:
                record = AgentRecord(name, self.owner, now, now) if record is None \
                    else replace(record, last_seen=now)
                records[name] = record
                data = {"agents": {n: {k: v for k, v in asdict(r).items() if k != "name"}
                                   for n, r in sorted(records.items())}}
                statefile.write_atomically(self.path, json.dumps(data, indent=1) + "\n")
        with self._mutex:
            self._records = records
            self._signature = None  # our own write: read again at the next miss
        return record
