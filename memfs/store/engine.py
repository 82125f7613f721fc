"""The store engine: versioned files, per-agent seen digests, atomic durable commits.

Layout under ROOT::

    stores/STORE/...             the content, exactly the files agents see
    state/seen/AGENT/STORE/...   digest each agent last read or wrote (read/seen.py)
    state/staging/DAEMON/        new bytes before they are renamed into place
    state/locks/STORE.lock       flock'd by the daemon committing to STORE
    state/intents/STORE          the intent of STORE's landing under way (write/intents.py)
    state/landing/STORE/         files of a change of several files, until it lands
    state/history/STORE.git      the store's git history (history/repo.py)
    state/agents.json            personal mode: the agents registered by name (access/agents.py)

The engine is synchronous and thread-safe: the daemon calls it from trio worker
threads. Several engines (daemons) may share one ROOT: the store lock is an flock on
a shared file and every decision reads the shared on-disk state. Every accepted change
lands under the store lock: a single-file change in a batch of the changes sent to its
store meanwhile, each checked in turn, their durability shared (write/batch.py,
write/landing.py), a change of several files on its own (write/store.py); each is one
history commit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from memfs.config import Config
from memfs.store.errors import NotFound
from memfs.store.fs.paths import MemPath
from memfs.store.history.view import HistoryReads
from memfs.store.parts import Parts, build
from memfs.store.read.pages import Page
from memfs.store.read.reads import Reads
from memfs.store.read.unrecorded import UnrecordedReads
from memfs.store.read.versions import FileInfo, Pinned
from memfs.store.write.writes import Committed, Plan, Precondition, Reader, Writes

__all__ = ["Committed", "Engine", "Plan", "Precondition", "Reader"]


class Engine:
    """The way into the stores, a facade: it holds the parts that the composition root
    hands it (`Parts`, memfs/store/parts.py: ``Engine(config, build(config))``) and the
    views it builds of them, and passes each call on:

    * who is asking and what they may touch: ``access`` (`Access`,
      memfs/store/access/access.py): agent_for, check_delegation, use_agent,
      readable_stores, check_access;
    * an agent's reads, recorded as seen: ``reads`` (`Reads`, memfs/store/read/reads.py):
      open_version, read_bytes, read_page, info, changed_since_seen, list, require,
      missing, current_bytes, current_digest;
    * an agent's changes: ``writes`` (`Writes`, memfs/store/write/writes.py): write,
      edit, restore, delete, update; it calls ``commit_listeners``;
    * a store's history for an agent: ``history`` (`HistoryReads`,
      memfs/store/history/view.py), used directly;
    * a person's reads that record nothing: ``unrecorded`` (`UnrecordedReads`,
      memfs/store/read/unrecorded.py), used directly;
    * the seen records: ``seen`` (sweep_seen); the stores themselves: recover,
      maintain, observe_commits, planted, changed_elsewhere, store_fd, close.

    Every read and write checks the agent's access first."""

    def __init__(self, config: Config, parts: Parts) -> None:
        self.config = config
        self.root = config.root
        self.seen = parts.seen
        self._stores = parts.stores
        self._staging = parts.staging
        self.access = parts.access
        # The agents' names: the config's, or in personal mode those registered so far.
        self.agents: Collection[str] = parts.access.agents
        self.reads = Reads(config, self._stores, self.seen,
                           check_access=self.access.check_access,
                           readable_stores=self.access.readable_stores)
        self.history = HistoryReads(self._stores, self.seen,
                                    check_access=self.access.check_access,
                                    readable_stores=self.access.readable_stores,
                                    current_bytes=self.reads.current_bytes,
                                    missing=self.reads.missing)
        self.writes = Writes(config, self._stores, self._staging, self.seen, self.reads,
                             check_access=self.access.check_access,
                             version_at=self.history.version_at)
        # Called with the path of every change landed (a cache hint; never fails one).
        self.commit_listeners: list[Callable[[MemPath], None]] = self.writes.commit_listeners
        self.unrecorded = UnrecordedReads(
            self._stores, check_access=self.access.check_access,
            pin=lambda agent, path: self.reads.open_version(agent, path, record=False))

    @classmethod
    def of(cls, config: Config) -> Engine:
        """An engine with the parts that `build` (memfs/store/parts.py) makes for
        ``config``: for tests and tools; the daemon builds them itself."""
        return cls(config, build(config))

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._staging.close()
        self._stores.clear()

    def observe_commits(self, observer: Callable[[float], None] | None) -> None:
        """Call ``observer`` for every change that lands with the duration in seconds
        of its landing step (the locked part of a commit, for a batch of changes the
        batch's: renames, records, history), in the committing thread; None stops it.
        For the daemon's metrics."""
        for store in self._stores.values():
            store.observe_land = observer

    def recover(self) -> dict[str, list[str]]:
        """At start-up: per store, under its lock, finish a change a crashed daemon
        left half done and record in history what differs from the files (see
        memfs/store/write/store.py). Returns the paths recorded, by store."""
        recorded = {}
        for name, store in self._stores.items():
            with store.locked():
                recorded[name] = store.recover()
        return recorded

    def maintain(self) -> None:
        """Make recent history commits durable, pack loose objects when many, and
        remove the packs a merge replaced once their grace is over (the daemon calls it
        every second in a worker thread)."""
        for store in self._stores.values():
            if store.history is not None:
                store.history.sync()
                if store.history.needs_pack():
                    store.history.pack()
                store.history.retire()

    # -- the stores ------------------------------------------------------------------

    def store_dir(self, store: str) -> Path:
        return self.root / "stores" / store

    def store_fd(self, store: str) -> int:
        return self._stores[store].fd

    def sweep_seen(self) -> int:
        """Remove seen records of files that no longer exist, once they are older than
        ``seen_retention_days``; returns how many (see memfs/store/read/seen.py)."""
        return self.seen.sweep(self.reads.exists, self.config.seen_retention_days * 86400)

    def planted(self, store: str) -> list[str]:
        """Paths in ``store`` that memfs never shows (see memfs/store/fs/planted.py), for
        the jailed search to skip. Raises InvalidInput when there are absurdly many."""
        return self._stores[store].planted.planted()

    def changed_elsewhere(self) -> list[str]:
        """The stores that another daemon on the root changed since the last call
        (one read of each store's generation; blocking: call from a worker thread)."""
        return [name for name, store in self._stores.items()
                if store.generation.changed_elsewhere()]

    # -- identity and access: `Access` -----------------------------------------------

    def agent_for(self, uid: int, as_agent: str | None = None) -> str:
        """The agent a kernel-verified uid acts as (`Access.agent_for`)."""
        return self.access.agent_for(uid, as_agent)

    def check_delegation(self, uid: int, agent: str) -> None:
        """PermissionDenied unless delegate ``uid`` may act for ``agent``
        (`Access.check_delegation`)."""
        self.access.check_delegation(uid, agent)

    def use_agent(self, agent: str) -> None:
        """Note that ``agent`` is acting (`Access.use_agent`: personal mode registers
        it)."""
        self.access.use_agent(agent)

    def readable_stores(self, agent: str) -> list[str]:
        """The stores ``agent`` may read, sorted (`Access.readable_stores`)."""
        return self.access.readable_stores(agent)

    def check_access(self, agent: str, store: str, *, write: bool = False) -> None:
        """NotFound unless ``agent`` is attached to ``store``; PermissionDenied unless
        it may write there, for ``write`` (`Access.check_access`)."""
        self.access.check_access(agent, store, write=write)

    # -- reads: `Reads` ----------------------------------------------------------------

    def missing(self, path: MemPath) -> NotFound | None:
        """The NotFound of ``path`` with near names, None if it exists (`Reads.missing`)."""
        return self.reads.missing(path)

    def require(self, agent: str, path: MemPath) -> None:
        """NotFound unless ``agent`` may read ``path`` and it exists (`Reads.require`)."""
        self.reads.require(agent, path)

    def open_version(self, agent: str, path: MemPath, *, record: bool = True,
                     absent: bool = False, is_scan: Callable[[], bool] | None = None,
                     ) -> Pinned:
        """The current version pinned, recorded as seen (`Reads.open_version`)."""
        return self.reads.open_version(agent, path, record=record, absent=absent,
                                       is_scan=is_scan)

    def read_bytes(self, agent: str, path: MemPath) -> tuple[bytes, Pinned]:
        """The whole current version, recorded as seen (`Reads.read_bytes`)."""
        return self.reads.read_bytes(agent, path)

    def read_page(self, agent: str, path: MemPath, offset: int,
                  limit: int | None) -> tuple[Page, Pinned]:
        """Lines of the current version, recorded as seen (`Reads.read_page`)."""
        return self.reads.read_page(agent, path, offset, limit)

    def info(self, agent: str, path: MemPath) -> FileInfo:
        """Digest, size and last writer of the current version (`Reads.info`)."""
        return self.reads.info(agent, path)

    def changed_since_seen(self, agent: str, limit: int = 20) -> list[dict[str, Any]]:
        """Files changed since ``agent`` last saw them (`Reads.changed_since_seen`)."""
        return self.reads.changed_since_seen(agent, limit)

    def current_bytes(self, path: MemPath) -> bytes | None:
        """The current content, no check, no record (`Reads.current_bytes`)."""
        return self.reads.current_bytes(path)

    def current_digest(self, path: MemPath) -> str | None:
        """The current digest, no check, no record (`Reads.current_digest`)."""
        return self.reads.current_digest(path)

    # -- writes: `Writes` --------------------------------------------------------------

    def write(self, agent: str, path: MemPath, data: bytes, *, append: bool = False,
              force: bool = False, expected: str | None = None,
              precondition: Precondition | None = None) -> Committed:
        """Replace, create or append to a file, version-checked (`Writes.write`)."""
        return self.writes.write(agent, path, data, append=append, force=force,
                                 expected=expected, precondition=precondition)

    def edit(self, agent: str, path: MemPath, transform: Callable[[bytes], bytes], *,
             force: bool = False, expected: str | None = None,
             precondition: Precondition | None = None) -> Committed:
        """Replace a file with ``transform`` of it, version-checked (`Writes.edit`)."""
        return self.writes.edit(agent, path, transform, force=force, expected=expected,
                                precondition=precondition)

    def restore(self, agent: str, path: MemPath, rev: str, *, force: bool = False,
                expected: str | None = None,
                precondition: Precondition | None = None) -> Committed:
        """Write back what a file held at ``rev``, version-checked (`Writes.restore`)."""
        return self.writes.restore(agent, path, rev, force=force, expected=expected,
                                   precondition=precondition)

    def delete(self, agent: str, path: MemPath, *, force: bool = False,
               expected: str | None = None,
               precondition: Precondition | None = None) -> Committed:
        """Remove a file, version-checked (`Writes.delete`)."""
        return self.writes.delete(agent, path, force=force, expected=expected,
                                  precondition=precondition)

    def update(self, agent: str | None, store: str,
               decide: Callable[[Reader], Plan]) -> tuple[Any, str | None]:
        """One indivisible step of the memory model under the store lock, its files
        landed as one commit (`Writes.update`)."""
        return self.writes.update(agent, store, decide)

    # Last: in the class body after it, ``list`` names this method.
    def list(self, agent: str, patterns: list[str]) -> list[str]:
        """``STORE/PATH`` of the agent's files matching the globs, sorted (`Reads.list`)."""
        return self.reads.list(agent, patterns)
