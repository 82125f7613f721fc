"""The inode table of the FUSE view (memfs/fuse/view.py) and the attributes it hands
to the kernel.

Inodes. One stable inode number per (store, path, kind) for the daemon's life, the
same for every agent; only listings differ per agent. In personal mode the root holds
one directory per agent, each with the stores below it, and a node belongs to one
agent's view (``agent``): one inode per (agent, store, path, kind). Symlinks, FIFOs,
sockets and devices are hidden (never listed, ENOENT); ROOT/state is never reachable.

Attributes. A child of the root (a store directory; in personal mode an agent's
directory) is always answered with ``entry_timeout = attr_timeout = 0`` (see
Isolation in memfs/fuse/view.py); a store directory's own times are re-read at most
every STORE_ATTR_REFRESH seconds, and at once after a commit through this daemon.
Anything deeper is cached for ENTRY_TIMEOUT and ATTR_TIMEOUT, and its attributes are
built once per (size, mtime, ctime). While cached handles of a file are open its
attributes are those of the version that owns the page cache (memfs/fuse/cache.py).

Hand-out epochs. Each node notes the epoch in which its entry or attributes last went
to the kernel (``Node.handed``); a change made by another daemon ends the epoch
(`NodeTable.handed_out`), so the nodes the kernel may still cache are those handed in
the epochs that ended within the kernel's timeouts.

`NodeTable` is built by the view (memfs/fuse/view.py) and owns all of this: the nodes,
their lock, the memo of attributes and the epochs.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyfuse3

from memfs.fuse.errors import _fail
from memfs.store.errors import InvalidInput
from memfs.store.fs import backing
from memfs.store.fs.paths import MAX_NAME_BYTES, MemPath
from memfs.store.read.lru import LRU

ROOT = pyfuse3.ROOT_INODE
ENTRY_TIMEOUT = 5.0  # files and directories below a store
ATTR_TIMEOUT = 5.0
ROOT_ATTR_TIMEOUT = 1.0  # the root's own attributes (same for every agent)
STORE_ATTR_REFRESH = 1.0  # a store directory's times, re-read at most this often
BLKSIZE = 128 * 1024  # preferred I/O size reported to tools (cat, Python buffers)
# nodes whose last attributes are kept for reuse (see NodeTable.attrs): a listing of a
# few thousand files is answered from it again and again; ~460 bytes each
ATTRS_MEMO = 4096

# (st_dev, st_ino, st_mtime_ns, st_size), each as 64 bits of one int: identifies one
# backing version. Kept per file once opened: one int is ~60 bytes, a tuple of four
# ~190 (13 MB more after `rg` opened 100,000 files).
Ident = int
_U64 = (1 << 64) - 1


def _ident(st: os.stat_result) -> Ident:
    return (st.st_dev | st.st_ino << 64 | (st.st_mtime_ns & _U64) << 128
            | st.st_size << 192)


@dataclass(eq=False, slots=True)  # one per path met: no per-instance dict
class Node:
    ino: int
    store: str  # "" for the root (and an agent's directory)
    parts: tuple[str, ...]  # below the store; () for a store directory
    is_dir: bool
    parent: int
    # page-cache ownership (regular files only), see memfs/fuse/cache.py
    owner: Ident | None = None
    owner_stat: os.stat_result | None = None
    owner_handles: int = 0
    last_size: int | None = None  # size last reported to the kernel
    store_entry: pyfuse3.EntryAttributes | None = None  # a store's reply, reused
    store_epoch: int = -1  # the commit epoch and time until which store_entry is fresh
    store_fresh_until: float = 0.0
    # the hand-out epoch in which its entry or attributes last went to the kernel
    # (memfs/fuse/cache.py, store_changed); -1: never
    handed: int = -1
    # directories: name -> child node, files and directories apart (a name may have
    # been both, over time); the only index by name (see NodeTable.find). Keyed by the
    # name object that ends the child's parts (no key of its own to keep); None for a
    # file (an empty dict would cost 64 bytes a file).
    files: dict[str, Node] | None = None
    dirs: dict[str, Node] | None = None
    agent: str = ""  # personal mode: the agent whose view this node is part of

    @property
    def is_store(self) -> bool:
        return self.is_dir and self.store != "" and not self.parts

    @property
    def is_agent(self) -> bool:
        """An agent's directory (personal mode: a child of the root)."""
        return not self.store and self.agent != ""

    @property
    def name(self) -> bytes:
        """The name in its directory, as the kernel gets it (made when needed: kept,
        it would cost ~40 bytes a node)."""
        return os.fsencode(self.parts[-1] if self.parts else self.store or self.agent)

    def child(self, name: str, is_dir: bool) -> Node | None:
        """The child node of that name and kind, if one was made (None for a file)."""
        children = self.dirs if is_dir else self.files
        return None if children is None else children.get(name)

    def mem_path(self) -> MemPath:
        # Made when needed (an open, a getxattr), not kept: ~200 bytes a node.
        return MemPath(self.store, self.parts)


@dataclass(eq=False, slots=True)
class Handle:
    fd: int
    node: Node
    cached: bool  # counted in node.owner_handles
    size: int  # the pinned version's size: reads stop there (an append may grow the file)


@dataclass(eq=False)
class DirHandle:
    node: Node
    agent: str | None
    uid: int  # the opener's
    entries: list[tuple[bytes, pyfuse3.EntryAttributes]] | None = None


@dataclass
class _Counters:
    """How opens were served (for debugging and benchmarks)."""

    opens_inline: int = 0
    opens_thread: int = 0
    keep_cache: int = 0
    direct_io: int = 0


def _showable(name: str) -> bool:
    """Any real name (even one the socket cannot address, such as a non-UTF-8 one:
    it can still be read here); never "." or ".." or an overlong name."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        return False
    # an ASCII name is as long encoded as decoded (saves an fsencode per entry listed)
    return len(name if name.isascii() else os.fsencode(name)) <= MAX_NAME_BYTES


class NodeTable:
    """Nodes by inode number and, through their directories, by name; and their
    attributes. ``store_fd`` gives a store's directory fd (the engine's); ``personal``:
    the root holds agents' directories (memfs/fuse/view.py); ``cached_agents``: the
    kernel may keep those directories' entries (a mount that one uid alone may use)."""

    def __init__(self, store_fd: Callable[[str], int], *, personal: bool = False,
                 cached_agents: bool = False, memo: int = ATTRS_MEMO) -> None:
        self._store_fd = store_fd
        self._personal = personal
        self._agent_timeout = ENTRY_TIMEOUT if cached_agents else 0.0
        self._started_ns = time.time_ns()  # the root's times
        self.root = Node(ROOT, "", (), True, ROOT, files={}, dirs={})
        self._nodes: dict[int, Node] = {ROOT: self.root}
        self._next_ino = itertools.count(ROOT + 1)
        self._lock = threading.Lock()  # the commit listener reads the table off-loop
        self._commit_epoch = 0  # bumped by every commit (store directories' times)
        self._hand_epoch = 0  # see Node.handed
        self._epoch_ended: dict[int, float] = {}  # past hand-out epoch -> when it ended
        # ino -> the last attributes built for it and the (size, mtime, ctime) they were
        # built from; bounded (``memo``), not one per node
        self._attrs_memo: LRU[int, tuple[tuple[int, int, int], pyfuse3.EntryAttributes]] = \
            LRU(memo)

    # -- the inode table ------------------------------------------------------------

    def node(self, inode: int) -> Node:
        """The node of ``inode``; ENOENT (a FUSEError) if there is none."""
        node = self._nodes.get(inode)
        if node is None:
            raise _fail(errno.ENOENT)
        return node

    def child(self, parent: Node, name: str, is_dir: bool) -> Node:
        """The node of ``name`` (a directory or not) in the directory ``parent``, made
        on first use. The root holds stores only (in personal mode agents' directories,
        which hold stores only)."""
        if parent.ino == ROOT or parent.is_agent:
            is_dir = True
        children = parent.dirs if is_dir else parent.files
        assert children is not None  # a parent is a directory
        node = children.get(name)
        if node is None:
            with self._lock:
                node = children.get(name)
                if node is None:
                    agent = parent.agent
                    parts: tuple[str, ...]
                    if parent.ino == ROOT and self._personal:
                        store, parts, agent = "", (), name
                    elif parent.ino == ROOT or parent.is_agent:
                        store, parts = name, ()
                    else:
                        store, parts = parent.store, (*parent.parts, name)
                    node = Node(next(self._next_ino), store, parts, is_dir, parent.ino,
                                agent=agent)
                    if is_dir:
                        node.files, node.dirs = {}, {}
                    self._nodes[node.ino] = node
                    children[name] = node  # the same object as parts[-1]
        return node

    def views(self) -> list[Node]:
        """The top of each view: the root, or in personal mode each agent's directory
        the kernel was told of."""
        if not self._personal:
            return [self.root]
        assert self.root.dirs is not None
        with self._lock:  # the loop thread may add one meanwhile
            return list(self.root.dirs.values())

    def find(self, store: str, parts: tuple[str, ...], is_dir: bool,
             top: Node | None = None) -> Node | None:
        """The node of STORE/PARTS in the view below ``top`` (default: the root), if
        one was ever made (the kernel was told of it); found through the directories'
        children (no second index: ~100 bytes a node saved)."""
        node = (top or self.root).child(store, True)
        for depth, name in enumerate(parts):
            if node is None:
                return None
            node = node.child(name, is_dir if depth == len(parts) - 1 else True)
        return node

    # -- epochs -------------------------------------------------------------------

    def note_commit(self) -> None:
        """A commit through this daemon: store directories' times are read again."""
        with self._lock:
            self._commit_epoch += 1

    def handed_out(self, store: str, now: float, horizon: float) -> list[Node]:
        """Another daemon changed ``store``: end the hand-out epoch (at monotonic time
        ``now``) and return the nodes below the store whose entry or attributes the
        kernel may still cache: handed out in this epoch or in one that ended after
        ``horizon`` (older ones have expired from the kernel's caches). Children of
        the root are left out: they are answered afresh anyway. Store directories'
        times are read again, as after a commit."""
        with self._lock:
            self._commit_epoch += 1
            recent = {epoch for epoch, ended in self._epoch_ended.items() if ended > horizon}
            recent.add(self._hand_epoch)
            self._epoch_ended = {epoch: self._epoch_ended[epoch] for epoch in recent
                                 if epoch != self._hand_epoch}
            self._epoch_ended[self._hand_epoch] = now
            self._hand_epoch += 1
            return [node for node in self._nodes.values()
                    if node.store == store and node.parent != ROOT and node.handed in recent]

    # -- attributes ---------------------------------------------------------------

    def backing_stat(self, store: str, parts: tuple[str, ...], *,
                     attempts: int = backing.STALE_ATTEMPTS) -> os.stat_result | None:
        """lstat of STORE/PARTS in the backing directory, never following a symlink.
        ESTALE (another host replaced the file while we looked it up) is looked up
        again, ``attempts`` times in all."""
        store_fd = self._store_fd(store)
        if not parts:
            return os.fstat(store_fd)
        try:
            parent = backing.walk_parent(store_fd, parts, create=False)
        except (FileNotFoundError, NotADirectoryError, InvalidInput):
            return None
        try:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            if error.errno != errno.ESTALE or attempts <= 1:
                raise
        finally:
            os.close(parent)
        return self.backing_stat(store, parts, attempts=attempts - 1)

    def root_attrs(self) -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ROOT
        attrs.st_mode = stat.S_IFDIR | 0o555
        attrs.st_nlink = 2
        attrs.st_uid = attrs.st_gid = 0
        attrs.st_blksize = BLKSIZE
        attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = self._started_ns
        attrs.attr_timeout = ROOT_ATTR_TIMEOUT
        attrs.entry_timeout = ROOT_ATTR_TIMEOUT
        return attrs

    def agent_attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        """An agent's directory (personal mode): the root's times; timeouts 0 (it is
        the child of the root that every path walk revalidates, as a store directory
        is in system mode), or ENTRY_TIMEOUT on a mount that only the owner's uid may
        use (``cached_agents``); one reply object per agent, reused."""
        attrs = node.store_entry
        if attrs is None:
            attrs = node.store_entry = self.root_attrs()
            attrs.st_ino = node.ino
            attrs.attr_timeout = attrs.entry_timeout = self._agent_timeout
        node.handed = self._hand_epoch
        return attrs

    def attrs(self, node: Node, st: os.stat_result) -> pyfuse3.EntryAttributes:
        if not node.is_dir and node.owner_handles and node.owner_stat is not None:
            st = node.owner_stat  # keep i_size equal to the pages being served
        # Built once per (size, mtime, ctime): a listing of 2,000 files rebuilt them all
        # on every opendir. Never mutated once built (store replies are not memoised:
        # store_attrs updates those in place).
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        node.handed = self._hand_epoch
        memo = self._attrs_memo.get(node.ino)
        if memo is not None and memo[0] == key:
            if not node.is_dir:
                node.last_size = st.st_size
            return memo[1]
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = node.ino
        attrs.st_uid = attrs.st_gid = 0
        attrs.st_blksize = BLKSIZE
        if node.is_dir:
            attrs.st_mode = stat.S_IFDIR | 0o555
            attrs.st_nlink = 1  # "unknown": tools must not infer subdirectory counts
            attrs.st_size = 0
        else:
            attrs.st_mode = stat.S_IFREG | 0o444
            attrs.st_nlink = 1
            attrs.st_size = st.st_size
            attrs.st_blocks = (st.st_size + 511) // 512
            node.last_size = st.st_size
        attrs.st_atime_ns = st.st_mtime_ns
        attrs.st_mtime_ns = st.st_mtime_ns
        attrs.st_ctime_ns = st.st_ctime_ns
        if node.parent == ROOT:  # a store directory (see store_attrs)
            attrs.entry_timeout = 0
            attrs.attr_timeout = 0
        else:
            attrs.entry_timeout = ENTRY_TIMEOUT
            attrs.attr_timeout = ATTR_TIMEOUT
            self._attrs_memo.put(node.ino, (key, attrs))
        return attrs

    def store_attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        """A store directory's reply (timeouts 0), one object per store updated in
        place: pyfuse3 copies it into the reply before the next request runs."""
        attrs = node.store_entry
        now = time.monotonic()
        # Its times are re-read at most every STORE_ATTR_REFRESH seconds, and at once
        # after a commit through this daemon (the epoch is taken before the fstat, so
        # a commit racing with it makes the next request read again).
        if attrs is not None and now < node.store_fresh_until and (
                node.store_epoch == self._commit_epoch):
            return attrs
        epoch = self._commit_epoch
        st = os.fstat(self._store_fd(node.store))
        if attrs is None:
            attrs = node.store_entry = self.attrs(node, st)
        else:
            attrs.st_atime_ns = attrs.st_mtime_ns = st.st_mtime_ns
            attrs.st_ctime_ns = st.st_ctime_ns
        node.store_epoch, node.store_fresh_until = epoch, now + STORE_ATTR_REFRESH
        return attrs


def kind_of(st: os.stat_result) -> bool | None:
    """True for a directory, False for a regular file, None for anything hidden."""
    if stat.S_ISDIR(st.st_mode):
        return True
    if backing.is_kept(st):
        return False
    return None
