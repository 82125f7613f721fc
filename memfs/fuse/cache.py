"""What the kernel caches about the view, and how it is kept truthful: negative
entries below stores, the page cache of a file across its versions, and the commit
listener that invalidates both.

Negative entries. Below a store, a name that does not exist (or is hidden) is
answered with a negative entry cached for ENTRY_TIMEOUT (rg probes .gitignore,
.ignore, .rgignore and .git in every directory it enters). Never at the root: the
kernel would share it with every uid. Each negative answer is remembered (parent
inode, name) before the backing directory is looked at, and a commit through this
daemon invalidates the entries of its file's name and of every directory above it
before the writer is answered, so a created name is visible to the very next walk of
any agent. A name created by another daemon on the same root is noticed through the
store's generation counter (`store_changed`, within a poll of memfs/daemon/serve.py);
one planted by hand appears within ENTRY_TIMEOUT (as attributes changed that way
refresh within ATTR_TIMEOUT).

Versions and the page cache. ``open`` pins the current version with
``Engine.open_version`` (records it as seen) and every ``read`` is a ``pread`` on the
pinned fd. The page cache of an inode may hold the bytes of one backing version only,
its *owner*: the version pinned by the handles opened with the cache enabled.

* opening the owner version again keeps the cache (FOPEN_KEEP_CACHE);
* opening another version while no cached handle is open makes it the new owner:
  the kernel drops the pages (no keep_cache) and its attributes are invalidated so
  i_size is re-read before any cached read could be clamped by a stale size;
* opening another version while cached handles of the old owner are still open gives
  a FOPEN_DIRECT_IO handle that bypasses the page cache (never mixes versions);
* while cached handles are open, getattr/lookup report the owner's size and mtime so
  the kernel's i_size always matches the pages it serves.

So every byte a handle returns comes from the version whose digest was recorded at
its open. Freshness: ``cat`` (any new open) always returns the version current at
open time, whoever changed it. Attributes (``stat``) are refreshed at once after a
commit through this daemon (the commit listener invalidates them before the write
is acknowledged) and within a generation poll after a change made by another daemon
on the same root (`store_changed`); a store directory's own times within
STORE_ATTR_REFRESH (its reply is sent on every path walk, so its fstat is reused for
that long, and dropped by every commit through this daemon or another).

`KernelCache` is built by the view (memfs/fuse/view.py) on its node table and owns
the negative entries and the kernel notifications; the view's ``attach`` registers
`committed` with the engine.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import pyfuse3

from memfs.fuse.nodes import ATTR_TIMEOUT, ENTRY_TIMEOUT, Node, NodeTable, _ident
from memfs.store.fs.paths import MemPath

NEGATIVE_LIMIT = 65536  # negative entries (below stores) tracked for invalidation


class KernelCache:
    """Negative-entry bookkeeping, page-cache ownership and the commit listener, for
    the nodes of ``nodes``."""

    def __init__(self, nodes: NodeTable) -> None:
        self._nodes = nodes
        # (parent ino, name) -> monotonic time after which the kernel has dropped it; a
        # commit through this daemon that creates such a name invalidates the entry
        self._negative: dict[tuple[int, bytes], float] = {}
        self._lock = threading.Lock()  # the negative entries: the listener runs off-loop
        self.negative_entry = pyfuse3.EntryAttributes()
        self.negative_entry.st_ino = 0  # "does not exist", cached for entry_timeout
        self.negative_entry.entry_timeout = ENTRY_TIMEOUT
        self.negative_entry.attr_timeout = 0
        self._loop_thread: int | None = None
        # Held around kernel notifications so that none runs after the session closes.
        self._notify_lock = threading.Lock()
        self._attached = False

    # -- lifecycle (the view's attach and detach) -----------------------------------

    def attach(self) -> None:
        """Notify the kernel from now on; the calling thread serves the requests."""
        self._loop_thread = threading.get_ident()
        self._attached = True

    def detach(self) -> None:
        """Notify the kernel no more (its session is closing)."""
        # A commit still finishing in a worker thread may be notifying the kernel:
        # wait for it (bounded: it can only block on a read we no longer answer).
        locked = self._notify_lock.acquire(timeout=5)
        self._attached = False
        if locked:
            self._notify_lock.release()

    # -- negative entries -----------------------------------------------------------

    def note_negative(self, key: tuple[int, bytes]) -> bool:
        """Record that ``key`` may get a negative entry; False when the table is full
        (the lookup then answers a plain, uncached ENOENT)."""
        now = time.monotonic()
        with self._lock:
            if len(self._negative) >= NEGATIVE_LIMIT:
                for old in [k for k, until in self._negative.items() if until < now]:
                    del self._negative[old]
                if len(self._negative) >= NEGATIVE_LIMIT:
                    return False
            self._negative[key] = now + ENTRY_TIMEOUT + 1.0  # + margin: kernel jiffies
        return True

    def found(self, key: tuple[int, bytes]) -> None:
        """The name of a `note_negative` exists after all: no negative entry for it."""
        self._negative.pop(key, None)

    # -- page-cache ownership -------------------------------------------------------

    def opened(self, node: Node, st: os.stat_result) -> tuple[bool, bool]:
        """How a new handle of the version just pinned (``st``) may use the page cache:
        (keep_cache, direct_io). A handle that is not direct_io counts as one of the
        owner version's until `released`."""
        ident = _ident(st)
        keep_cache = direct_io = False
        if node.owner_handles == 0:
            keep_cache = node.owner == ident
            node.owner, node.owner_stat = ident, st
            node.owner_handles = 1
            if not keep_cache or node.last_size != st.st_size:
                # The kernel may hold another version's size: make it ask again
                # before the first cached read (attributes only: never blocks).
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_inode(node.ino, attr_only=True)
        elif node.owner == ident:
            keep_cache = True
            node.owner_handles += 1
        else:
            direct_io = True  # another version owns the page cache
        return keep_cache, direct_io

    def released(self, node: Node) -> None:
        """A handle `opened` without direct_io is closed."""
        node.owner_handles -= 1
        if node.owner_handles == 0:
            node.owner_stat = None  # used only while open; ~0.7 KB a file kept else

    # -- commits: drop what the kernel caches about a changed file --------------------

    def committed(self, path: MemPath) -> None:
        """Engine commit listener (called in the committing worker thread, after the
        new version is in place and before the caller is answered)."""
        self._nodes.note_commit()  # store directories' times are read again
        if threading.get_ident() == self._loop_thread:
            # Never block the loop that serves the reads an invalidation waits for.
            threading.Thread(target=self._invalidate, args=(path,), daemon=True).start()
        else:
            self._invalidate(path)

    def _invalidate(self, path: MemPath) -> None:
        with self._notify_lock:
            if self._attached:
                self._notify(path)

    def _notify(self, path: MemPath) -> None:
        for top in self._nodes.views():  # personal mode: the file in each agent's view
            self._notify_view(path, top)

    def _notify_view(self, path: MemPath, top: Node) -> None:
        self._drop_negative(path, top)
        parent = self._nodes.find(path.store, path.parts[:-1], True, top)
        node = None if parent is None else parent.child(path.parts[-1], False)
        if node is not None:
            node.last_size = None
            with contextlib.suppress(OSError):
                pyfuse3.invalidate_inode(node.ino)  # attributes and cached pages
        if parent is not None:
            with contextlib.suppress(OSError):
                pyfuse3.invalidate_inode(parent.ino, attr_only=True)
            if node is not None and self._nodes.backing_stat(path.store, path.parts) is None:
                # Deleted: drop the dentry now (blocking is fine off the loop).
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_entry(parent.ino, node.name, deleted=node.ino)

    # -- changes made through other daemons: drop what the kernel caches of a store ---

    def store_changed(self, store: str) -> None:
        """Another daemon on the root changed something in ``store`` (which files is
        not known): make the kernel ask again about everything below it that it may
        still cache, so the next lookup, stat, ls or open sees the change.

        Drops the store's negative entries and the attributes of every node handed to
        the kernel within its timeouts (a deleted file's entry then answers ENOENT at
        the next stat: getattr finds nothing). The page cache needs nothing: the next
        open pins the current version and keeps the pages only if they are its own.
        A lookup in flight while this runs can still hand out what it saw before the
        change: callers call again a poll later (memfs/daemon/serve.py). Blocking: call
        from a worker thread, never from the loop that serves requests."""
        now = time.monotonic()
        horizon = now - max(ENTRY_TIMEOUT, ATTR_TIMEOUT) - 1.0  # + margin: kernel jiffies
        nodes = self._nodes.handed_out(store, now, horizon)
        with self._lock:
            negatives = [(key, until) for key, until in self._negative.items()
                         if until > now and self._nodes.node(key[0]).store == store]
            for key, _until in negatives:
                del self._negative[key]
        with self._notify_lock:
            if not self._attached:
                return
            for (parent_ino, name), _until in negatives:
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_entry(parent_ino, name)
            for node in nodes:
                node.last_size = None
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_inode(node.ino, attr_only=True)

    def _drop_negative(self, path: MemPath, top: Node) -> None:
        """Invalidate the negative entries we handed out in the view below ``top`` for
        the file's name or any directory above it (a commit may have created them):
        the next walk asks again."""
        now = time.monotonic()
        directory = self._nodes.find(path.store, (), True, top)
        for name in path.parts:
            if directory is None:
                return  # never looked up: the kernel has no entry below it
            key = (directory.ino, os.fsencode(name))
            with self._lock:
                until = self._negative.pop(key, None)
            if until is not None and until > now:
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_entry(directory.ino, key[1])
            directory = directory.child(name, True)
