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
history commit. The
engine's parts: ``engine.history`` reads a store's history for an agent
(history/view.py), ``engine.unrecorded`` the reads for a person looking that record
nothing (read/unrecorded.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from memfs.config import Config
from memfs.store.errors import (
    ABSENT,
    InvalidInput,
    NotAFolder,
    NotFound,
    PathTaken,
    TooLarge,
    refused_when_full,
)
from memfs.store.fs import backing
from memfs.store.fs.globs import compile_glob, literal_prefix
from memfs.store.fs.paths import MemPath, check_component, nameable
from memfs.store.history.repo import SINGLE_PATH_OPS, current_delegate
from memfs.store.history.view import HistoryReads
from memfs.store.parts import Parts, build
from memfs.store.read import near
from memfs.store.read.pages import Page, read_page
from memfs.store.read.unrecorded import UnrecordedReads
from memfs.store.read.versions import FileInfo, Pinned, Version, version_at, version_of
from memfs.store.write.batch import APPEND, DELETE, REPLACE, Queue, Request, Ticket
from memfs.store.write.landing import BatchLanding, check_version
from memfs.store.write.store import Landing


@dataclass(frozen=True)
class Committed:
    """An accepted change: the new version's digest and size, the digest of the
    version it replaced (None: the file was created), and its history commit (None:
    the store keeps no history, or ``unchanged``: the file already held exactly this,
    so nothing was landed or committed)."""

    path: MemPath
    digest: str
    size: int
    previous: str | None
    commit: str | None = None
    unchanged: bool = False

    @property
    def created(self) -> bool:
        return self.previous is None


@dataclass(frozen=True)
class Plan:
    """What an `Engine.update` step does: files to write (bytes) or delete (None),
    keyed by path below the store, the history op and summary, a result for the
    caller, and whether it overrides another agent's claim (``forced``: its commit
    says ``Memfs-Forced: yes``)."""

    writes: dict[str, bytes | None]
    op: str
    summary: str
    result: object = None
    forced: bool = False


RESERVED = ("sessions", "tasks", "decisions")  # folders of a structured store
Reader = Callable[[str], bytes | None]  # path below a store -> its bytes, None if missing
# A caller's own condition on the current version (HTTP's If-Match / If-None-Match):
# the current digest (None: no file) -> whether the change may be made.
Precondition = Callable[[str | None], bool]


class Engine:
    """The way into the stores: every read and write of a file, each checked for the
    agent first (``access``), then handed to the parts below (see memfs/store/
    __init__.py). Built from `Parts` (memfs/store/parts.py: ``Engine(config,
    build(config))``); it builds only what needs it: each store's batch queue
    and its views ``history`` and ``unrecorded``."""

    def __init__(self, config: Config, parts: Parts) -> None:
        self.config = config
        self.root = config.root
        self.seen = parts.seen
        self._stores = parts.stores
        self._staging = parts.staging
        self.access = parts.access
        # The agents' names: the config's, or in personal mode those registered so far.
        self.agents: Collection[str] = parts.access.agents
        self.commit_listeners: list[Callable[[MemPath], None]] = []
        # Each store's single-file changes land in batches (memfs/store/write/batch.py).
        self._queues = {name: Queue(BatchLanding(store, self._staging,
                                                 check_size=self._check_size,
                                                 notify=self._notify))
                        for name, store in self._stores.items()}
        self.history = HistoryReads(self._stores, self.seen, check_access=self.check_access,
                                    readable_stores=self.readable_stores,
                                    current_bytes=self.current_bytes, missing=self.missing)
        self.unrecorded = UnrecordedReads(
            self._stores, check_access=self.check_access,
            pin=lambda agent, path: self.open_version(agent, path, record=False))

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

    # -- identity and access ----------------------------------------------------

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

    def store_dir(self, store: str) -> Path:
        return self.root / "stores" / store

    def store_fd(self, store: str) -> int:
        return self._stores[store].fd

    def sweep_seen(self) -> int:
        """Remove seen records of files that no longer exist, once they are older than
        ``seen_retention_days``; returns how many (see memfs/store/read/seen.py)."""

        def exists(store: str, rel: str) -> bool | None:
            if store not in self._stores:
                return False
            try:
                fd = backing.open_beneath(self._stores[store].fd, tuple(rel.split("/")))
            except (InvalidInput, OSError):
                return None
            if fd is None:
                return False
            os.close(fd)
            return True

        return self.seen.sweep(exists, self.config.seen_retention_days * 86400)

    def planted(self, store: str) -> list[str]:
        """Paths in ``store`` that memfs never shows (see memfs/store/fs/planted.py), for
        the jailed search to skip. Raises InvalidInput when there are absurdly many."""
        return self._stores[store].planted.planted()

    def changed_elsewhere(self) -> list[str]:
        """The stores that another daemon on the root changed since the last call
        (one read of each store's generation; blocking: call from a worker thread)."""
        return [name for name, store in self._stores.items()
                if store.generation.changed_elsewhere()]

    def check_access(self, agent: str, store: str, *, write: bool = False) -> None:
        """NotFound unless ``agent`` is attached to ``store``; PermissionDenied unless
        it may write there, for ``write`` (`Access.check_access`)."""
        self.access.check_access(agent, store, write=write)

    def missing(self, path: MemPath) -> NotFound | None:
        """None when ``path`` exists (a folder, a file, or something memfs hides; a
        store-only path: the store), else the NotFound to raise, with the names near
        the first missing part in the folder above it. No access check. Raises
        InvalidInput when a part on the way is not a folder."""
        store_fd = self._stores[path.store].fd
        found = backing.missing_from(store_fd, path.parts)
        if found is None:
            return None
        return near.no_path(path, found, backing.shown_names(store_fd, path.parts[:found]))

    def require(self, agent: str, path: MemPath) -> None:
        """Raise NotFound (with near names) unless ``agent`` may read ``path.store``
        and ``path`` exists there (see `missing`): what a command that names a file or
        folder to list, search or log checks first."""
        self.check_access(agent, path.store)
        error = self.missing(path)
        if error is not None:
            raise error

    def _not_found(self, path: MemPath) -> NotFound:
        """The NotFound of a file found missing: with near names (see `missing`)."""
        try:
            error = self.missing(path)
        except (InvalidInput, OSError):  # changed meanwhile: the plain answer will do
            error = None
        return error or NotFound(f"{path} does not exist")  # None: it came back meanwhile

    # -- reads --------------------------------------------------------------------

    def _open_current(self, path: MemPath) -> tuple[int, os.stat_result] | None:
        """fd and fstat of the file's current version, or None if it does not exist.
        Raises InvalidInput (a symlink on the way, not a file memfs keeps)."""
        return self._stores[path.store].open_current(path)

    @backing.retry_stale
    def open_version(self, agent: str, path: MemPath, *, record: bool = True,
                     absent: bool = False, is_scan: Callable[[], bool] | None = None,
                     ) -> Pinned:
        """Pin the current version of a file and (with ``record``) record its digest
        as seen by ``agent``. The caller owns ``Pinned.fd`` and must close it.
        ``is_scan`` is asked only when recording would change the agent's record;
        True means the opener is searching, not reading: nothing is recorded.
        ``absent``: observing that the file does not exist counts as a read too (it
        records ABSENT over a digest the agent saw before, so that it may create the
        file again), done by reads and stats, never by scans.

        Raises PermissionDenied, NotFound, InvalidInput (symlink, directory, special).
        """
        self.check_access(agent, path.store)
        opened = self._open_current(path)
        if opened is None:
            if absent:
                self._saw_absent(agent, path)
            raise self._not_found(path)
        fd, st = opened
        try:
            version = version_of(fd, st, remember=True)
            previous = self.seen.get(agent, path)
            if record and previous != version.digest and not (is_scan and is_scan()):
                self.seen.put(agent, path, version.digest)
        except BaseException:
            os.close(fd)
            raise
        return Pinned(fd, version, None if previous == ABSENT else previous, st)

    def _saw_absent(self, agent: str, path: MemPath) -> None:
        seen = self.seen.get(agent, path)
        if seen is not None and seen != ABSENT:
            self.seen.put(agent, path, ABSENT)

    @backing.retry_stale
    def read_bytes(self, agent: str, path: MemPath) -> tuple[bytes, Pinned]:
        """The whole content of the current version, recorded as seen (its absence
        too)."""
        pinned = self.open_version(agent, path, absent=True)
        with backing.closing_fd(pinned.fd):
            return backing.read_all(pinned.fd, pinned.version.size), pinned

    @backing.retry_stale
    def read_page(self, agent: str, path: MemPath, offset: int,
                  limit: int | None) -> tuple[Page, Pinned]:
        """Lines ``[offset, offset + limit)`` of the current version, which is recorded
        as seen (its absence too); memory bounded by the page (memfs/store/read/pages.py)."""
        pinned = self.open_version(agent, path, absent=True)
        with backing.closing_fd(pinned.fd):
            return read_page(pinned.fd, offset, limit, pinned.version.size), pinned

    def info(self, agent: str, path: MemPath) -> FileInfo:
        """Digest, size and last writer of the current version; records nothing but
        the file's absence."""
        pinned = self.open_version(agent, path, record=False, absent=True)
        os.close(pinned.fd)
        return FileInfo.of(path, pinned.version, pinned.previous)

    def changed_since_seen(self, agent: str, limit: int = 20) -> list[dict[str, Any]]:
        """Files in the agent's stores that changed (or went) since it last read or
        wrote them, among its most recent records; who changed them and when. The
        folders a structured store keeps itself are left out (they change with every
        operation; the brief shows them its own way)."""
        readable = set(self.readable_stores(agent))
        changed: list[dict[str, Any]] = []
        for store, rel, digest in self.seen.recorded(agent, newest=limit * 5):
            if store not in readable or digest == ABSENT or len(changed) >= limit:
                continue
            path = _mem_path(store, rel)
            if path.parts[0] in RESERVED and self.config.stores[store].structured:
                continue
            try:
                opened = self._open_current(path)
            except InvalidInput:
                continue
            if opened is None:
                changed.append({"path": str(path), "deleted": True, "last_writer": None,
                                "last_written_at": None})
                continue
            with backing.closing_fd(opened[0]):
                version = version_of(*opened, remember=True)
            if version.digest != digest:
                changed.append({"path": str(path), "deleted": False,
                                "last_writer": version.last_write.agent,
                                "last_written_at": version.last_write.at})
        return changed

    @backing.retry_stale
    def current_bytes(self, path: MemPath) -> bytes | None:
        """The current content (no access check, no record); None if missing."""
        opened = self._open_current(path)
        if opened is None:
            return None
        fd, st = opened
        with backing.closing_fd(fd):
            return backing.read_all(fd, version_of(fd, st).size)

    @backing.retry_stale
    def _read_current(self, path: MemPath) -> tuple[Version, bytes]:
        """The current version and its bytes. Raises NotFound, InvalidInput."""
        opened = self._open_current(path)
        if opened is None:
            raise self._not_found(path)
        fd, st = opened
        with backing.closing_fd(fd):
            version = version_of(fd, st)
            return version, backing.read_all(fd, version.size)

    @backing.retry_stale
    def current_digest(self, path: MemPath) -> str | None:
        """Digest of what a read would return now (no access check, no record)."""
        opened = self._open_current(path)
        if opened is None:
            return None
        fd, st = opened
        with backing.closing_fd(fd):
            return version_of(fd, st).digest

    def list(self, agent: str, patterns: list[str]) -> list[str]:
        """``STORE/PATH`` of every regular file the agent may read that matches one of
        the globs (all files when there is none), sorted. The part of a glob before
        its first wildcard (all of it, if it has none) must name a store of the agent
        and a folder or file there; else NotFound, with near names (see `require`)."""
        stores = self.readable_stores(agent)
        mounts = ("/memory/", str(self.config.mount).rstrip("/") + "/")
        wanted = [_unmounted(p, mounts).lstrip("/") for p in patterns] or ["**"]
        found: set[str] = set()
        for pattern in wanted:
            regex = compile_glob(pattern)
            literal = literal_prefix(pattern)
            if literal:
                for name in literal:
                    check_component(name)  # "..", ".": refused, never walked
                self.require(agent, MemPath(literal[0], literal[1:]))
            for store in [literal[0]] if literal else stores:
                for entry in backing.walk_files(self._stores[store].fd):
                    name = f"{store}/{entry.rel}"
                    if not nameable(name):
                        continue  # cannot be named in a request; the mount still shows it
                    if regex.match(name):
                        found.add(name)
        return sorted(found)

    # -- writes -------------------------------------------------------------------

    def write(self, agent: str, path: MemPath, data: bytes, *, append: bool = False,
              force: bool = False, expected: str | None = None,
              precondition: Precondition | None = None) -> Committed:
        """Replace (or create) the file with ``data``, or append ``data`` to it.

        Replace is accepted only if the agent's seen digest equals the current one, or
        the file does not exist and the agent's record does not say it saw a version
        (no record, or ABSENT), or ``force``; otherwise Conflict. ``expected``, when
        given, is what the caller's own connection last saw (a digest, or ABSENT: "I
        saw no file here"), and must be current too: it tells apart two processes of
        one agent, which share the agent's record. Append needs no prior read and
        never loses data. A replace that passes the check with the bytes the file
        already holds (also an edit or restore that gives them, or an empty append)
        changes nothing: the result says ``unchanged``, with no commit, and a replace
        records the version as seen by the writer. ``precondition``, when given, must
        hold for the current version, checked under the store lock like the rest, also
        with ``force`` and for an append (else ConditionFailed). Raises
        PermissionDenied, InvalidInput, TooLarge, Conflict.
        """
        self.check_access(agent, path.store, write=True)
        self._plain_write(path)
        self._check_size(len(data))
        if append:
            return self._append(agent, path, data, precondition)
        return self._replace(agent, path, data, expected=expected, force=force, op="write",
                             precondition=precondition)

    def edit(self, agent: str, path: MemPath, transform: Callable[[bytes], bytes], *,
             force: bool = False, expected: str | None = None,
             precondition: Precondition | None = None) -> Committed:
        """Apply ``transform`` (e.g. a jailed sed) to the current bytes and commit the
        result through the same version check as ``write`` (``expected`` and
        ``precondition`` too). The check is made before the transform runs and again at
        commit; a transform error changes nothing."""
        self.check_access(agent, path.store, write=True)
        self._plain_write(path)
        base, data = self._read_current(path)
        self._check(agent, path, base, expected, precondition, force=force)
        new = transform(data)
        self._check_size(len(new))
        return self._replace(agent, path, new, expected=base.digest, force=force, op="edit",
                             precondition=precondition)

    def restore(self, agent: str, path: MemPath, rev: str, *, force: bool = False,
                expected: str | None = None,
                precondition: Precondition | None = None) -> Committed:
        """Write the content ``path`` had at ``rev`` back, as a new commit naming that
        revision: an ordinary version-checked replace (``expected`` and
        ``precondition`` too). Restoring a deleted file recreates it (nothing is
        overwritten; a ``precondition`` must still hold). Raises PermissionDenied,
        NotFound (no history, no such revision, no such file then), InvalidInput,
        Conflict."""
        self.check_access(agent, path.store, write=True)
        self._plain_write(path)
        commit, data = self.history.version_at(agent, path, rev)
        self._check_size(len(data))
        return self._replace(agent, path, data, expected=expected, force=force, op="restore",
                             summary=f"restore {path} to {commit[:7]}", create_freely=True,
                             precondition=precondition)

    def delete(self, agent: str, path: MemPath, *, force: bool = False,
               expected: str | None = None,
               precondition: Precondition | None = None) -> Committed:
        """Remove the file; version-checked like a replace (``expected`` and
        ``precondition`` too). Raises NotFound, Conflict."""
        self.check_access(agent, path.store, write=True)
        self._plain_write(path)
        ticket = Ticket(Request(DELETE, agent, self._email(agent), path, "delete",
                                f"delete {path}", expected=expected, force=force,
                                precondition=precondition, delegate=current_delegate()))
        self._submit(ticket, create=False)
        return self._committed(ticket)

    def update(self, agent: str | None, store: str,
               decide: Callable[[Reader], Plan]) -> tuple[Any, str | None]:
        """One indivisible step under the store lock, for the memory model: ``decide``
        reads the current files (``read(rel)``: bytes, or None when missing) and
        returns a Plan; its files are staged and landed together, as one history
        commit. It records no seen version for the writer (see below). ``agent``
        None: memfs itself (a repair; no access check). Returns (the plan's result,
        the commit id). Raises PermissionDenied,
        whatever ``decide`` raises (then nothing changed), TooLarge, InvalidInput."""
        if agent is not None:
            self.check_access(agent, store, write=True)
        author = agent or "memfs"
        handles = self._stores[store]
        landings: list[Landing] = []
        with contextlib.ExitStack() as cleanup:
            with handles.locked():
                plan = decide(lambda rel: self.current_bytes(_mem_path(store, rel)))
                if not plan.writes:
                    return plan.result, None
                if plan.op in SINGLE_PATH_OPS:  # the log reads those as one-path commits
                    raise ValueError(f"a plan's op cannot be {plan.op!r}")
                # Several files wait in the store's landing directory, so that a crash
                # at any point lands all of them or none (see write/store.py).
                into = handles.landing_fd if len(plan.writes) > 1 else None
                for rel, data in sorted(plan.writes.items()):
                    path = _mem_path(store, rel)
                    parent = self._parent(path, create=data is not None)
                    cleanup.callback(os.close, parent)
                    version_at(parent, path.parts[-1])  # a directory or symlink: refused now
                    if data is None:
                        landings.append(Landing(path, parent, None, record=False, forget=True))
                        continue
                    self._check_size(len(data))
                    blob = handles.blob(data)
                    staged = cleanup.enter_context(
                        self._staging.stage(data, author, _hex(blob), into=into))
                    # No seen record for the writer: these files are only ever changed
                    # by such steps, which read what is there under the lock.
                    landings.append(Landing(path, parent, staged, blob, record=False))
                commit = handles.land(author, self._email(author), landings, op=plan.op,
                                      summary=plan.summary, forced=plan.forced)
            for parent in {landing.parent for landing in landings}:
                os.fsync(parent)
        for landing in landings:
            self._notify(landing.path)
        return plan.result, commit

    # -- commit machinery ------------------------------------------------------------

    def _plain_write(self, path: MemPath) -> None:
        """Refuse a plain write into the folders a structured store keeps itself."""
        if path.parts[0] in RESERVED and self.config.stores[path.store].structured:
            command = {"sessions": "session", "tasks": "task", "decisions": "decision"}
            raise InvalidInput(
                f"{path}: {path.parts[0]}/ of store {path.store} is written only by its "
                f"operations; use `memfs {command[path.parts[0]]} ...` (or the matching "
                "MCP tool)")

    def _check_size(self, size: int) -> None:
        if size > self.config.max_file_size:
            raise TooLarge(f"content is {size} bytes; the limit is max_file_size = "
                           f"{self.config.max_file_size} bytes", size, self.config.max_file_size)

    def _email(self, agent: str) -> str:
        spec = self.config.agents.get(agent)
        return (spec.email if spec is not None and spec.email else None) or \
            f"{agent}@memfs.invalid"

    def _parent(self, path: MemPath, *, create: bool) -> int:
        try:
            with refused_when_full():  # no room for a new folder
                return backing.walk_parent(self._stores[path.store].fd, path.parts,
                                           create=create)
        except FileNotFoundError:
            raise self._not_found(path) from None
        except NotAFolder as error:
            if not create:
                raise  # nothing there: not found
            raise PathTaken(f"{path} cannot be made: {error}") from None

    def _made_parent(self, agent: str, path: MemPath,
                     precondition: Precondition | None) -> int:
        """`_parent`, making missing folders, unless ``precondition`` refuses a missing
        file: then ConditionFailed, and no folder is made for nothing."""
        if precondition is not None and not precondition(None):
            try:
                return self._parent(path, create=False)
            except NotFound:  # no folder, so no file: the precondition fails now
                self._check(agent, path, None, None, precondition, force=True)
        return self._parent(path, create=True)

    def _check(self, agent: str, path: MemPath, current: Version | None,
               expected: str | None, precondition: Precondition | None = None, *,
               force: bool = False) -> None:
        """Raise ConditionFailed or Conflict unless ``agent`` may change ``path`` from
        ``current`` (landing.check_version, with the agent's record on disk)."""
        check_version(agent, path, current, lambda: self.seen.get(agent, path), expected,
                      precondition, force=force)

    def _replace(self, agent: str, path: MemPath, data: bytes, *, expected: str | None,
                 force: bool, op: str, summary: str | None = None,
                 create_freely: bool = False,
                 precondition: Precondition | None = None) -> Committed:
        """Land ``data`` as the new version of ``path`` in the store's next batch, if
        the version check allows it then (``create_freely``: creating a missing file
        needs no check of the record, only of ``precondition``). Answered once the
        change is durable (memfs/store/write/landing.py)."""
        store = self._stores[path.store]
        git = str(pygit2.hash(data)) if store.history is not None else None
        ticket = Ticket(Request(REPLACE, agent, self._email(agent), path, op,
                                summary or f"{op} {path}", data=data, git=git,
                                expected=expected, force=force, create_freely=create_freely,
                                precondition=precondition, delegate=current_delegate()))
        self._submit(ticket, create=True)
        return self._committed(ticket)

    def _append(self, agent: str, path: MemPath, data: bytes,
                precondition: Precondition | None) -> Committed:
        """Append in the store's next batch, so no concurrent append is lost. An
        existing file grows in place (the cost is that of ``data``, not of the file;
        the appends of a batch to one file are written at once); a missing one is
        created like a write."""
        ticket = Ticket(Request(APPEND, agent, self._email(agent), path, "append",
                                f"append {path}", data=data, precondition=precondition,
                                delegate=current_delegate()))
        self._submit(ticket, create=True)
        return self._committed(ticket)

    def _submit(self, ticket: Ticket, *, create: bool) -> None:
        """Queue ``ticket`` in its store's next batch and wait for its answer, with
        the folder of its file open (``create``: made if missing)."""
        request = ticket.request
        path = request.path
        if create:
            ticket.parent = self._made_parent(request.agent, path, request.precondition)
        else:
            ticket.parent = self._parent(path, create=False)
        try:
            self._queues[path.store].submit(ticket)
        finally:
            os.close(ticket.parent)
            if ticket.staged is not None:
                self._staging.discard(ticket.staged)

    def _committed(self, ticket: Ticket) -> Committed:
        """What an answered ticket says, or its error raised."""
        answer = ticket.answer
        if answer.error is not None:
            raise answer.error
        if answer.missing:
            raise self._not_found(ticket.request.path)
        assert answer.digest is not None
        return Committed(ticket.request.path, answer.digest, answer.size, answer.previous,
                         answer.commit, answer.unchanged)

    def _notify(self, path: MemPath) -> None:
        for listener in self.commit_listeners:
            with contextlib.suppress(Exception):  # a cache hint must never fail a commit
                listener(path)


# -- helpers -------------------------------------------------------------------------




def _hex(blob: pygit2.Oid | None) -> str | None:
    return None if blob is None else str(blob)


def _mem_path(store: str, rel: str) -> MemPath:
    return MemPath(store, tuple(rel.split("/")))


def _unmounted(pattern: str, mounts: tuple[str, ...]) -> str:
    """A glob given under the mount point (/memory/... or the configured one) as
    STORE/PATH."""
    for prefix in mounts:
        if pattern.startswith(prefix):
            return pattern[len(prefix):]
    return pattern
