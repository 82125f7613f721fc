"""Git history of a store: one bare repository per store, one commit per change.

``ROOT/state/history/STORE.git`` is written in-process with pygit2 (libgit2). The
engine makes exactly one commit on ``refs/heads/main`` for every accepted change,
while it holds the store lock, so the commit order is the acceptance order, with
several daemons on one root too (each reads the ref afresh under the lock). The tree
of ``main`` equals the store's files: the engine commits the same change it applies.
Plain git reads it (``git --git-dir ROOT/state/history/notes.git log -p``).

A commit: author = the agent (``AGENT@memfs.invalid`` unless configured), committer =
memfs, time = now (UTC); message = a first line such as ``write notes/a.md``, then
the trailers ``Memfs-Op``, ``Memfs-Digest`` (blake3 of the new bytes),
``Memfs-Forced: yes`` on forced changes and ``Memfs-Delegate: uid N`` on a change a
delegate uid made for the agent (``delegated``).

Files stay the source of truth. `recover` commits whatever differs between the tree
of ``main`` and the files as a ``recover:`` commit by memfs (a crash between a rename
and its commit, an operator's change in the backing directory); a missing or
unreadable repository is rebuilt from the files.

Durability. The commits of a batch of changes (memfs/store/write/landing.py) are built in
memory and written as one pack (`prepare_batch`), which the batch's flush makes durable
with its files before any of them is acknowledged (`made_durable` notes their head).
Other commits (``recover:`` ones, the memory model's operations) are written as loose
objects and the ref without fsync (one fsync per object would cost more than the change
itself); `sync` (the daemon calls it every second after commits) makes them durable
with one ``syncfs`` and then notes the head as durable. A kill of the daemon loses
nothing (the kernel has the writes) and leaves no partial object or pack (each is
named once written); after a power loss, commits not yet durable may be gone or
damaged: the repository falls back to the durable head and `recover` records what
differs as one ``recover:`` commit.

Loose objects are written by memfs/store/history/gitobjects.py (an unnamed file linked into
place) and the ref is rewritten in place on a local disk: a few file operations per
commit. On a shared file system each object, pack and the ref are fsynced and the ref
replaced by a rename, so that the next commit, possibly on another host, builds on
this one.

Loose objects are packed by `pack`, which the daemon calls in a worker thread, outside
the store lock (packed objects are immutable, so writers go on), at its first
maintenance and then every PACK_AFTER objects or PACKS_BEFORE_MERGE packs of batches;
it also removes what crashes left, and merges packs so that there are at most about
log2(objects / PACK_AFTER) + 1 of them (memfs/store/history/packs.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pygit2

from memfs.errors import MemfsError
from memfs.store import crashpoints
from memfs.store.errors import InvalidInput, NoSpace, NotFound
from memfs.store.fs.syscalls import syncfs
from memfs.store.history import packs, revs
from memfs.store.history.gitobjects import (
    intact,
    on_shared_filesystem,
    temporary_name,
    write_pack,
    write_ref,
    writer_repository,
)

log = logging.getLogger("memfs.history")

REF = "refs/heads/main"
COMMITTER = ("memfs", "memfs@memfs.invalid")
PACK_AFTER = 4096  # loose objects written before `pack` packs them
PACKS_BEFORE_MERGE = 32  # packs of batches written before `pack` merges the small ones
PACK_RETRY = 60.0  # seconds before packing is tried again after it failed
STALE = 3600.0  # seconds after which a temporary file is a kill's leftover
PACK_LOCK = "memfs-pack.lock"  # in the repository: one daemon packs it at a time
MERGE_RECORD = "memfs-merging"  # the packs a merge is removing (packs.merge)
MERGE_GRACE = 10.0  # seconds the packs a merge replaced stay for readers that knew them
_OBJECT_NAME = re.compile(r"[0-9a-f]{38}")
_BLOB = pygit2.enums.FileMode.BLOB
_TREE = pygit2.enums.FileMode.TREE

# Checks that read the odb for every object written (the objects we reference always
# exist: we wrote them or read them), and re-hashing on every read.
pygit2.option(pygit2.enums.Option.ENABLE_STRICT_OBJECT_CREATION, False)
pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, False)
# What libgit2 keeps, for all Repository objects of the process together (each reader
# thread has one): its object cache (commits and trees read; 256 MiB by default), the
# parts of packs it maps (by default windows of 1 GiB, up to 8 GiB in all) and the pack
# files it keeps open (no limit by default). A soak of 3 minutes grew by 270 MB with
# the defaults; with these, it levels off within 2 minutes (scripts/bench_soak.py).
pygit2.option(pygit2.enums.Option.SET_CACHE_MAX_SIZE, 16 << 20)
pygit2.option(pygit2.enums.Option.SET_MWINDOW_SIZE, 8 << 20)
pygit2.option(pygit2.enums.Option.SET_MWINDOW_MAPPED_LIMIT, 64 << 20)
pygit2.option(pygit2.enums.Option.SET_MWINDOW_FILE_LIMIT, 128)

# The repositories are memfs's own: no system or user git config applies to them, and
# none is looked for (libgit2 notes $HOME once, at import: a daemon that then drops
# root could not even stat root's ~/.gitconfig).
for _level in (pygit2.enums.ConfigLevel.SYSTEM, pygit2.enums.ConfigLevel.XDG,
               pygit2.enums.ConfigLevel.GLOBAL, pygit2.enums.ConfigLevel.PROGRAMDATA):
    pygit2.settings.search_path[_level] = ""


class HistoryError(MemfsError):
    """A store's repository cannot be read or written (missing, corrupt, disk full).
    The engine logs it and rebuilds the repository from the files at start."""


class HistoryFull(HistoryError, NoSpace):
    """A history write failed because the file system is full."""


@dataclass(frozen=True)
class Change:
    """One path of a commit: its new blob, or None when the file was deleted."""

    rel: str
    blob: pygit2.Oid | None


@dataclass(frozen=True)
class Planned:
    """One commit of a batch (`StoreHistory.prepare_batch`): its paths' new bytes (None:
    the file was deleted), its author and message."""

    changes: list[tuple[str, bytes | None]]
    author: str
    email: str
    message: str


@dataclass(frozen=True)
class Entry:
    """One commit as `log` reports it."""

    rev: str
    at: float
    author: str
    op: str
    summary: str  # the first line, e.g. "write notes/a.md"
    forced: bool
    digest: str | None
    patch: str | None = None
    delegate: int | None = None  # the delegate uid that made it for the agent

    @property
    def short(self) -> str:
        return self.rev[:7]


def _trailers(message: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in message.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith("Memfs-"):
            found[key] = value.strip()
    return found


# The delegate uid on whose request the changes being made are (None: the agent's own),
# set by the dispatcher around a delegate's request (`delegated`) and read where a
# commit message is built (memfs/store/write/store.py): every change of that request, in
# whichever store, names the delegate, with no parameter through every layer between.
_DELEGATE: contextvars.ContextVar[int | None] = contextvars.ContextVar("memfs_delegate",
                                                                       default=None)


@contextlib.contextmanager
def delegated(uid: int | None) -> Iterator[None]:
    """Within: the changes made in this thread (context) are made by delegate ``uid``
    for the agent, and their commits say so (None: by the agent itself)."""
    token = _DELEGATE.set(uid)
    try:
        yield
    finally:
        _DELEGATE.reset(token)


def current_delegate() -> int | None:
    """The delegate uid set by `delegated`, or None."""
    return _DELEGATE.get()


def message_for(summary: str, op: str, digest: str | None, forced: bool,
                extra: Iterable[str] = (), delegate: int | None = None) -> str:
    """A commit message: the summary line, optional body lines, then the trailers."""
    body = "\n".join(extra)
    lines = [summary, "", *([body, ""] if body else []), f"Memfs-Op: {op}"]
    if digest is not None:
        lines.append(f"Memfs-Digest: {digest}")
    if forced:
        lines.append("Memfs-Forced: yes")
    if delegate is not None:
        lines.append(f"Memfs-Delegate: uid {delegate}")
    return "\n".join(lines) + "\n"


def _delegate_of(trailer: str | None) -> int | None:
    uid = (trailer or "").removeprefix("uid ")
    return int(uid) if uid.isascii() and uid.isdigit() else None


_REV_HEX = re.compile(revs.HEX)
_REV_HEAD = re.compile(revs.HEAD)
_REV_TIME = re.compile(revs.TIME)


def parse_time(text: str) -> float:
    """Epoch seconds of ``YYYY-MM-DD[THH:MM[:SS]][Z|+HH:MM]`` (revs.TIME; UTC unless
    an offset is given). Raises InvalidInput."""
    if not _REV_TIME.fullmatch(text):
        raise InvalidInput(f"bad time {text!r}: use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z] "
                           "(a date and time that exist)")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:  # not reached: the pattern takes only what exists
        raise InvalidInput(f"bad time {text!r}: no such date or time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class StoreHistory:
    """The repository of one store. Writes (`blob`, `commit`, `recover`) are made by
    the engine under the store lock, through one Repository object; reads use one
    Repository object per thread."""

    def __init__(self, path: Path, store: str) -> None:
        self.path = path
        self.store = store
        self._local = threading.local()
        # Objects written since the last pack (approximate); the first maintenance
        # packs what earlier daemons left loose, so the bound holds across restarts.
        self._written = PACK_AFTER
        self._retry_at = 0.0  # monotonic time before which packing is not tried again
        # Whether the next packing reads every loose object to check it is whole: at
        # start (what earlier daemons left) and after a failure. This daemon's own
        # objects are whole once named (gitobjects.py), so not each time after.
        self._check_loose = True
        self._generation = 0  # bumped when packs are removed (see _reader)
        self._first_pack = True  # no packing since start
        self._dirty = False  # commits made since the last sync
        self._packs = 0  # packs written by batches since the last packing
        self._durable: str | None = None  # a head made durable since the last sync
        self._durable_file = path.with_suffix(".durable")
        # The writing Repository goes through a Python object database backend
        # (gitobjects.LooseWriter): libgit2 calling back into Python from several
        # threads at once deadlocks, so its users take turns.
        self._writing = threading.RLock()
        try:
            self._repo = self._open()
        except HistoryError as error:
            log.error("%s", error)
            self.rebuild()

    # -- opening --------------------------------------------------------------------

    def _open(self) -> pygit2.Repository:
        """Open the repository, creating it when missing; raises HistoryError when it
        exists but cannot be read."""
        if not self.path.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            repo = pygit2.init_repository(str(self.path), bare=True, initial_head="main")
            repo.config["core.logAllRefUpdates"] = False
        try:
            if not pygit2.Repository(str(self.path)).is_bare:
                raise HistoryError(f"{self.path} is not a bare repository")
            self._sync = on_shared_filesystem(str(self.path))
            (self.path / "objects" / "pack").mkdir(parents=True, exist_ok=True)
            repo, self._writer = writer_repository(str(self.path), sync=self._sync)
            return repo
        except (pygit2.GitError, KeyError, ValueError) as error:
            raise HistoryError(f"cannot open {self.path}: {error}") from error

    def rebuild(self) -> None:
        """Move the repository aside (``STORE.git.broken-TIME``) and start a new one;
        the caller then commits the files with `recover`."""
        aside = self.path.with_name(f"{self.path.name}.broken-{int(time.time())}")
        with contextlib.suppress(FileNotFoundError):
            self.path.rename(aside)
            log.error("history of %s was unreadable: moved to %s, rebuilding it from the "
                      "files (the old commits are kept there)", self.store, aside)
        self._local = threading.local()
        self._repo = self._open()

    def _reader(self) -> pygit2.Repository:
        """This thread's Repository object, opened again after packs were removed
        (libgit2 keeps every pack one has used open and mapped while it lives)."""
        held: tuple[int, pygit2.Repository] | None = getattr(self._local, "repo", None)
        if held is None or held[0] != self._generation:
            held = self._local.repo = (self._generation, pygit2.Repository(str(self.path)))
        return held[1]

    # -- writing (under the store lock) ----------------------------------------------

    def blob(self, data: bytes) -> pygit2.Oid:
        """Store ``data`` as a blob (content-addressed: safe outside the lock). Raises
        HistoryError (NoSpace: the file system is full)."""
        self._written += 1
        try:
            with self._writing:
                return self._repo.create_blob(data)
        except (pygit2.GitError, OSError) as error:
            raise _write_error(self.store, error) from error

    def head(self, repo: pygit2.Repository | None = None) -> pygit2.Commit | None:
        """``main``'s commit read from disk now (another daemon may have moved it)."""
        if repo is None:
            with self._writing:
                return self.head(self._repo)
        ref = repo.references.get(REF)
        if ref is None:
            return None
        commit = repo[ref.target]
        assert isinstance(commit, pygit2.Commit)
        return commit

    def head_id(self) -> str | None:
        """The id ``main`` points at now (None before the first commit); raises
        HistoryError when the ref cannot be read."""
        try:
            ref = self._repo.references.get(REF)
        except (pygit2.GitError, ValueError) as error:
            raise HistoryError(f"cannot read main of {self.store}: {error}") from error
        return None if ref is None else str(ref.target)

    def commit(self, changes: Iterable[Change], *, author: str, email: str, message: str,
               when: float | None = None, parent: str | None = None) -> str:
        """One commit on ``main`` applying ``changes`` to its tree; returns its id.
        ``parent``: ``main``'s head as the caller just read it (read again if None).
        Raises HistoryError when the repository cannot be written (NoSpace when its
        file system is full)."""
        with self._writing:
            oid = self._prepare(changes, author, email, message, when, parent)
            self._advance(oid)
            return oid

    def prepare(self, changes: Iterable[Change], *, author: str, email: str, message: str,
                parent: str | None) -> str:
        """Write the objects of the commit that `commit` would make (its trees and the
        commit itself) without moving ``main``; `advance` moves it. Content-addressed
        objects that nothing names yet: a change can be refused after this with
        nothing to undo. Raises HistoryError (NoSpace: the file system is full)."""
        with self._writing:
            return self._prepare(changes, author, email, message, None, parent)

    def prepare_batch(self, planned: list[Planned], *, parent: str | None) -> list[str]:
        """Write the commits of ``planned`` in order, each on the previous one (the
        first on ``parent``, ``main``'s head as the caller just read it), blobs and
        trees too, as **one pack** (memfs/store/history/gitobjects.py: write_pack), without
        moving ``main``; returns their ids. Built in memory, so a change's commit costs
        no file of its own, and nothing is written if it fails. Raises HistoryError
        (NoSpace: the file system is full)."""
        ids: list[str] = []
        with self._writing:
            written = self._written  # objects counted for packing are loose ones only
            try:
                with self._writer.collecting() as objects:
                    head = parent
                    for commit in planned:
                        changes = [Change(rel, None if data is None
                                          else self._repo.create_blob(data))
                                   for rel, data in commit.changes]
                        head = self._prepare(changes, commit.author, commit.email,
                                             commit.message, None, head)
                        ids.append(head)
                    write_pack(str(self.path / "objects" / "pack"), objects,
                               sync=self._sync)
            except (pygit2.GitError, OSError, KeyError) as error:
                raise _write_error(self.store, error) from error
            finally:
                self._written = written
            self._packs += 1
        return ids

    def made_durable(self, oid: str) -> None:
        """Note that the commit ``oid`` (and all before it) is on disk: the next
        `sync` records it as the durable head without a flush of its own."""
        self._durable = oid

    def advance(self, oid: str) -> None:
        """Point ``main`` at ``oid``, a commit `prepare` made on ``main``'s head (the
        caller holds the store lock). Raises HistoryError."""
        with self._writing:
            self._advance(oid)

    def _prepare(self, changes: Iterable[Change], author: str, email: str, message: str,
                 when: float | None, parent: str | None) -> str:
        try:
            head = self.head() if parent is None else self._repo[parent]
            assert head is None or isinstance(head, pygit2.Commit)
            tree = self._updated(head.tree if head else None,
                                 {tuple(c.rel.split("/")): c.blob for c in changes})
            if tree is None:
                tree = self._repo.TreeBuilder().write()
            at = int(when if when is not None else time.time())
            signature = pygit2.Signature(author, email, at, 0)
            committer = pygit2.Signature(*COMMITTER, at, 0)
            oid = self._repo.create_commit(None, signature, committer, message, tree,
                                           [head.id] if head else [])
            crashpoints.reached("history.commit-written")
        except (pygit2.GitError, OSError, KeyError) as error:
            raise _write_error(self.store, error) from error
        self._written += 1
        return str(oid)

    def _advance(self, oid: str) -> None:
        try:
            write_ref(str(self.path), REF, oid, shared=self._sync)
        except OSError as error:
            raise _write_error(self.store, error) from error
        self._written += 1
        self._dirty = True

    def _updated(self, tree: pygit2.Tree | None,
                 changes: Mapping[tuple[str, ...], pygit2.Oid | None]) -> pygit2.Oid | None:
        """The id of ``tree`` with ``changes`` applied (None: it became empty)."""
        repo = self._repo
        builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
        below: dict[str, dict[tuple[str, ...], pygit2.Oid | None]] = {}
        for parts, blob in changes.items():
            if len(parts) > 1:
                below.setdefault(parts[0], {})[parts[1:]] = blob
            elif blob is not None:
                builder.insert(parts[0], blob, _BLOB)
            elif builder.get(parts[0]) is not None:
                builder.remove(parts[0])
        for name, sub in below.items():
            entry = tree[name] if tree is not None and name in tree else None
            subtree = repo[entry.id] if entry is not None and entry.filemode == _TREE else None
            assert subtree is None or isinstance(subtree, pygit2.Tree)
            new = self._updated(subtree, sub)
            if new is not None:
                builder.insert(name, new, _TREE)
            elif builder.get(name) is not None:
                builder.remove(name)
        if len(builder) == 0:
            return None
        self._written += 1
        return builder.write()

    def files(self) -> dict[str, str]:
        """rel -> blob id of every file in ``main``'s tree."""
        with self._writing:
            return self._files()

    def _files(self) -> dict[str, str]:
        head = self.head()
        found: dict[str, str] = {}
        if head is None:
            return found
        stack: list[tuple[str, pygit2.Tree]] = [("", head.tree)]
        while stack:
            base, tree = stack.pop()
            for entry in tree:
                rel = f"{base}{entry.name}"
                if entry.filemode == _TREE:
                    sub = self._repo[entry.id]
                    assert isinstance(sub, pygit2.Tree)
                    stack.append((rel + "/", sub))
                else:
                    found[rel] = str(entry.id)
        return found

    def recover(self, listing: Iterable[tuple[str, str | None]],
                read: Callable[[str], bytes | None], *, scope: set[str] | None = None,
                why: str = "") -> list[str]:
        """Commit, as memfs, what differs between ``main``'s tree and the files:
        ``listing`` gives each file's rel and its blob id when known (from its version
        record), ``read(rel)`` its bytes otherwise (None: it is not there). Only the
        paths in ``scope`` are compared when given, else the whole store. Returns the
        changed paths (none: no commit). Raises HistoryError (unreadable repository)."""
        try:
            known = self.files()
        except (pygit2.GitError, KeyError, ValueError) as error:
            raise HistoryError(f"history of {self.store} is unreadable: {error}") from error
        changes: list[Change] = []
        present: set[str] = set()
        for rel, hint in listing:
            present.add(rel)
            if hint is not None and known.get(rel) == hint:
                continue
            data = read(rel)
            if data is None:
                present.discard(rel)
                continue
            oid = pygit2.hash(data)
            if known.get(rel) != str(oid):
                changes.append(Change(rel, self.blob(data)))
        expected = set(known) if scope is None else set(known) & scope
        changes += [Change(rel, None) for rel in sorted(expected - present)]
        if not changes:
            return []
        paths = sorted(c.rel for c in changes)
        shown = paths[:50] + ([f"... and {len(paths) - 50} more"] if len(paths) > 50 else [])
        summary = f"recover: {len(paths)} path{'s' if len(paths) != 1 else ''} of {self.store}"
        body = [why] if why else []
        body += [f"{'deleted' if c.blob is None else 'changed'}: {self.store}/{c.rel}"
                 for c in sorted(changes, key=lambda c: c.rel)][: len(shown)]
        self.commit(changes, author=COMMITTER[0], email=COMMITTER[1],
                    message=message_for(summary, "recover", None, False, body))
        return paths

    # -- durability and size --------------------------------------------------------------

    def sync(self) -> None:
        """Make every commit so far durable (one syncfs of the history's filesystem),
        then note ``main`` as the durable head; or, when all since the last sync were
        made durable with their changes (`made_durable`), note that head."""
        if not self._dirty:
            if self._durable is not None:
                self._note_durable(self._durable)
                self._durable = None
            return
        self._dirty = False
        self._durable = None
        head = self.head(self._reader())
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            syncfs(fd)
        finally:
            os.close(fd)
        if head is not None:
            self._note_durable(str(head.id))

    def _note_durable(self, head: str) -> None:
        temporary = Path(temporary_name(str(self._durable_file)))  # hosts share it
        temporary.write_text(head + "\n")
        os.replace(temporary, self._durable_file)  # durable with the next sync

    def durable_head(self) -> str | None:
        with contextlib.suppress(OSError):
            return self._durable_file.read_text().strip() or None
        return None

    def verify(self) -> None:
        """Raise HistoryError unless ``main`` and its whole tree can be read."""
        try:
            self.files()
        except (pygit2.GitError, KeyError, ValueError, AssertionError) as error:
            raise HistoryError(f"history of {self.store} is damaged: {error}") from error

    def reset_to(self, rev: str) -> None:
        """Point ``main`` at ``rev`` (after damage; the caller then recovers)."""
        write_ref(str(self.path), REF, str(pygit2.Oid(hex=rev)), shared=self._sync)

    def needs_pack(self) -> bool:
        """True at start, after PACK_AFTER loose objects and after PACKS_BEFORE_MERGE
        packs of batches (a minute after a failure)."""
        return ((self._written >= PACK_AFTER or self._packs > PACKS_BEFORE_MERGE)
                and time.monotonic() >= self._retry_at)

    def pack(self) -> int:
        """Pack the loose objects into new packs of at most PACK_AFTER objects each,
        remove them, then merge packs so that there are few (memfs/store/history/packs.py);
        returns how many loose objects were packed. Safe while commits go on: only
        objects in a pack already written are removed, and a reader that misses an
        object finds it in the new pack. Memory stays that of one batch, however many
        objects are loose (a store of 100,000 files planted by hand is 100,000 at
        start-up): libgit2 holds a whole pack's objects while building it (one pack of
        100,000 blobs took 27 MB, most of it kept by the allocator after).

        What kills left is removed on the way: a loose object that is not whole (older
        versions wrote objects in place), a copy of an object already packed,
        temporary files, the packs of a merge cut short. A failure is logged and
        packing tried again later; another daemon packing meanwhile does it instead."""
        try:
            with _exclusive(self.path / PACK_LOCK) as mine:
                if not mine:
                    return 0
                return self._pack()
        except (pygit2.GitError, OSError, ValueError) as error:
            log.warning("packing the history of %s failed (tried again in %.0f s): %s",
                        self.store, PACK_RETRY, error)
            self._written = PACK_AFTER
            self._retry_at = time.monotonic() + PACK_RETRY
            self._check_loose = True
            return 0

    def _pack(self) -> int:
        self._written = 0
        self._packs = 0
        objects = self.path / "objects"
        directory = objects / "pack"
        stale = time.time() - STALE
        record = self.path / MERGE_RECORD
        if packs.finish(record, directory, grace=0.0 if self._first_pack else MERGE_GRACE):
            self._release_packs()
        self._first_pack = False
        packed = self._pack_loose(objects, stale)
        packs.tidy(directory, stale)
        chosen = [] if record.exists() else packs.rollup(packs.listed(directory))
        if chosen:
            packs.merge(chosen, record)
            self._release_packs()
        return packed

    def retire(self) -> None:
        """Remove the packs a merge replaced once readers had MERGE_GRACE seconds to
        let go of them (packs.finish); one stat when there are none. (At the first
        packing after start they go at once: nobody read them meanwhile.)"""
        record = self.path / MERGE_RECORD
        if self._first_pack or not record.exists():
            return
        with _exclusive(self.path / PACK_LOCK) as mine:
            if mine and packs.finish(record, self.path / "objects" / "pack",
                                     grace=MERGE_GRACE):
                self._release_packs()

    def _pack_loose(self, objects: Path, stale: float) -> int:
        repo = pygit2.Repository(str(self.path))
        packed = pygit2.Odb()
        packed.add_backend(pygit2.OdbBackendPack(str(objects)), 1)
        batch: list[Path] = []
        count = broken = 0
        for directory in _hex_dirs(objects):
            for name in os.listdir(directory):
                path = directory / name
                if not _OBJECT_NAME.fullmatch(name):
                    _remove_if_older(path, stale)  # a temporary file a kill left
                elif pygit2.Oid(hex=directory.name + name) in packed:
                    # Written again since it was packed, or a kill came between a
                    # pack and the removal of its objects.
                    _remove(path)
                elif self._check_loose and not intact(path):  # cut short by a kill
                    broken += _remove(path)
                else:
                    batch.append(path)
                    if len(batch) == PACK_AFTER:
                        count += _pack_batch(repo, objects, batch)
                        batch = []
        if batch:
            count += _pack_batch(repo, objects, batch)
        for directory in _hex_dirs(objects):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when empty
        if broken:
            log.warning("history of %s: removed %d loose object files a crash left "
                        "incomplete", self.store, broken)
        self._check_loose = False
        return count

    def _release_packs(self) -> None:
        """Reopen the Repository objects, which keep removed packs open (see _reader)."""
        self._generation += 1
        with self._writing:
            self._repo, self._writer = writer_repository(str(self.path), sync=self._sync)

    # -- reading (any thread) ------------------------------------------------------------

    def resolve(self, rev: str) -> pygit2.Commit:
        """The commit of ``main``'s history that ``rev`` names: a full or abbreviated
        id, ``HEAD``/``main`` with ``~N``, or a time (the newest commit at or before
        it). Raises InvalidInput (anything else) or NotFound."""
        repo = self._reader()
        head = self.head(repo)
        if head is None:
            raise NotFound(f"store {self.store} has no history yet")
        match = _REV_HEAD.fullmatch(rev)
        if match:
            commit = head
            for _ in range(int(match.group(1) or 0)):
                if not commit.parents:
                    raise NotFound(f"{rev}: the history of {self.store} is not that long")
                commit = commit.parents[0]
            return commit
        if _REV_HEX.fullmatch(rev):
            try:
                found = repo.revparse_single(rev)
            except (KeyError, ValueError, pygit2.GitError):
                raise NotFound(f"no commit {rev} in the history of {self.store}") from None
            if not isinstance(found, pygit2.Commit) or not (
                    found.id == head.id or repo.descendant_of(head.id, found.id)):
                raise NotFound(f"no commit {rev} in the history of {self.store}")
            return found
        if _REV_TIME.fullmatch(rev):
            moment = parse_time(rev)
            for commit in self._walk(repo, head):
                if commit.commit_time <= moment:
                    return commit
            raise NotFound(f"the history of {self.store} starts after {rev}")
        raise InvalidInput(f"bad revision {rev!r}: use a commit id (at least 4 hex digits), "
                           "HEAD~N, or a time such as 2026-11-30T10:00")

    def _changes(self, commit: pygit2.Commit, parent: pygit2.Commit | None, rel: str) -> bool:
        """Whether ``commit`` changed ``rel`` (a file, or anything below a folder):
        from the message for a single-path op, else by comparing the trees."""
        named = named_path(commit.message, self.store)
        if named is not None:
            return _under(named, rel)
        return _entry_id(commit.tree, rel) != (_entry_id(parent.tree, rel) if parent else None)

    def _walk(self, repo: pygit2.Repository, head: pygit2.Commit) -> Iterator[pygit2.Commit]:
        walker = repo.walk(head.id, pygit2.enums.SortMode.NONE)
        walker.simplify_first_parent()
        yield from walker

    def log(self, rel: str | None = None, *, limit: int = 20, since: float | None = None,
            until: float | None = None, start: str | None = None,
            author: str | None = None, patch: bool = False) -> list[Entry]:
        """Commits newest first, at most ``limit``; only those that changed ``rel`` (a
        file or folder) when given, made by ``author``, at or after ``since`` and at
        or before ``until``; from ``start`` (a revision, see `resolve`; inclusive)
        back, else from the newest. Raises InvalidInput, NotFound (bad ``start``)."""
        repo = self._reader()
        head = self.head(repo)
        entries: list[Entry] = []
        if start is not None:
            head = self.resolve(start)
        if head is None:
            return entries
        for commit in self._walk(repo, head):
            if since is not None and commit.commit_time < since:
                continue
            if until is not None and commit.commit_time > until:
                continue
            if author is not None and commit.author.name != author:
                continue
            parent = commit.parents[0] if commit.parents else None
            if rel is not None and not self._changes(commit, parent, rel):
                continue
            entries.append(self._entry(repo, commit, parent, rel if patch else None, patch))
            if len(entries) >= limit:
                break
        return entries

    def _entry(self, repo: pygit2.Repository, commit: pygit2.Commit,
               parent: pygit2.Commit | None, rel: str | None, patch: bool) -> Entry:
        trailers = _trailers(commit.message)
        text = None
        if patch:
            if parent is not None:
                diff = parent.tree.diff_to_tree(commit.tree)
            else:
                diff = commit.tree.diff_to_tree(swap=True)
            text = "".join(p.text or "" for p in diff if p is not None and (
                rel is None or _under(p.delta.new_file.path, rel)
                or _under(p.delta.old_file.path, rel)))
        return Entry(str(commit.id), float(commit.commit_time), commit.author.name,
                     trailers.get("Memfs-Op", "?"), commit.message.split("\n", 1)[0],
                     trailers.get("Memfs-Forced") == "yes", trailers.get("Memfs-Digest"), text,
                     _delegate_of(trailers.get("Memfs-Delegate")))

    def content(self, commit: pygit2.Commit, rel: str) -> bytes:
        """The bytes of ``rel`` in ``commit``. Raises NotFound, InvalidInput."""
        try:
            found = commit.tree[rel]
        except KeyError:
            raise NotFound(f"{self.store}/{rel} did not exist at {str(commit.id)[:7]}") \
                from None
        if not isinstance(found, pygit2.Blob):
            raise InvalidInput(f"{self.store}/{rel} is a folder at {str(commit.id)[:7]}")
        return found.data

    def versions(self, rel: str) -> Iterator[tuple[pygit2.Commit, bytes | None]]:
        """(commit, content or None if deleted) for each commit that changed ``rel``,
        newest first."""
        repo = self._reader()
        head = self.head(repo)
        if head is None:
            return
        for commit in self._walk(repo, head):
            parent = commit.parents[0] if commit.parents else None
            if not self._changes(commit, parent, rel):
                continue
            mine = _entry_id(commit.tree, rel)
            blob = repo[mine] if mine is not None else None
            yield commit, blob.data if isinstance(blob, pygit2.Blob) else None


# The ops whose commit changes exactly the one path its summary names (engine.py:
# "write STORE/PATH", "append ...", "edit ...", "delete ...", "restore STORE/PATH to
# REV"); Engine.update (several paths) never uses them. `_changes` answers for these
# from the message alone: no tree is read, which in a big folder is most of the cost.
SINGLE_PATH_OPS = frozenset({"write", "append", "edit", "delete", "restore"})


def named_path(message: str, store: str) -> str | None:
    """The path below the store that a single-path commit's message names, else None
    (another op, or a message memfs did not write)."""
    op = _trailers(message).get("Memfs-Op")
    summary = message.split("\n", 1)[0]
    if op not in SINGLE_PATH_OPS or not summary.startswith(f"{op} {store}/"):
        return None
    named = summary[len(op) + len(store) + 2:]
    if op == "restore":
        named, to, rev = named.rpartition(" to ")
        if not to or not _REV_HEX.fullmatch(rev):
            return None
    return named or None


def _write_error(store: str, error: BaseException) -> HistoryError:
    """The error of a failed history write: NoSpace when its file system is full."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return HistoryFull(f"cannot commit to the history of {store}: the memory's disk "
                           "is full")
    return HistoryError(f"cannot commit to the history of {store}: {error}")


def _entry_id(tree: pygit2.Tree, rel: str) -> pygit2.Oid | None:
    try:
        return tree[rel].id
    except KeyError:
        return None


def _under(path: str | None, rel: str) -> bool:
    return path is not None and (path == rel or path.startswith(rel.rstrip("/") + "/"))


def _pack_batch(repo: pygit2.Repository, objects: Path, loose: list[Path]) -> int:
    """Write one pack of the ``loose`` object files, then remove them."""
    builder = pygit2.PackBuilder(repo)
    for path in loose:
        builder.add(pygit2.Oid(hex=path.parent.name + path.name))
    builder.write(str(objects / "pack"))
    crashpoints.reached("history.packed")
    for path in loose:
        _remove(path)
    return len(loose)


def _remove(path: Path) -> int:
    """Remove ``path``; 1 if it was there, else 0."""
    try:
        path.unlink()
    except FileNotFoundError:
        return 0
    return 1


def _remove_if_older(path: Path, before: float) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_mtime < before:
            path.unlink()


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[bool]:
    """Whether this process holds the flock on ``path`` (taken without waiting)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _hex_dirs(objects: Path) -> list[Path]:
    return [d for d in objects.iterdir()
            if len(d.name) == 2 and all(c in "0123456789abcdef" for c in d.name)]
