"""One store (`Store`): its directory, lock, landing directory, intent file and
history; the last step of landing a batch of changes, landing a change of several
files, and finishing a landing a crash cut short.

Single-file changes (writes, edits, restores, deletes, appends) land in batches
(memfs/store/write/batch.py, memfs/store/write/landing.py): checked in order under the store lock,
their commits written as one pack, the batch's *intent* set, the files renamed into
place or appended to, then `finish_batch` sets the writers' records and moves ``main``
to the last commit, so commit order is landing order, across daemons too.

A change of several files (the memory model's operations: `land`) is one step under the
same lock:

1. its history commit is *prepared*: the trees and the commit object are written, but
   ``main`` does not move yet (memfs/store/history/writer.py), so a history that cannot be
   written (a full disk) refuses the change before any of it lands;
2. the *intent* (writer, paths, new digests, the prepared commit, and where each staged
   file waits) is set, so whoever takes the lock next can finish what a crash
   interrupted;
3. the staged files are renamed into place (or the files unlinked);
4. the writer's seen records are updated;
5. ``main`` moves to the prepared commit; this finishes the intent (it names the head
   it started from).

Intents are kept in ``ROOT/state/intents/STORE`` (memfs/store/write/intents.py). Whoever takes
a store lock and finds an unfinished one (its holder died before ``main`` moved, or
without history before it was cleared) finishes it before anything else, *forward*:
for a batch, the longest prefix of its steps that the files hold is taken as landed
(an append cut short is truncated back first), its records set and ``main`` moved to
its last commit (each change keeps its author); for a change of several files, its
files still waiting in the store's landing directory (``ROOT/state/landing/STORE/``,
staged there before the intent was set) are renamed into place, so such a change is
all or nothing whatever the order of its files; then the writer's records are set for
the paths that hold the intended version, and ``main`` moves to the prepared commit
when the files are what it records, else the files are recorded as a ``recover:``
commit. At start-up `recover` also finishes an intent an older memfs left in the lock
file's xattr, and compares the whole tree of ``main`` with the files (an operator's
changes, a damaged repository).
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

from memfs.store import crashpoints
from memfs.store.errors import InvalidInput, NoSpace
from memfs.store.fs import backing
from memfs.store.fs.paths import MemPath, nameable
from memfs.store.fs.planted import PlantedIndex
from memfs.store.fs.syscalls import syncfs
from memfs.store.history.repo import (
    Change,
    HistoryError,
    HistoryFull,
    Planned,
    current_delegate,
    message_for,
)
from memfs.store.history.store_history import StoreHistory
from memfs.store.read.seen import SeenRecords
from memfs.store.read.versions import Version, appending, digest_fd, mark_appending, version_of
from memfs.store.write.generation import Generation
from memfs.store.write.intents import IntentFile
from memfs.store.write.staging import Staged

log = logging.getLogger("memfs.store")

PENDING = "user.memfs.pending"  # where older versions kept a landing's intent


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


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """The changes of one path in a batch (memfs/store/write/landing.py), in their order:
    the digest it held before (None: no file), the size before the run of appends its
    first step is (None: no run), and each step's digest after it (None: deleted) and
    commit (None: none; a run's: its last append's)."""

    rel: str
    before: str | None
    run: int | None
    steps: list[tuple[str | None, str | None]]


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What a batch lands, as its intent names it: its paths' steps in landing order
    (the commit order), and the writers' records in ticket order, each as (agent,
    group, steps of the group that must have landed for it, digest to record, or None:
    forget the record)."""

    groups: list[GroupPlan]
    records: list[tuple[str, int, int, str | None]]

    def to_json(self) -> dict[str, object]:
        return {"batch": [[g.rel, g.before, g.run, g.steps] for g in self.groups],
                "records": self.records}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> BatchPlan:
        """Raises ValueError unless ``data`` is what `to_json` writes."""
        groups, records = data.get("batch"), data.get("records")
        if not isinstance(groups, list) or not isinstance(records, list):
            raise ValueError("not a batch's intent")
        try:
            plan = cls([GroupPlan(str(rel), _digest(before),
                                  run if isinstance(run, int) else None,
                                  [(_digest(digest), _digest(commit)) for digest, commit in steps])
                        for rel, before, run, steps in groups],
                       [(str(agent), int(group), int(after), _digest(digest))
                        for agent, group, after, digest in records])
        except (TypeError, ValueError) as error:
            raise ValueError(f"not a batch's intent: {error}") from None
        if any(not 0 <= group < len(plan.groups) for _, group, _, _ in plan.records):
            raise ValueError("not a batch's intent: a record of no path")
        return plan


def _digest(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a digest")
    return value


class Store:
    """One store's handles: its directory fd, lock, landing directory, intent file,
    planted index and history."""

    def __init__(self, name: str, directory: Path, lock_path: Path, landing: Path,
                 history_path: Path | None, seen: SeenRecords, *, intents: Path,
                 shared: bool = False) -> None:
        self.name = name
        directory.mkdir(mode=backing.DIR_MODE, exist_ok=True)
        self.fd = os.open(directory, backing.DIR_FLAGS)
        self.planted = PlantedIndex(self.fd)
        self.seen = seen
        self.shared = shared  # a root other hosts mount too: fsync what they must see
        self._thread_lock = threading.Lock()
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        # Files of a change of several files wait here, staged, until the intent that
        # names them is set: only the holder of the store lock uses it.
        landing.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.landing_fd = os.open(landing, backing.DIR_FLAGS)
        self.intents = IntentFile(intents, shared=shared)
        self.generation = Generation(self._lock_fd)  # bumped by every landing
        self.history = None if history_path is None else StoreHistory(history_path, name)
        self.observe_land: Callable[[float], None] | None = None  # seconds per landing
        self._head: str | None = None
        # One open file on each file system the store's state spans, for syncfs.
        devices = {os.fstat(self.fd).st_dev: self.fd}
        if self.history is not None:
            history_fd = os.open(history_path, backing.DIR_FLAGS)  # type: ignore[arg-type]
            if os.fstat(history_fd).st_dev in devices:
                os.close(history_fd)
            else:
                devices[os.fstat(history_fd).st_dev] = history_fd
        self._flush_fds = list(devices.values())

    def close(self) -> None:
        for fd in self._flush_fds:
            if fd != self.fd:
                os.close(fd)
        os.close(self.fd)
        os.close(self.landing_fd)
        os.close(self._lock_fd)
        self.intents.close()

    @property
    def head(self) -> str | None:
        """The head of ``main`` as read when the store lock was taken (valid while it
        is held)."""
        return self._head

    def syncfs(self) -> None:
        """Make everything written on the store's file system(s) durable: its files,
        folders, staged files, intent and history (one syncfs each). Raises OSError."""
        for fd in self._flush_fds:
            syncfs(fd)

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
        """The intent of a landing that did not finish, if any (memfs/store/write/intents.py:
        one that names the head of ``main`` now, or any when the history cannot be
        read). Sets ``self._head``, the head now (valid while the lock is held)."""
        self._head = None
        unreadable = False
        if self.history is not None:
            try:
                self._head = self.history.head_id()
            except HistoryError:
                unreadable = True  # repair what is pending (recovery rebuilds the rest)
        return self.intents.read(self._head, any_head=unreadable)

    def _head_now(self) -> str | None:
        try:
            return None if self.history is None else self.history.head_id()
        except HistoryError:
            return None

    def _set_intent(self, intent: dict[str, object], *, required: bool) -> None:
        """Set the intent (in the store's intent file). ``required`` (a change of
        several files, which only the intent can finish after a crash): a failure
        refuses the change (NoSpace on a full disk), before anything landed. Otherwise
        a failure is ignored: the change is one rename, and start-up recovery records
        it."""
        try:
            self.intents.write(intent, self._head)
        except (OSError, NoSpace):
            if required:
                raise

    def _clear_intent(self) -> None:
        with contextlib.suppress(OSError):
            self.intents.clear()

    # -- landing ------------------------------------------------------------------------

    def land(self, agent: str, email: str, landings: list[Landing], *, op: str,
             summary: str, forced: bool = False) -> str | None:
        """Land an accepted change of the memory model (the caller holds `locked` and
        made its checks): the prepared commit, the intent, renames and unlinks, the
        writer's records, ``main`` moved. Returns the commit id (None without
        history). A change of several files must be staged in the landing directory
        (`landing_fd`): it lands whole or not at all, whatever the order of its files,
        after any crash.
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

    # -- batches (memfs/store/write/landing.py) ----------------------------------------------

    def prepare_batch(self, planned: list[Planned]) -> list[str | None]:
        """The commits of a batch's accepted changes, in order, on ``main``'s head
        (`StoreHistory.prepare_batch`: one pack, ``main`` not moved); all None without
        history, or when the history cannot be written for another reason than a full
        disk (logged: recorded at the next start). Raises NoSpace (nothing written)."""
        if self.history is None or not planned:
            return [None] * len(planned)
        try:
            return list(self.history.prepare_batch(planned, parent=self._head))
        except HistoryFull as error:
            raise _full(self.name) from error
        except HistoryError as error:
            log.error("%s (the changes stand; they are recorded at the next start)", error)
            return [None] * len(planned)

    def set_batch_intent(self, plan: BatchPlan) -> None:
        """Set the intent of a batch about to land (the caller holds `locked`). Raises
        NoSpace (then nothing may land)."""
        self.intents.write(plan.to_json(), self._head)

    def finish_batch(self, plan: BatchPlan, landed: list[int] | None, *,
                     crashed: bool = True) -> None:
        """The last step of a batch's landing (the caller holds `locked`): the records
        of the changes that landed (``landed``: per group, how many of its steps did;
        None: a crashed holder's batch, so the files decide: see `_landed`), then
        ``main`` moved to the commit of the last step that landed, so commit order is
        landing order; then the intent is finished. A batch whose files no prefix of
        its steps explains (changed meanwhile by hand) is recorded as ``recover:``."""
        if landed is None:
            for group in plan.groups:
                if group.run is not None:  # an append run cut short: truncated back
                    self._undo_append(group.rel, group.run, crashed)
            landed = self._landed(plan)
            if landed is None:
                log.warning("store %s: the files of a batch a crash cut short are not what "
                            "any part of it wrote; recording them as they are", self.name)
                if self.history is not None:
                    self._recover_history([g.rel for g in plan.groups],
                                          why="a daemon died during a commit")
                self._clear_intent()
                return
            if crashed and any(landed):
                log.warning("store %s: finished a batch of changes that a crashed daemon "
                            "left half done (%s)", self.name,
                            ", ".join(g.rel for g in plan.groups))
        for agent, number, after, digest in plan.records:
            if after <= landed[number]:
                path = MemPath(self.name, tuple(plan.groups[number].rel.split("/")))
                if digest is None:
                    self.seen.forget(agent, path)
                else:
                    self._record(agent, path, digest)
        crashpoints.reached("land.records")
        if any(group.run is not None for group in plan.groups):
            crashpoints.reached("append.records")
        last = None
        for group, count in zip(plan.groups, landed, strict=True):
            for _, commit in group.steps[:count]:
                last = commit or last
        moved = last is not None and self._advance(last) is not None
        crashpoints.reached("land.commit")
        if not moved:
            self._clear_intent()

    def _landed(self, plan: BatchPlan) -> list[int] | None:
        """How many steps of each group of a crashed holder's batch landed, from what
        the files hold: the longest prefix of the batch (its groups in order, each
        group's steps in order) that leaves every path with the digest of its last
        step in the prefix; None if there is none. (A path's steps may repeat a digest:
        the prefix found then claims the later step, which left the same bytes.)"""
        landed: list[int] = []
        partial = False
        for group in plan.groups:
            version = self._version(group.rel)
            now = None if version is None else version.digest
            if partial:
                if now != group.before:
                    return None
                landed.append(0)
                continue
            digests = [group.before] + [digest for digest, _ in group.steps]
            matching = [n for n, digest in enumerate(digests) if digest == now]
            if not matching:
                return None
            landed.append(matching[-1])
            partial = matching[-1] < len(group.steps)
        return landed

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

    def record(self, agent: str, path: MemPath, digest: str) -> None:
        """Set the writer's record of a change that has landed (see `_record`)."""
        self._record(agent, path, digest)

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
        caller reports the failure). A batch's intent is finished by `finish_batch`."""
        if "batch" in intent:
            try:
                plan = BatchPlan.from_json(intent)
            except ValueError as error:
                log.error("store %s: an unfinished batch's intent cannot be read (%s); the "
                          "files are recorded as they are", self.name, error)
                self._clear_intent()
                if self.history is not None:
                    self._recover_history(None, why="a daemon died during a commit")
                return
            self.finish_batch(plan, None, crashed=crashed)
            return
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
        """Settle a file appended to in place whose mark is still there (``size``: the
        size before the append, which the mark must name; None: whatever it names).
        If its record still names that size, the append was cut short: the file is
        truncated back. If the record is new but the bytes are not what it says (a
        power loss kept the record and not all the bytes), likewise. Then the mark
        goes."""
        if size is not None and not isinstance(size, int):
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
                marked = appending(fd)
                if marked is None or (size is not None and marked != size):
                    return  # finished (the mark is gone) or never begun
                version = version_of(fd)
                if version.size == marked:  # the record still names the old size
                    os.ftruncate(fd, marked)
                    os.fsync(fd)
                    if crashed:
                        log.warning("store %s: an append to %s was cut short; truncated "
                                    "back to %d bytes", self.name, rel, marked)
                elif digest_fd(fd, version.size) != version.digest:
                    os.ftruncate(fd, marked)
                    os.fsync(fd)
                    log.warning("store %s: %s did not hold the bytes its last append "
                                "recorded (a power loss?); truncated back to %d bytes",
                                self.name, rel, marked)
                mark_appending(fd, None)

    def recover(self) -> list[str]:
        """At start-up, under the lock: repair a pending landing (also one an older
        memfs left in the lock file's xattr), make sure the history is readable
        (falling back to the durable head, else rebuilding it), and commit what
        differs from the files. Returns the paths recorded."""
        self._finish_xattr_intent()
        self._check_appends()
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

    def _check_appends(self) -> None:
        """Settle the files the last batch appended to that still carry their mark
        (`_undo_append`): its daemon stopped after ``main`` moved but before the
        batch's flush returned, so after a power loss their new record may be on disk
        without all their bytes."""
        try:
            intent = self.intents.read(None, any_head=True)
            plan = None if intent is None or "batch" not in intent \
                else BatchPlan.from_json(intent)
        except (OSError, ValueError):
            return
        for group in [] if plan is None else plan.groups:
            if group.run is not None:
                self._undo_append(group.rel, None, True)

    def _finish_xattr_intent(self) -> None:
        """Finish the intent an older memfs kept as the lock file's xattr PENDING (the
        same format as a single change's intent here), then remove it."""
        try:
            raw = os.getxattr(self._lock_fd, PENDING)
        except OSError as error:
            if error.errno in (errno.ENODATA, errno.ENOTSUP):
                return
            raise
        try:
            intent = json.loads(raw)
        except ValueError:
            intent = None
        if isinstance(intent, dict) and (self.history is None
                                         or intent.get("head") == self._head_now()):
            self._repair(intent)
            self.generation.bump()
            self._head = self._head_now()
        with contextlib.suppress(OSError):
            os.removexattr(self._lock_fd, PENDING)

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

