"""Git history of a store: one bare repository per store, one commit per change. This
module holds what its roles share: opening the repository (`Repository`), the commit
message and its trailers, and the types and errors; the roles are `writer.py`
(`HistoryWriter`: commits, recovery, durability), `maintenance.py`
(`HistoryMaintenance`: packing) and `reader.py` (`HistoryReader`: resolve, log, old
contents), joined as one `StoreHistory` in `store_history.py`.

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

Loose objects are packed by `pack` (maintenance.py), which the daemon calls in a
worker thread, outside the store lock (packed objects are immutable, so writers go on),
at its first maintenance and then every PACK_AFTER objects or PACKS_BEFORE_MERGE packs
of batches; it also removes what crashes left, and merges packs so that there are at
most about log2(objects / PACK_AFTER) + 1 of them (memfs/store/history/packs.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pygit2

from memfs.errors import MemfsError
from memfs.store.errors import InvalidInput, NoSpace
from memfs.store.history import revs
from memfs.store.history.gitobjects import on_shared_filesystem, writer_repository

log = logging.getLogger("memfs.history")

REF = "refs/heads/main"
COMMITTER = ("memfs", "memfs@memfs.invalid")

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


def commit_trailers(message: str) -> dict[str, str]:
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


def delegate_of(trailer: str | None) -> int | None:
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


class Repository:
    """The repository of one store, opened: what the roles of `StoreHistory` share.
    Writes go through one Repository object (``_repo``, taken in turns under
    ``_writing``); reads use one Repository object per thread (`_reader`)."""

    # Shared by the roles: objects written since the last pack (approximate, counted
    # by the writer, reset by packing) and packs written by batches since then.
    _written: int
    _packs: int

    def __init__(self, path: Path, store: str) -> None:
        self.path = path
        self.store = store
        self._local = threading.local()
        self._written = 0
        self._packs = 0
        self._generation = 0  # bumped when packs are removed (see _reader)
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


# The ops whose commit changes exactly the one path its summary names (engine.py:
# "write STORE/PATH", "append ...", "edit ...", "delete ...", "restore STORE/PATH to
# REV"); Engine.update (several paths) never uses them. `_changes` answers for these
# from the message alone: no tree is read, which in a big folder is most of the cost.
SINGLE_PATH_OPS = frozenset({"write", "append", "edit", "delete", "restore"})


def named_path(message: str, store: str) -> str | None:
    """The path below the store that a single-path commit's message names, else None
    (another op, or a message memfs did not write)."""
    op = commit_trailers(message).get("Memfs-Op")
    summary = message.split("\n", 1)[0]
    if op not in SINGLE_PATH_OPS or not summary.startswith(f"{op} {store}/"):
        return None
    named = summary[len(op) + len(store) + 2:]
    if op == "restore":
        named, to, rev = named.rpartition(" to ")
        if not to or not _REV_HEX.fullmatch(rev):
            return None
    return named or None


def write_error(store: str, error: BaseException) -> HistoryError:
    """The error of a failed history write: NoSpace when its file system is full."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return HistoryFull(f"cannot commit to the history of {store}: the memory's disk "
                           "is full")
    return HistoryError(f"cannot commit to the history of {store}: {error}")


def entry_id(tree: pygit2.Tree, rel: str) -> pygit2.Oid | None:
    try:
        return tree[rel].id
    except KeyError:
        return None


def is_under(path: str | None, rel: str) -> bool:
    return path is not None and (path == rel or path.startswith(rel.rstrip("/") + "/"))
