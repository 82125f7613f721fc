"""What one signed-in person may see: the memory read as the token's agent.

`Look` carries out protocol ops with ``Dispatcher.run`` (the very request models
and access rules of the socket) and the engine's reads that record nothing
(``engine.unrecorded``, memfs/store/read/unrecorded.py). Nothing here writes: the web view
never changes memory, and looking at a file is not the agent reading it (its seen
record is untouched).

The page builders (control/http/web/views*.py) return a `Page` (a template and its
context) or a `Redirect`; they run in a worker thread and raise what the Dispatcher
and the engine raise (the caller turns that into an error page).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from memfs.config import Config
from memfs.control.ops.dispatcher import Dispatcher
from memfs.memory.records import parse_iso
from memfs.store.engine import Engine
from memfs.store.errors import InvalidInput, NotFound
from memfs.store.fs.paths import MemPath, parse_path
from memfs.store.history.repo import parse_time


@dataclass
class Page:
    template: str
    context: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    live: str | None = None  # the store whose commits refresh the page ("*": any)


@dataclass
class Redirect:
    url: str


class Look:
    """Reads for ``agent``, as the socket would do them for it; records nothing."""

    def __init__(self, dispatcher: Dispatcher, agent: str, now: float | None = None) -> None:
        self.dispatcher = dispatcher
        self.agent = agent
        self.now = time.time() if now is None else now

    @property
    def engine(self) -> Engine:
        return self.dispatcher.engine

    @property
    def config(self) -> Config:
        return self.dispatcher.engine.config

    def op(self, op: str, **fields: Any) -> dict[str, Any]:
        """The result of protocol op ``op`` for this agent (None fields left out)."""
        return self.dispatcher.run(self.agent, op, {name: value for name, value in
                                                    fields.items() if value is not None})

    def stores(self) -> dict[str, str]:
        """The agent's stores and access, by name (``whoami``)."""
        stores: dict[str, str] = self.op("whoami")["stores"]
        return {name: access for name, access in sorted(stores.items())
                if name in self.config.stores}

    def store(self, store: str) -> dict[str, Any]:
        """The name, access and kind of a store this agent may read. Raises NotFound
        (no such store), PermissionDenied (not attached), like the socket."""
        if store not in self.config.stores:
            raise NotFound(f"no store named {store!r}")
        self.engine.check_access(self.agent, store)
        spec = self.config.stores[store]
        return {"name": store, "access": self.config.access(self.agent, store),
                "history": spec.history, "structured": spec.structured}


def mem_path(store: str, rel: str, *, allow_store: bool = False) -> MemPath:
    """``store/rel`` checked like any request path. Raises InvalidInput."""
    raw = f"{store}/{rel}" if rel else store
    return parse_path(raw, allow_store_only=allow_store)


_RELATIVE = re.compile(r"(\d{1,6})([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def moment(text: str, now: float) -> float:
    """A time given as ``30m``, ``24h``, ``7d``, ``2w`` (ago) or as a date/time
    (``YYYY-MM-DD[THH:MM[:SS]]``, UTC). Raises InvalidInput."""
    text = text.strip()
    relative = _RELATIVE.fullmatch(text)
    if relative:
        return now - int(relative.group(1)) * _UNIT[relative.group(2)]
    if len(text) > 64:
        raise InvalidInput("a time is at most 64 characters")
    try:
        return parse_time(text)
    except InvalidInput:
        raise InvalidInput(f"bad time {text!r}: use 30m, 24h, 7d (ago) or a UTC time such "
                           "as 2026-11-30T10:00") from None


def expired_at(task: dict[str, Any]) -> float | None:
    """When a task's lease ran out (None: no lease)."""
    lease = task.get("lease")
    if not isinstance(lease, dict) or "expires_at" not in lease:
        return None
    try:
        return parse_iso(str(lease["expires_at"]))
    except (InvalidInput, ValueError):
        return None


def page_number(raw: str | None) -> int:
    """A 1-based page number from the query. Raises InvalidInput."""
    if raw is None:
        return 1
    if not raw.isdigit() or not 1 <= int(raw) <= 1_000_000:
        raise InvalidInput(f"bad page {raw[:20]!r}: a number from 1")
    return int(raw)
