"""Landing accepted changes in a store, and recovering from a landing cut short.

A change is accepted by the engine's version checks under the store lock; landing it
is then one step under the same lock:

1. the *intent* (writer, paths, new digests) is set as an xattr of the store's lock
   file, so whoever takes the lock next can finish what a crash interrupted;
2. the staged files are renamed into place (or the files unlinked);
3. the writer's seen records are updated;
4. the history commit is made (memfs/store/history.py), so commit order is
   acceptance order, across daemons too;
5. the intent is removed.

Whoever takes a store lock and finds an intent there (its holder died between 1 and
5) repairs it before anything else: the writer's records are set for the paths that
hold the intended version, and the history records what the files now hold as a
``recover:`` commit. At start-up `recover` also compares the whole tree of ``main``
with the files (an operator's changes, a damaged repository).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2

from memfs.store import backing
from memfs.store.errors import InvalidInput, NoSpace, refused_when_full
from memfs.store.generation import Generation
from memfs.store.history import Change, HistoryError, StoreHistory, message_for
from memfs.store.paths import MemPath
from memfs.store.planted import PlantedIndex
from memfs.store.seen import SeenRecords
from memfs.store.staging import Staged
from memfs.store.versions import Version, appending, mark_appending, stamp, version_of

log = logging.getLogger("memfs.store")

PENDING = "user.memfs.pending"


@dataclass
class Landing:
    """One path of an accepted change: the new version staged (None: delete it), its
    git blob (None without history), and what becomes of the writer's record: put the
    new digest (``record``), forget it (``forget``), or leave it (neither)."""

    path: MemPath
    parent: int  # fd of the directory holding the file
    staged: Staged | None
    blob: pygit2.Oid | None = None
    record: bool = True
    forget: bool = False

    @property
    def digest(self) -> str | None:
        return None if self.staged is None else self.staged.digest


class Store:
    """One store's handles: its directory fd, lock, planted index and history."""

    def __init__(self, name: str, directory: Path, lock_path: Path,
                 history_path: Path | None, seen: SeenRecords) -> None:
        self.name = name
        directory.mkdir(mode=backing.DIR_MODE, exist_ok=True)
        self.fd = os.open(directory, backing.DIR_FLAGS)
        self.planted = PlantedIndex(self.fd)
        self.seen = seen
        self._thread_lock = threading.Lock()
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.generation = Generation(self._lock_fd)  # bumped by every landing
        self.history = None if history_path is None else StoreHistory(history_path, name)
        self.observe_land: Callable[[float], None] | None = None  # seconds per landing

    def close(self) -> None:
        os.close(self.fd)
        os.close(self._lock_fd)

    # -- the lock -----------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive: a thread lock for this process plus an flock on a shared file for
        other daemons on the root. Held only inside engine calls, so a client that
        vanishes can never strand it. A landing a dead holder left is repaired first."""
        with self._thread_lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                intent = self._unfinished()
                if intent is not None:
                    self._repair(intent)
                    self.generation.bump()  # its files may have changed: tell the others
                    self._head = self._head_now()
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _unfinished(self) -> dict[str, object] | None:
        """The intent of a landing that did not finish, if any. A landing's intent
        stays on the lock file and names the head of ``main`` it started from: once its
        commit moved ``main``, it is finished (one xattr write per landing, none to
        clear it). Sets ``self._head``, the head now (valid while the lock is held)."""
        self._head = None
        unreadable = False
        if self.history is not None:
            try:
                self._head = self.history.head_id()
            except HistoryError:
                unreadable = True  # repair what is pending (recovery rebuilds the rest)
        try:
            raw = os.getxattr(self._lock_fd, PENDING)
        except OSError as error:
            if error.errno in (errno.ENODATA, errno.ENOTSUP):
                return None
            raise
        try:
            intent = json.loads(raw)
        except ValueError:
            intent = {}
        if not isinstance(intent, dict):
            intent = {}
        if self.history is None:  # only appends leave one, cleared when they finish
            return intent
        return intent if unreadable or intent.get("head") == self._head else None

    def _head_now(self) -> str | None:
        try:
            return None if self.history is None else self.history.head_id()
        except HistoryError:
            return None

    def _clear_intent(self) -> None:
        with contextlib.suppress(OSError):
            os.removexattr(self._lock_fd, PENDING)

    # -- landing ------------------------------------------------------------------------

    def land(self, agent: str, email: str, landings: list[Landing], *, op: str,
             summary: str, forced: bool = False) -> str | None:
        """Land an accepted change (the caller holds `locked` and made its checks):
        intent, renames and unlinks, the writer's records, the history commit.
        Returns the commit id (None without history). A history failure is logged and
        left to recovery: the change itself stands. Without history there is no
        intent: a crash between the rename and the writer's record then only costs
        the writer a conflict that names itself (see errors.Conflict). Its duration
        goes to ``observe_land`` when set (the daemon's commit latency metric)."""
        start = time.perf_counter()
        try:
            return self._land(agent, email, landings, op=op, summary=summary, forced=forced)
        finally:
            if self.observe_land is not None:
                self.observe_land(time.perf_counter() - start)

    def _land(self, agent: str, email: str, landings: list[Landing], *, op: str,
              summary: str, forced: bool) -> str | None:
        intent: dict[str, object] = {
            "agent": agent,
            "head": self._head,
            "paths": {x.path.rel: x.digest for x in landings},
            "record": [x.path.rel for x in landings if x.record or x.forget],
        }
        if self.history is not None:
            with contextlib.suppress(OSError):  # no xattrs: start-up recovery covers it
                os.setxattr(self._lock_fd, PENDING, json.dumps(intent).encode())
        try:
            for landing in landings:
                name = landing.path.parts[-1]
                if landing.staged is not None:
                    landing.staged.move_to(landing.parent, name)
                else:
                    os.unlink(name, dir_fd=landing.parent)
        except BaseException:
            self._repair(intent)  # whatever did land is recorded; the rest never happened
            self.generation.bump()
            raise
        # Still under the lock, the files in place: other daemons notice (generation.py).
        self.generation.bump()
        for landing in landings:
            if landing.forget:
                self.seen.forget(agent, landing.path)
            elif landing.record and landing.staged is not None:
                self._record(agent, landing.path, landing.staged.digest)
        commit = None
        if self.history is not None:
            digest = landings[0].digest if len(landings) == 1 else None
            message = message_for(summary, op, digest, forced)
            try:
                commit = self.history.commit(
                    [Change(x.path.rel, x.blob) for x in landings], author=agent,
                    email=email, message=message, parent=self._head)
            except HistoryError as error:
                log.error("%s (the change stands; it is recorded at the next start)", error)
                return None
            self._head = commit  # finished: the intent names the head it started from
        return commit

    def append(self, agent: str, email: str, path: MemPath, fd: int, old: Version,
               data: bytes, digest: str, *, record: bool) -> str | None:
        """Append ``data`` in place to the file open as ``fd`` (version ``old``; the
        caller holds `locked`): the cost is that of ``data``, not of the file.

        Readers are never shown part of it: the file is marked (versions.appending)
        before the bytes are written and its version record names the old size until
        the new bytes are durable, so a reader's version stays the old one and its
        reads stop at the old size; then the new record (``digest``) is set and the
        mark removed. The intent on the lock file names the old size: if a crash cuts
        the append short, the next holder of the lock truncates the file back
        (`_repair`). Returns the history commit (None without history), whose blob
        is the whole new file (that part costs what the file costs). Raises NoSpace
        when the disk is full (the file is then back to its old size)."""
        start = time.perf_counter()
        try:
            with refused_when_full():
                return self._append(agent, email, path, fd, old, data, digest, record=record)
        finally:
            if self.observe_land is not None:
                self.observe_land(time.perf_counter() - start)

    def _append(self, agent: str, email: str, path: MemPath, fd: int, old: Version,
                data: bytes, digest: str, *, record: bool) -> str | None:
        rel = path.rel
        intent: dict[str, object] = {
            "agent": agent, "head": self._head, "paths": {rel: digest},
            "record": [rel] if record else [], "append": {"rel": rel, "size": old.size},
        }
        with contextlib.suppress(OSError):
            os.setxattr(self._lock_fd, PENDING, json.dumps(intent).encode())
        mark_appending(fd, old.size)
        try:
            offset, view = old.size, memoryview(data)
            while view:
                written = os.pwrite(fd, view, offset)
                offset += written
                view = view[written:]
            os.fsync(fd)
            blob = None
            if self.history is not None:
                blob = self.blob(backing.read_all(fd, old.size) + data)
            stamp(fd, digest, agent, time.time(), None if blob is None else str(blob))
            mark_appending(fd, None)
        except BaseException:
            self._repair(intent, crashed=False)  # back to the old size: it never happened
            raise
        self.generation.bump()
        if record:
            self._record(agent, path, digest)
        commit = None
        if self.history is not None:
            try:
                commit = self.history.commit(
                    [Change(rel, blob)], author=agent, email=email, parent=self._head,
                    message=message_for(f"append {path}", "append", digest, False))
            except HistoryError as error:
                log.error("%s (the change stands; it is recorded at the next start)", error)
                return None
            self._head = commit
        else:
            self._clear_intent()
        return commit

    def blob(self, data: bytes) -> pygit2.Oid | None:
        """The git blob of ``data`` (written now; content-addressed, so safe outside
        the lock), or None without history. Raises NoSpace (the disk is full) or
        HistoryError (the repository cannot be written): a change must not land
        without its blob (a None blob in a commit is a deletion)."""
        if self.history is None:
            return None
        try:
            with refused_when_full():
                return self.history.blob(data)
        except (pygit2.GitError, OSError) as error:
            log.error("cannot write to the history of %s: %s", self.name, error)
            raise HistoryError(f"cannot write to the history of {self.name}: {error}") \
                from error

    def _record(self, agent: str, path: MemPath, digest: str) -> None:
        """Set the writer's record of a change that has landed. A full disk cannot
        undo the change: the record then stays as it was (the writer's next write of
        the path is a conflict naming itself, never a lost update)."""
        try:
            self.seen.put(agent, path, digest)
        except NoSpace:
            log.warning("store %s: the disk is full: %s's record of %s was not updated (the "
                        "change stands)", self.name, agent, path)

    # -- recovery -----------------------------------------------------------------------

    def _repair(self, intent: dict[str, object], *, crashed: bool = True) -> None:
        """Finish a landing whose holder died: an append in place cut short is
        truncated back to its old size; then the writer's records, then history.
        ``crashed`` False: this daemon's own landing failed (e.g. the disk is full) and
        is undone without a warning (the caller reports the failure)."""
        appended = intent.get("append")
        if isinstance(appended, dict):
            self._undo_append(str(appended.get("rel")), appended.get("size"), crashed)
        agent, paths, recorded = intent.get("agent"), intent.get("paths"), intent.get("record")
        if not isinstance(paths, dict):
            paths = {}
        if isinstance(agent, str) and isinstance(recorded, list):
            for rel in recorded:
                if not isinstance(rel, str):
                    continue
                wanted = paths.get(rel)
                path = MemPath(self.name, tuple(rel.split("/")))
                version = self._version(rel)
                now = None if version is None else version.digest
                if wanted is not None and now == wanted:
                    self.seen.put(agent, path, wanted)
                elif wanted is None and now is None:
                    self.seen.forget(agent, path)
        names = [str(rel) for rel in paths]
        if crashed:
            log.warning("store %s: finished a change that a crashed daemon left half done "
                        "(%s)", self.name, ", ".join(names))
        if self.history is not None:
            self._recover_history(names, why="a daemon died during a commit")
        self._clear_intent()

    def _undo_append(self, rel: str, size: object, crashed: bool) -> None:
        """Truncate a file whose append in place was cut short (still marked, its
        record naming the old size) back to that size."""
        if not isinstance(size, int):
            return
        try:
            parent = backing.walk_parent(self.fd, tuple(rel.split("/")), create=False)
        except (OSError, InvalidInput):
            return
        with backing.closing_fd(parent):
            try:
                fd = backing.open_for_append(parent, rel.rsplit("/", 1)[-1])
            except (OSError, InvalidInput):
                return
            if fd is None:
                return
            with backing.closing_fd(fd):
                if appending(fd) != size:
                    return  # finished (the mark is gone) or never begun
                if version_of(fd).size == size:  # the record still names the old size
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                    if crashed:
                        log.warning("store %s: an append to %s was cut short; truncated "
                                    "back to %d bytes", self.name, rel, size)
                mark_appending(fd, None)

    def recover(self) -> list[str]:
        """At start-up, under the lock: repair a pending landing, make sure the history
        is readable (falling back to the durable head, else rebuilding it), and commit
        what differs from the files. Returns the paths recorded."""
        if self.history is None:
            return []
        try:
            self.history.verify()
        except HistoryError as error:
            self._restore_history(error)
        changed = self._recover_history(None, why="the files differed from the history at start")
        self._head = self._head_now()
        return changed

    def _restore_history(self, error: HistoryError) -> None:
        assert self.history is not None
        durable = self.history.durable_head()
        if durable is not None:
            try:
                self.history.reset_to(durable)
                self.history.verify()
                log.error("%s; went back to the last durable commit %s", error, durable[:7])
                return
            except (HistoryError, pygit2.GitError, ValueError):
                pass
        log.error("%s", error)
        self.history.rebuild()

    def _recover_history(self, scope: Iterable[str] | None, *, why: str) -> list[str]:
        """Commit what the files hold where it differs from ``main`` (every file, or
        only the paths in ``scope``)."""
        assert self.history is not None
        if scope is None:
            listing = [(entry.rel, self._git_hint(entry.rel))
                       for entry in backing.walk_files(self.fd) if _nameable(entry.rel)]
            wanted = None
        else:
            wanted = {rel for rel in scope if _nameable(rel)}
            listing = [(rel, None) for rel in sorted(wanted)]
        try:
            changed = self.history.recover(listing, self._read, scope=wanted, why=why)
        except HistoryError as error:  # e.g. disk full: the next start tries again
            log.error("%s", error)
            return []
        if changed:
            log.warning("store %s: recorded %d changed path(s) in history as recover: (%s)",
                        self.name, len(changed), why)
        return changed

    def _open(self, rel: str) -> tuple[int, os.stat_result] | None:
        """The file at ``rel`` if memfs keeps it (None otherwise: missing, planted)."""
        try:
            return backing.open_kept(self.fd, tuple(rel.split("/")))
        except (InvalidInput, OSError):
            return None

    def _version(self, rel: str) -> Version | None:
        opened = self._open(rel)
        if opened is None:
            return None
        with backing.closing_fd(opened[0]):
            return version_of(*opened)

    def _git_hint(self, rel: str) -> str | None:
        """The blob id the file's version record names, if the record is current."""
        version = self._version(rel)
        return None if version is None else version.git

    def _read(self, rel: str) -> bytes | None:
        opened = self._open(rel)
        if opened is None:
            return None
        with backing.closing_fd(opened[0]):
            return backing.read_all(opened[0], opened[1].st_size)


def _nameable(rel: str) -> bool:
    """A name git and the protocol can carry (UTF-8, printable)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return rel.isprintable()

