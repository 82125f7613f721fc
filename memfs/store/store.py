"""One store (`Store`): its directory, lock, landing directory and history; landing
accepted changes in it, and finishing a landing a crash cut short.

A change is accepted by the engine's version checks under the store lock; landing it
is then one step under the same lock:

1. its history commit is *prepared*: the trees and the commit object are written, but
   ``main`` does not move yet (memfs/store/history.py), so a history that cannot be
   written (a full disk) refuses the change before any of it lands;
2. the *intent* (writer, paths, new digests, the prepared commit, and for a change of
   several files where each staged file waits) is set as an xattr of the store's lock
   file, so whoever takes the lock next can finish what a crash interrupted;
3. the staged files are renamed into place (or the files unlinked);
4. the writer's seen records are updated;
5. ``main`` moves to the prepared commit, so commit order is acceptance order, across
   daemons too; this finishes the intent (it names the head it started from).

Whoever takes a store lock and finds an unfinished intent (its holder died between 2
and 5) finishes it before anything else, *forward*: the files of a change of several
files that are still waiting in the store's landing directory (``ROOT/state/landing/
STORE/``, staged there before the intent was set) are renamed into place, so such a
change is all or nothing whatever the order of its files; then the writer's records
are set for the paths that hold the intended version, and ``main`` moves to the
prepared commit (the change keeps its author) when the files are what it records,
else the files are recorded as a ``recover:`` commit. At start-up `recover` also
compares the whole tree of ``main`` with the files (an operator's changes, a damaged
repository).
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

from memfs.store import backing, crashpoints
from memfs.store.errors import InvalidInput, NoSpace, refused_when_full
from memfs.store.generation import Generation
from memfs.store.history import (
    Change,
    HistoryError,
    HistoryFull,
    StoreHistory,
    current_delegate,
    message_for,
)
from memfs.store.paths import MemPath, nameable
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
    """One store's handles: its directory fd, lock, landing directory, planted index and
    history."""

    def __init__(self, name: str, directory: Path, lock_path: Path, landing: Path,
                 history_path: Path | None, seen: SeenRecords) -> None:
        self.name = name
        directory.mkdir(mode=backing.DIR_MODE, exist_ok=True)
        self.fd = os.open(directory, backing.DIR_FLAGS)
        self.planted = PlantedIndex(self.fd)
        self.seen = seen
        self._thread_lock = threading.Lock()
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        # Files of a change of several files wait here, staged, until the intent that
        # names them is set: only the holder of the store lock uses it.
        landing.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.landing_fd = os.open(landing, backing.DIR_FLAGS)
        self.generation = Generation(self._lock_fd)  # bumped by every landing
        self.history = None if history_path is None else StoreHistory(history_path, name)
        self.observe_land: Callable[[float], None] | None = None  # seconds per landing

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.landing_fd)
        os.close(self._lock_fd)

    def open_current(self, path: MemPath) -> tuple[int, os.stat_result] | None:
        """fd and fstat of the current version of ``path`` (in this store), or None if it
        does not exist. Raises InvalidInput (a symlink on the way, not a file memfs
        keeps). The caller closes the fd."""
        return backing.open_kept(self.fd, path.parts, path.encoded)

    # -- the lock -----------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive: a thread lock for this process plus an flock on a shared file for
        other daemons on the root. Held only inside engine calls, so a client that
        vanishes can never strand it. A landing a dead holder left is finished first."""
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
        """The intent of a landing that did not finish, if any. In a store with history
        a landing's intent stays on the lock file and names the head of ``main`` it
        started from: once ``main`` moved, it is finished (one xattr write per landing,
        none to clear it); without history, an intent is removed when its landing ends.
        Sets ``self._head``, the head now (valid while the lock is held)."""
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
        if self.history is None:
            return intent
        return intent if unreadable or intent.get("head") == self._head else None

    def _head_now(self) -> str | None:
        try:
            return None if self.history is None else self.history.head_id()
        except HistoryError:
            return None

    def _set_intent(self, intent: dict[str, object], *, required: bool) -> None:
        """Set the intent on the lock file. ``required`` (a change of several files,
        which only the intent can finish after a crash): a failure refuses the change
        (NoSpace on a full disk), before anything landed. Otherwise a failure is
        ignored: the change is one rename, and start-up recovery records it."""
        try:
            with refused_when_full():
                os.setxattr(self._lock_fd, PENDING, json.dumps(intent).encode())
        except (OSError, NoSpace):
            if required:
                raise

    def _clear_intent(self) -> None:
        with contextlib.suppress(OSError):
            os.removexattr(self._lock_fd, PENDING)

    # -- landing ------------------------------------------------------------------------

    def land(self, agent: str, email: str, landings: list[Landing], *, op: str,
             summary: str, forced: bool = False) -> str | None:
        """Land an accepted change (the caller holds `locked` and made its checks):
        the prepared commit, the intent, renames and unlinks, the writer's records,
        ``main`` moved. Returns the commit id (None without history). A change of
        several files must be staged in the landing directory (`landing_fd`): it
        lands whole or not at all, whatever the order of its files, after any crash.
        Raises NoSpace (the disk is full: nothing landed). A history that cannot be
        written for another reason is logged and left to recovery: the change itself
        stands. Without history, a single file has no intent: a crash between the
        rename and the writer's record then only costs the writer a conflict that
        names itself (see errors.Conflict). Its duration goes to ``observe_land``
        when set (the daemon's commit latency metric)."""
        start = time.perf_counter()
        try:
            return self._land(agent, email, landings, op=op, summary=summary, forced=forced)
        finally:
            if self.observe_land is not None:
                self.observe_land(time.perf_counter() - start)

    def _land(self, agent: str, email: str, landings: list[Landing], *, op: str,
              summary: str, forced: bool) -> str | None:
        several = len(landings) > 1
        digest = landings[0].digest if not several else None
        prepared = self._prepare(landings, agent, email,
                                 message_for(summary, op, digest, forced,
                                             delegate=current_delegate()))
        crashpoints.reached("land.prepared")
        intent: dict[str, object] = {
            "agent": agent,
            "head": self._head,
            "commit": prepared,
            "paths": {x.path.rel: x.digest for x in landings},
            "record": [x.path.rel for x in landings if x.record or x.forget],
        }
        if several:
            if any(x.staged is not None and x.staged.directory != self.landing_fd
                   for x in landings):
                raise ValueError("a change of several files is staged in the landing "
                                 "directory")
            intent["roll"] = {x.path.rel: x.staged.name for x in landings
                              if x.staged is not None}
        if several or self.history is not None:
            self._set_intent(intent, required=several)
        if several:
            for landing in landings:  # from here on they are the intent's to land
                if landing.staged is not None:
                    landing.staged.moved = True
        crashpoints.reached("land.intent")
        try:
            for landing in landings:
                name = landing.path.parts[-1]
                if landing.staged is not None:
                    landing.staged.move_to(landing.parent, name)
                else:
                    os.unlink(name, dir_fd=landing.parent)
                crashpoints.reached("land.rename")
        except BaseException:
            if not several:
                self._repair(intent, crashed=False)  # what did land is recorded; the rest never was
                self.generation.bump()
                raise
            try:  # a change of several files goes forward or stays pending, never half
                self._roll_forward(intent)
            except BaseException:
                self.generation.bump()
                raise  # the intent stays: the next holder of the lock finishes it
        # Still under the lock, the files in place: other daemons notice (generation.py).
        self.generation.bump()
        for landing in landings:
            if landing.forget:
                self.seen.forget(agent, landing.path)
            elif landing.record and landing.staged is not None:
                self._record(agent, landing.path, landing.staged.digest)
        crashpoints.reached("land.records")
        commit = self._advance(prepared)
        crashpoints.reached("land.commit")
        if several and self.history is None:
            self._clear_intent()
        return commit

    def _prepare(self, landings: list[Landing], agent: str, email: str,
                 message: str) -> str | None:
        """The change's history commit, written but not yet on ``main`` (None without
        history, or when the history cannot be written for another reason than a full
        disk: logged, and recorded at the next start). Raises NoSpace."""
        if self.history is None:
            return None
        if any(x.staged is not None and x.blob is None for x in landings):
            log.error("store %s: a blob of this change is missing from its history (the "
                      "change stands; it is recorded at the next start)", self.name)
            return None
        try:
            return self.history.prepare([Change(x.path.rel, x.blob) for x in landings],
                                        author=agent, email=email, message=message,
                                        parent=self._head)
        except HistoryFull as error:
            raise _full(self.name) from error
        except HistoryError as error:
            log.error("%s (the change stands; it is recorded at the next start)", error)
            return None

    def _advance(self, prepared: str | None) -> str | None:
        """Move ``main`` to the prepared commit; None (logged) if it cannot be moved:
        the intent stays, and the next holder of the lock moves it."""
        if prepared is None or self.history is None:
            return None
        try:
            self.history.advance(prepared)
        except HistoryError as error:
            log.error("%s (the change stands; its commit is made by the next change)", error)
            return None
        self._head = prepared  # finished: the intent names the head it started from
        return prepared

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
        is the whole new file (that part costs what the file costs), prepared before
        any byte is written. Raises NoSpace (the disk is full: the file is as it
        was)."""
        start = time.perf_counter()
        try:
            return self._append(agent, email, path, fd, old, data, digest, record=record)
        finally:
            if self.observe_land is not None:
                self.observe_land(time.perf_counter() - start)

    def _append(self, agent: str, email: str, path: MemPath, fd: int, old: Version,
                data: bytes, digest: str, *, record: bool) -> str | None:
        rel = path.rel
        blob = prepared = None
        if self.history is not None:
            blob = self.blob(backing.read_all(fd, old.size) + data)
            if blob is not None:
                prepared = self._prepare([Landing(path, -1, None, blob)], agent, email,
                                         message_for(f"append {path}", "append", digest,
                                                     False, delegate=current_delegate()))
        crashpoints.reached("append.prepared")
        intent: dict[str, object] = {
            "agent": agent, "head": self._head, "commit": prepared, "paths": {rel: digest},
            "record": [rel] if record else [], "append": {"rel": rel, "size": old.size},
        }
        self._set_intent(intent, required=False)
        mark_appending(fd, old.size)
        crashpoints.reached("append.marked")
        try:
            with refused_when_full(f"nothing was appended to {path}"):
                offset, view = old.size, memoryview(data)
                while view:
                    written = os.pwrite(fd, view, offset)
                    offset += written
                    view = view[written:]
                os.fsync(fd)
                crashpoints.reached("append.written")
                stamp(fd, digest, agent, time.time(), None if blob is None else str(blob))
                mark_appending(fd, None)
            crashpoints.reached("append.stamped")
        except BaseException:
            self._repair(intent, crashed=False)  # back to the old size: it never happened
            raise
        self.generation.bump()
        if record:
            self._record(agent, path, digest)
        crashpoints.reached("append.records")
        commit = self._advance(prepared)
        if self.history is None:
            self._clear_intent()
        return commit

    def blob(self, data: bytes) -> pygit2.Oid | None:
        """The git blob of ``data`` (written now; content-addressed, so safe outside
        the lock), or None without history or when the history cannot be written (then
        logged: the change is recorded at the next start). Raises NoSpace."""
        if self.history is None:
            return None
        try:
            return self.history.blob(data)
        except HistoryFull as error:
            raise _full(self.name) from error
        except HistoryError as error:
            log.error("%s", error)
            return None

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
        truncated back to its old size; the files of a change of several files still
        waiting in the landing directory are renamed into place; then the writer's
        records, then history (the prepared commit when the files hold what it
        records, else a ``recover:`` commit). ``crashed`` False: this daemon's own
        landing failed (e.g. the disk is full) and is undone without a warning (the
        caller reports the failure)."""
        appended = intent.get("append")
        if isinstance(appended, dict):
            self._undo_append(str(appended.get("rel")), appended.get("size"), crashed)
        self._roll_forward(intent)
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
            prepared = intent.get("commit")
            if not (isinstance(prepared, str) and self._holds(paths)
                    and self._advance(prepared) is not None):
                self._recover_history(names, why="a daemon died during a commit")
        self._clear_landing()
        self._clear_intent()

    def _roll_forward(self, intent: dict[str, object]) -> None:
        """Rename into place the files of a change of several files that still wait in
        the landing directory, and unlink the files it deletes that are still there:
        after the intent was set, the change goes forward, never back."""
        roll, paths = intent.get("roll"), intent.get("paths")
        if not isinstance(roll, dict) or not isinstance(paths, dict):
            return
        for rel, digest in paths.items():
            parts = tuple(str(rel).split("/"))
            staged = roll.get(rel)
            if digest is not None and not (isinstance(staged, str) and staged.isalnum()):
                continue
            staged = str(staged)
            try:
                parent = backing.walk_parent(self.fd, parts, create=digest is not None)
            except FileNotFoundError:
                continue  # a file to delete whose folder is gone: nothing left to do
            with backing.closing_fd(parent):
                try:
                    if digest is None:
                        os.unlink(parts[-1], dir_fd=parent)
                    else:
                        os.rename(staged, parts[-1], src_dir_fd=self.landing_fd,
                                  dst_dir_fd=parent)
                except FileNotFoundError:
                    continue  # landed before the crash
                os.fsync(parent)
            log.warning("store %s: %s of a change cut short by a crash: finished", self.name,
                        "deleted " + str(rel) if digest is None else f"{rel} landed")

    def _holds(self, paths: dict[object, object]) -> bool:
        """True if every path holds the digest ``paths`` names (None: no file)."""
        for rel, wanted in paths.items():
            version = self._version(str(rel))
            if (None if version is None else version.digest) != wanted:
                return False
        return True

    def _clear_landing(self) -> None:
        """Remove what waits in the landing directory (the lock holder's own: staged
        files a crash left before their intent was set)."""
        for name in os.listdir(self.landing_fd):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.landing_fd)

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
        self._clear_landing()
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
                       for entry in backing.walk_files(self.fd) if nameable(entry.rel)]
            wanted = None
        else:
            wanted = {rel for rel in scope if nameable(rel)}
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


def _full(store: str) -> NoSpace:
    return NoSpace(f"the memory's disk is full (the history of {store} cannot be "
                   "written); nothing was changed")

