"""What the remote mount keeps: its inode table, the folder listings and file contents
it fetched, and what a change makes stale (the kernel invalidations to do).

Trust. A cached listing is used only while the change stream is connected
(``trusted``): every change the daemon acknowledges reaches the stream before any
later request, and `changed` drops what it made stale. While the stream is down the
mount asks the daemon every time; what it cached stays only for ``--stale-ok``.

Races. A listing fetched while a change arrives may predate it: each store has a
generation, bumped by every change in it; the changes that came while a listing was
fetched are replayed onto it (each event carries its file's entry), or, when that
cannot be done, it is not kept and the kernel is told to cache nothing from it
(`Cache.generation`, `Cache.keep`).

Contents are kept by digest and validated at every open that records a read
(``If-None-Match``: a 304 is still a read), so a change never needs to drop them. One
fetched while the stream was up is also *current* until a change of it (or a resync)
comes: a scan, which records nothing, is then served from it without a round trip.
They also serve ``--stale-ok``. Everything is bounded: MAX_FOLDERS listings, MAX_ENTRIES entries in
them, ``content_bytes`` of contents.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pyfuse3

ROOT = pyfuse3.ROOT_INODE
MAX_FOLDERS = 4096
MAX_ENTRIES = 500_000  # entries in all kept listings (~200 bytes each)
LOG = 1024  # changes kept per store, replayed onto a listing fetched meanwhile
CONTENT_BYTES = 64 * 1024 * 1024  # file contents kept (default of --cache-mib)


@dataclass(frozen=True, slots=True)
class Entry:
    """A file or folder as its folder's listing gives it."""

    is_dir: bool
    size: int
    mtime_ns: int
    ctime_ns: int


@dataclass(slots=True)
class Listing:
    mtime_ns: int
    ctime_ns: int
    entries: dict[str, Entry]
    fetched: float = field(default_factory=time.monotonic)
    racing: bool = False  # a change came while it was fetched: not kept, not cached


@dataclass(eq=False, slots=True)
class Node:
    ino: int
    store: str  # "" for the root
    rel: str  # below the store, "" for the store's folder
    is_dir: bool
    parent: int
    # what the kernel was last told of this file: size, and the digest whose pages it
    # may cache (None: none it may keep)
    kernel_size: int | None = None
    page_digest: str | None = None

    @property
    def name(self) -> str:
        return self.rel.rpartition("/")[2] if self.rel else self.store

    @property
    def path(self) -> str:
        """STORE/REL (the store alone for its folder)."""
        return f"{self.store}/{self.rel}" if self.rel else self.store


class Cache:
    """Thread-safe: the FUSE handlers (the trio thread) read it, the change stream's
    thread invalidates it."""

    def __init__(self, content_bytes: int = CONTENT_BYTES) -> None:
        self._lock = threading.Lock()
        self.root = Node(ROOT, "", "", True, ROOT)
        self._nodes: dict[int, Node] = {ROOT: self.root}
        self._by_key: dict[tuple[str, str, bool], Node] = {}
        self._next_ino = itertools.count(ROOT + 1)
        self.stores: list[str] | None = None  # the agent's, as the daemon lists them
        self._listings: collections.OrderedDict[tuple[str, str], Listing] = \
            collections.OrderedDict()
        self._entries = 0
        self._contents: collections.OrderedDict[str, tuple[str, bytes]] = \
            collections.OrderedDict()
        self._content_bytes = 0
        self.content_budget = content_bytes
        self._current: set[tuple[str, str]] = set()  # contents known current
        # per store: the last LOG changes (generation, path, what the event told)
        self._log: dict[str, collections.deque[tuple[int, str, dict[str, Any] | None]]] = {}
        self._generations: dict[str, int] = collections.defaultdict(int)
        self._epoch = 0  # bumped by every resync (covers every store)
        self.trusted = False  # the change stream is connected
        self.lost_at = time.monotonic()  # when it was last lost (or never had)

    # -- nodes --------------------------------------------------------------------------

    def node(self, ino: int) -> Node | None:
        return self._nodes.get(ino)

    def child(self, parent: Node, name: str, is_dir: bool) -> Node:
        """The node of ``name`` in folder ``parent`` (a store below the root), made on
        first use; one inode per (store, path, kind) for the mount's life."""
        if parent.ino == ROOT:
            key = (name, "", True)
        else:
            key = (parent.store, f"{parent.rel}/{name}" if parent.rel else name, is_dir)
        node = self._by_key.get(key)
        if node is None:
            with self._lock:
                node = self._by_key.get(key)
                if node is None:
                    node = Node(next(self._next_ino), key[0], key[1], key[2], parent.ino)
                    self._nodes[node.ino] = node
                    self._by_key[key] = node
        return node

    # -- listings -------------------------------------------------------------------------

    def generation(self, store: str) -> tuple[int, int]:
        return self._epoch, self._generations[store]

    def listing(self, store: str, rel: str, *, stale_ok: float = 0.0) -> Listing | None:
        """The kept listing of STORE/REL, if it may be used: while trusted, or within
        ``stale_ok`` seconds of losing the stream."""
        if not self.trusted and (not stale_ok or time.monotonic() - self.lost_at > stale_ok):
            return None
        with self._lock:
            found = self._listings.get((store, rel))
            if found is not None:
                self._listings.move_to_end((store, rel))
            return found

    def keep(self, store: str, rel: str, listing: Listing, generation: tuple[int, int]
             ) -> bool:
        """Keep a listing fetched from ``generation`` on; True if kept. Changes that
        came since are replayed onto it (`_replay`), or, when that cannot be done, it
        is not kept."""
        with self._lock:
            if self._epoch != generation[0]:
                return False
            if self._generations[store] != generation[1] and \
                    not self._replay(store, rel, listing, generation[1]):
                return False
            old = self._listings.pop((store, rel), None)
            if old is not None:
                self._entries -= len(old.entries)
            self._listings[(store, rel)] = listing
            self._entries += len(listing.entries)
            while self._listings and (len(self._listings) > MAX_FOLDERS
                                      or self._entries > MAX_ENTRIES):
                _key, dropped = self._listings.popitem(last=False)
                self._entries -= len(dropped.entries)
            return True

    def _replay(self, store: str, rel: str, listing: Listing, since: int) -> bool:
        """Apply to ``listing`` (of STORE/REL, fetched from generation ``since`` on) the
        changes of the store that came since, in order: each carries its file's entry
        as it was when the event left, so the last one of each name is at least as new
        as the listing or followed by another event still to come. False when that
        cannot be told (events lost from the log, or one without the file's entry in a
        folder below this one: a folder may have been made or removed)."""
        log = self._log.get(store)
        if not log or log[0][0] > since + 1:
            return False
        entries = dict(listing.entries)
        prefix = f"{rel}/" if rel else ""
        for number, path, now in log:
            if number <= since:
                continue
            if not path:  # anything in the store may have changed
                return False
            if not path.startswith(prefix):
                continue
            name = path[len(prefix):]
            if "/" in name or now is None or "file" not in now or not now.get("folder"):
                return False
            file = now["file"]
            if file is None:
                entries.pop(name, None)
            else:
                entries[name] = Entry(bool(file["dir"]), int(file["size"]),
                                      int(file["mtime_ns"]), int(file["ctime_ns"]))
            listing.mtime_ns = now["folder"]["mtime_ns"]
            listing.ctime_ns = now["folder"]["ctime_ns"]
        listing.entries = entries
        return True

    # -- contents -------------------------------------------------------------------------

    def content(self, path: str) -> tuple[str, bytes] | None:
        with self._lock:
            found = self._contents.get(path)
            if found is not None:
                self._contents.move_to_end(path)
            return found

    def current_content(self, store: str, path: str) -> tuple[str, bytes] | None:
        """The kept content of STORE/PATH if it is known to be the current version: it
        was fetched while the stream was up and no change of it came since (a scan may
        be served from it without asking the daemon: it records nothing anyway)."""
        if not self.trusted or (store, path) not in self._current:
            return None
        return self.content(f"{store}/{path}" if path else store)

    def keep_content(self, path: str, digest: str, data: bytes,
                     generation: tuple[int, int] | None = None) -> None:
        """Keep a file's content (STORE/PATH); ``generation``: its store's when the
        fetch began: the content is current unless a change came since."""
        store, _, rel = path.partition("/")
        with self._lock:
            if generation is not None and self.trusted and \
                    (self._epoch, self._generations[store]) == generation:
                self._current.add((store, rel))
            else:
                self._current.discard((store, rel))
        if len(data) > self.content_budget // 4:
            return
        with self._lock:
            old = self._contents.pop(path, None)
            if old is not None:
                self._content_bytes -= len(old[1])
            self._contents[path] = (digest, data)
            self._content_bytes += len(data)
            while self._content_bytes > self.content_budget:
                dropped_path, (_digest, dropped) = self._contents.popitem(last=False)
                self._content_bytes -= len(dropped)
                store, _, rel = dropped_path.partition("/")
                self._current.discard((store, rel))

    # -- changes ----------------------------------------------------------------------

    def changed(self, store: str, path: str, now: dict[str, Any] | None = None
                ) -> list[tuple[int, str | None]]:
        """A change of STORE/PATH (``path`` empty: anything in the store); ``now``: what
        the event tells of it (``file``: its entry, None when gone; ``folder``: its
        folder's times), which updates the kept listing in place when there is one.
        Else drops the listings it made stale. Returns the kernel invalidations to do,
        outside any lock: (inode, None) for an inode's attributes and pages, (folder
        inode, name) for an entry."""
        with self._lock:
            self._generations[store] += 1
            log = self._log.setdefault(store, collections.deque(maxlen=LOG))
            log.append((self._generations[store], path, now))
            if path:
                self._current.discard((store, path))
            else:
                self._current = {key for key in self._current if key[0] != store}
            if path and now is not None and "file" in now and now.get("folder"):
                updated = self._update(store, path, now["file"], now["folder"])
                if updated is not None:
                    return updated
            store_node = self._by_key.get((store, "", True))
            if not path:
                for key in [key for key in self._listings if key[0] == store]:
                    self._entries -= len(self._listings.pop(key).entries)
                nodes = [n for n in self._nodes.values() if n.store == store]
                return [(n.ino, None) for n in nodes] + [(n.parent, n.name) for n in nodes]
            names = path.split("/")
            todo: list[tuple[int, str | None]] = []
            folder = store_node
            for depth in range(len(names)):
                rel = "/".join(names[:depth])
                dropped = self._listings.pop((store, rel), None)
                if dropped is not None:
                    self._entries -= len(dropped.entries)
                if folder is not None:
                    todo.append((folder.ino, None))
                    todo.append((folder.ino, names[depth]))
                folder = self._by_key.get((store, "/".join(names[: depth + 1]), True))
            for is_dir in (False, True):
                node = self._by_key.get((store, path, is_dir))
                if node is not None:
                    todo.append((node.ino, None))
            return todo

    def _update(self, store: str, path: str, file: dict[str, Any] | None,
                folder: dict[str, int]) -> list[tuple[int, str | None]] | None:
        """`changed` for a kept listing of the file's folder: updated in place (a new
        Listing: a handler may be iterating the old one); None when there is none."""
        parent, _, name = path.rpartition("/")
        listing = self._listings.get((store, parent))
        if listing is None:
            return None
        entries = dict(listing.entries)
        before = entries.get(name)
        if file is None:
            entries.pop(name, None)
        else:
            entries[name] = Entry(bool(file["dir"]), int(file["size"]),
                                  int(file["mtime_ns"]), int(file["ctime_ns"]))
        self._listings[(store, parent)] = Listing(folder["mtime_ns"], folder["ctime_ns"],
                                                  entries)
        self._entries += len(entries) - len(listing.entries)
        todo: list[tuple[int, str | None]] = []
        folder_node = self._by_key.get((store, parent, True))
        if parent:  # the folder's own entry in its folder
            up, _, folder_name = parent.rpartition("/")
            above = self._listings.get((store, up))
            if above is not None and folder_name in above.entries:
                above.entries = {**above.entries, folder_name: Entry(
                    True, 0, folder["mtime_ns"], folder["ctime_ns"])}
            elif above is not None:
                self._entries -= len(self._listings.pop((store, up)).entries)
        if folder_node is not None:
            todo.append((folder_node.ino, None))
            if before is None or file is None or before.is_dir != bool(file["dir"]):
                todo.append((folder_node.ino, name))
        for is_dir in (False, True):
            node = self._by_key.get((store, path, is_dir))
            if node is not None:
                todo.append((node.ino, None))
        return todo

    def resync(self, *, trusted: bool) -> list[tuple[int, str | None]]:
        """Everything may have changed (the stream was lost, came back, or fell behind):
        drop every listing and the stores; returns the invalidations of every node."""
        with self._lock:
            self._epoch += 1
            self._current.clear()
            if self.trusted and not trusted:
                self.lost_at = time.monotonic()
            self.trusted = trusted
            if trusted:  # (kept while untrusted, for --stale-ok)
                self._listings.clear()
                self._entries = 0
                self.stores = None
            nodes = [n for n in self._nodes.values() if n.ino != ROOT]
        for node in nodes:
            node.page_digest = None
        return [(n.ino, None) for n in nodes] + [(n.parent, n.name) for n in nodes]
