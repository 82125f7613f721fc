"""The read-only, per-agent FUSE view of the stores (the pyfuse3 request handlers).

Identity. Every request carries the uid of the calling process (``ctx.uid``); it is
mapped to an agent with the config. The root lists exactly that agent's stores; an
unknown uid (root included, it is not an agent) sees an empty root. A store the agent
is not attached to does not exist for it: lookup, getattr, opendir, open, getxattr
and access all answer ENOENT at the root level and EACCES below it.

Isolation under shared kernel caches. The kernel's dentry and attribute caches are
shared by every uid, so a store directory (a child of the root) is always returned
with ``entry_timeout = attr_timeout = 0``: every path walk through ``/memory/STORE``
revalidates that dentry with a LOOKUP that carries the walker's uid, and a denied
lookup drops the dentry. Anything deeper can be cached (ENTRY_TIMEOUT/ATTR_TIMEOUT)
because it can only be reached by walking through the store dentry. The root's
readdir is never cached by the kernel (no FOPEN_CACHE_DIR) and is computed per
opendir from the opener's uid. That store LOOKUP is the most frequent request of all
(every open by path; rg also canonicalises each matching file's path, one more walk
per component), so it is one probe of a table built from the config.

Negative entries. Below a store, a name that does not exist (or is hidden) is
answered with a negative entry cached for ENTRY_TIMEOUT (rg probes .gitignore,
.ignore, .rgignore and .git in every directory it enters). Never at the root: the
kernel would share it with every uid. Each negative answer is remembered (parent
inode, name) before the backing directory is looked at, and a commit through this
daemon invalidates the entries of its file's name and of every directory above it
before the writer is answered, so a created name is visible to the very next walk of
any agent. A name created by another daemon on the same root, or planted by hand,
appears within ENTRY_TIMEOUT (as attributes changed that way refresh within
ATTR_TIMEOUT).

Inodes. One stable inode number per (store, path, kind) for the daemon's life, the
same for every agent; only listings differ per agent. Symlinks, FIFOs, sockets
and devices are hidden (never listed, ENOENT); ROOT/state is never reachable.

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
is acknowledged) and within ATTR_TIMEOUT after a change made by another daemon on
the same root (a store directory's own times within STORE_ATTR_REFRESH: its reply is
sent on every path walk, so its fstat is reused for that long, and dropped by every
commit through this daemon).

Cost of an open. Pinning is one openat2 and one fstat; the version record and the
agent's seen record are answered from memory while provably unchanged (see
memfs/versions.py and memfs/seen.py), so a warm open reads no xattr at all and writes
one only when the agent's record differs from the version it pins.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar, cast

import pyfuse3
import trio

from memfs import backing
from memfs.engine import Engine
from memfs.errors import InvalidInput, MemfsError, NotFound, PermissionDenied
from memfs.paths import MAX_NAME_BYTES, MemPath

log = logging.getLogger("memfs.mount")

ROOT = pyfuse3.ROOT_INODE
ENTRY_TIMEOUT = 5.0  # files and directories below a store
ATTR_TIMEOUT = 5.0
ROOT_ATTR_TIMEOUT = 1.0  # the root's own attributes (same for every agent)
STORE_ATTR_REFRESH = 1.0  # a store directory's times, re-read at most this often
NEGATIVE_LIMIT = 65536  # negative entries (below stores) tracked for invalidation
INLINE_OPEN_LIMIT = 1024 * 1024  # bigger files are pinned in a worker thread
BLKSIZE = 128 * 1024  # preferred I/O size reported to tools (cat, Python buffers)
XATTR_DIGEST = b"user.memfs.digest"
XATTR_SEEN = b"user.memfs.seen"
XATTRS = (XATTR_DIGEST, XATTR_SEEN)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT

# (st_dev, st_ino, st_mtime_ns, st_size): identifies one backing version
Ident = tuple[int, int, int, int]


def _ident(st: os.stat_result) -> Ident:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(eq=False)
class Node:
    ino: int
    store: str  # "" for the root
    parts: tuple[str, ...]  # below the store; () for a store directory
    is_dir: bool
    parent: int
    name: bytes
    # page-cache ownership (regular files only), see the module docstring
    owner: Ident | None = None
    owner_stat: os.stat_result | None = None
    owner_handles: int = 0
    last_size: int | None = None  # size last reported to the kernel
    path: MemPath | None = None  # MemPath(store, parts), made once (None for the root)
    store_entry: pyfuse3.EntryAttributes | None = None  # a store's reply, reused
    store_epoch: int = -1  # the commit epoch and time until which store_entry is fresh
    store_fresh_until: float = 0.0
    # the last attributes built for this node and what they were built from
    attrs_memo: tuple[tuple[int, int, int], pyfuse3.EntryAttributes] | None = None
    # directories: (name, is_dir) -> child node, an index of _by_key for listings
    children: dict[tuple[str, bool], Node] = field(default_factory=dict)

    @property
    def is_store(self) -> bool:
        return self.is_dir and self.store != "" and not self.parts

    def mem_path(self) -> MemPath:
        return self.path if self.path is not None else MemPath(self.store, self.parts)


@dataclass(eq=False)
class Handle:
    fd: int
    node: Node
    cached: bool  # counted in node.owner_handles


@dataclass(eq=False)
class DirHandle:
    node: Node
    agent: str | None
    entries: list[tuple[bytes, pyfuse3.EntryAttributes]] | None = None


@dataclass
class _Counters:
    """How opens were served (for debugging and benchmarks)."""

    opens_inline: int = 0
    opens_thread: int = 0
    keep_cache: int = 0
    direct_io: int = 0


F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, Any]])


def _errno_of(error: BaseException) -> int:
    if isinstance(error, NotFound | FileNotFoundError | NotADirectoryError):
        return errno.ENOENT
    if isinstance(error, PermissionDenied | PermissionError):
        return errno.EACCES
    if isinstance(error, InvalidInput):
        return errno.ENOENT  # a symlink or special file: hidden
    if isinstance(error, OSError) and error.errno:
        return error.errno
    return errno.EIO


def guarded(method: F) -> F:
    """Turn every exception of a handler into a FUSEError: pyfuse3 ends its main loop
    on anything else, and one bad request must never take the mount down."""

    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except (MemfsError, OSError) as error:
            raise pyfuse3.FUSEError(_errno_of(error)) from None
        except Exception:
            log.exception("unexpected error in FUSE handler %s", method.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return cast(F, wrapper)


P = ParamSpec("P")
R = TypeVar("R")


def guarded_sync(method: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """`guarded` for a handler that never awaits, written as a plain function: one
    coroutine per request instead of two (lookup and getattr are the hot ones)."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except (MemfsError, OSError) as error:
            raise pyfuse3.FUSEError(_errno_of(error)) from None
        except Exception:
            log.exception("unexpected error in FUSE handler %s", method.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


def _showable(name: str) -> bool:
    """Any real name (even one the socket cannot address, such as a non-UTF-8 one:
    it can still be read here); never "." or ".." or an overlong name."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        return False
    # an ASCII name is as long encoded as decoded (saves an fsencode per entry listed)
    return len(name if name.isascii() else os.fsencode(name)) <= MAX_NAME_BYTES


def _fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


class MemoryView(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine
        self.config = engine.config
        self._agent_by_uid = {spec.uid: name for name, spec in self.config.agents.items()}
        self._started_ns = time.time_ns()
        root = Node(ROOT, "", (), True, ROOT, b"")
        self._nodes: dict[int, Node] = {ROOT: root}
        self._by_key: dict[tuple[str, tuple[str, ...], bool], Node] = {}
        self._next_ino = itertools.count(ROOT + 1)
        self._handles: dict[int, Handle] = {}
        self._dirs: dict[int, DirHandle] = {}
        self._next_fh = itertools.count(1)
        self._lock = threading.Lock()  # node table: the commit listener reads it off-loop
        self._loop_thread: int | None = None
        # Held around kernel notifications so that none runs after the session closes.
        self._notify_lock = threading.Lock()
        self._attached = False
        self.counters = _Counters()
        self._commit_epoch = 0  # bumped by every commit through this daemon
        # (uid, name) -> store node, for every store the uid's agent may read: the
        # root lookup, sent on every path walk through a store, is one dict probe.
        self._root_entries: dict[tuple[int, bytes], Node] = {}
        for uid, agent in self._agent_by_uid.items():
            for store in self.engine.readable_stores(agent):
                if store in self.config.stores and _showable(store):
                    node = self._child(root, store, True)
                    self._root_entries[(uid, node.name)] = node
        # Negative entries handed to the kernel below stores, (parent ino, name) ->
        # monotonic time after which the kernel has surely dropped them; a commit
        # through this daemon that creates such a name invalidates the entry.
        self._negative: dict[tuple[int, bytes], float] = {}
        self._negative_entry = pyfuse3.EntryAttributes()
        self._negative_entry.st_ino = 0  # "does not exist", cached for entry_timeout
        self._negative_entry.entry_timeout = ENTRY_TIMEOUT
        self._negative_entry.attr_timeout = 0

    # -- lifecycle (called by memfs.mount) -----------------------------------------

    def attach(self) -> None:
        self._loop_thread = threading.get_ident()
        self._attached = True
        self.engine.commit_listeners.append(self.committed)

    def detach(self) -> None:
        with contextlib.suppress(ValueError):
            self.engine.commit_listeners.remove(self.committed)
        # A commit still finishing in a worker thread may be notifying the kernel:
        # wait for it (bounded: it can only block on a read we no longer answer).
        locked = self._notify_lock.acquire(timeout=5)
        self._attached = False
        if locked:
            self._notify_lock.release()
        for handle in self._handles.values():
            with contextlib.suppress(OSError):
                os.close(handle.fd)
        self._handles.clear()
        self._dirs.clear()

    # -- identity -----------------------------------------------------------------

    def _agent(self, ctx: pyfuse3.RequestContext) -> str | None:
        return self._agent_by_uid.get(ctx.uid)

    def _may_read(self, agent: str | None, store: str) -> bool:
        return agent is not None and self.config.access(agent, store) is not None

    def _node(self, inode: int) -> Node:
        node = self._nodes.get(inode)
        if node is None:
            raise _fail(errno.ENOENT)
        return node

    def _visible_node(self, inode: int, ctx: pyfuse3.RequestContext) -> tuple[Node, str | None]:
        """The node, checked against the caller: ENOENT for a store it cannot see,
        EACCES for anything below one (only reachable through a leaked fd)."""
        node = self._node(inode)
        agent = self._agent(ctx)
        if node.ino != ROOT and not self._may_read(agent, node.store):
            raise _fail(errno.ENOENT if node.is_store else errno.EACCES)
        return node, agent

    def _child(self, parent: Node, name: str, is_dir: bool) -> Node:
        if parent.ino == ROOT:
            key: tuple[str, tuple[str, ...], bool] = (name, (), True)
        else:
            key = (parent.store, (*parent.parts, name), is_dir)
        node = self._by_key.get(key)
        if node is None:
            with self._lock:
                node = self._by_key.get(key)
                if node is None:
                    node = Node(next(self._next_ino), key[0], key[1], is_dir, parent.ino,
                                os.fsencode(name), path=MemPath(key[0], key[1]))
                    self._nodes[node.ino] = node
                    self._by_key[key] = node
                    parent.children[(name, is_dir)] = node
        return node

    # -- attributes ---------------------------------------------------------------

    def _backing_stat(self, store: str, parts: tuple[str, ...]) -> os.stat_result | None:
        """lstat of STORE/PARTS in the backing directory, never following a symlink."""
        store_fd = self.engine.store_fd(store)
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
        finally:
            os.close(parent)

    def _root_attrs(self) -> pyfuse3.EntryAttributes:
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

    def _attrs(self, node: Node, st: os.stat_result) -> pyfuse3.EntryAttributes:
        if not node.is_dir and node.owner_handles and node.owner_stat is not None:
            st = node.owner_stat  # keep i_size equal to the pages being served
        # Built once per (size, mtime, ctime): a listing of 2,000 files rebuilt them all
        # on every opendir. Never mutated once built (store replies are not memoised:
        # _store_attrs updates those in place).
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        memo = node.attrs_memo
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
        if node.is_store:
            attrs.entry_timeout = 0
            attrs.attr_timeout = 0
        else:
            attrs.entry_timeout = ENTRY_TIMEOUT
            attrs.attr_timeout = ATTR_TIMEOUT
            node.attrs_memo = (key, attrs)
        return attrs

    def _kind(self, st: os.stat_result) -> bool | None:
        """True for a directory, False for a regular file, None for anything hidden."""
        if stat.S_ISDIR(st.st_mode):
            return True
        if stat.S_ISREG(st.st_mode):
            return False
        return None

    # -- lookup and attributes ------------------------------------------------------

    def _store_attrs(self, node: Node) -> pyfuse3.EntryAttributes:
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
        st = os.fstat(self.engine.store_fd(node.store))
        if attrs is None:
            attrs = node.store_entry = self._attrs(node, st)
        else:
            attrs.st_atime_ns = attrs.st_mtime_ns = st.st_mtime_ns
            attrs.st_ctime_ns = st.st_ctime_ns
        node.store_epoch, node.store_fresh_until = epoch, now + STORE_ATTR_REFRESH
        return attrs

    @guarded_sync
    def lookup(self, parent_inode: int, name: bytes,
               ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        if parent_inode == ROOT:
            # Sent on every path walk through a store (its entry is never cached), so
            # kept to one probe of a table built from the (static) config; never a
            # negative entry: the kernel would share it with every uid.
            node = self._root_entries.get((ctx.uid, name))
            if node is None:
                raise _fail(errno.ENOENT)
            return self._store_attrs(node)
        parent, _agent = self._visible_node(parent_inode, ctx)
        if not parent.is_dir:
            raise _fail(errno.ENOTDIR)
        text = os.fsdecode(name)
        if not _showable(text):
            raise _fail(errno.ENOENT)
        # Recorded before looking, so that a commit creating the name while we look
        # finds the record and invalidates the entry we are about to hand out.
        key = (parent.ino, name)
        cacheable = self._note_negative(key)
        st = self._backing_stat(parent.store, (*parent.parts, text))
        kind = None if st is None else self._kind(st)
        if st is None or kind is None:
            if cacheable:
                return self._negative_entry  # ENOENT, cached by the kernel
            raise _fail(errno.ENOENT)
        if cacheable:
            self._negative.pop(key, None)
        return self._attrs(self._child(parent, text, kind), st)

    def _note_negative(self, key: tuple[int, bytes]) -> bool:
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

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        # Inode numbers stay allocated for the daemon's life (stable per path), so the
        # kernel may forget them freely; nothing to free.
        return None

    @guarded_sync
    def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        node, _agent = self._visible_node(inode, ctx)
        if node.ino == ROOT:
            return self._root_attrs()
        if node.is_store:
            return self._store_attrs(node)
        if not node.is_dir and node.owner_handles and node.owner_stat is not None:
            return self._attrs(node, node.owner_stat)
        st = self._backing_stat(node.store, node.parts)
        if st is None or self._kind(st) is not node.is_dir:
            raise _fail(errno.ENOENT)
        return self._attrs(node, st)

    @guarded
    async def access(self, inode: int, mode: int, ctx: pyfuse3.RequestContext) -> bool:
        node, _agent = self._visible_node(inode, ctx)
        if mode & os.W_OK:
            raise _fail(errno.EROFS)
        return not (mode & os.X_OK and not node.is_dir)

    @guarded
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        vfs = os.statvfs(self.engine.root / "stores")
        data = pyfuse3.StatvfsData()
        data.f_bsize = vfs.f_bsize
        data.f_frsize = vfs.f_frsize
        data.f_blocks = vfs.f_blocks
        data.f_bfree = data.f_bavail = 0  # read-only
        data.f_files = vfs.f_files
        data.f_ffree = data.f_favail = 0
        data.f_namemax = 255
        return data

    # -- directories ----------------------------------------------------------------

    @guarded
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        node, agent = self._visible_node(inode, ctx)
        if not node.is_dir:
            raise _fail(errno.ENOTDIR)
        fh = next(self._next_fh)
        self._dirs[fh] = DirHandle(node, agent)
        return fh

    def _list(self, handle: DirHandle) -> list[tuple[bytes, pyfuse3.EntryAttributes]]:
        node = handle.node
        entries = self._dots(node)
        if node.ino == ROOT:
            if handle.agent is None:
                return entries
            for store in self.engine.readable_stores(handle.agent):
                if store in self.config.stores:
                    child = self._child(node, store, True)
                    entries.append((child.name,
                                    self._attrs(child, os.fstat(self.engine.store_fd(store)))))
            return entries
        store_fd = self.engine.store_fd(node.store)
        try:
            # A fresh open, never a dup of the store fd: a dup shares the directory
            # offset with every other reader of that fd (the engine's walks).
            dir_fd = (backing.walk_parent(store_fd, (*node.parts, "x"), create=False)
                      if node.parts else backing.open_dir(store_fd, "."))
        except (FileNotFoundError, NotADirectoryError, InvalidInput):
            raise _fail(errno.ENOENT) from None
        try:
            # The hot loop of a listing (rg lists every directory it searches): names,
            # then an lstat each (cheaper than scandir's DirEntry objects).
            children, attrs_of, add, lstat = node.children, self._attrs, entries.append, os.stat
            for name in sorted(os.listdir(dir_fd)):
                if not _showable(name):
                    continue
                try:
                    st = lstat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                mode = st.st_mode
                if stat.S_ISREG(mode):
                    kind = False
                elif stat.S_ISDIR(mode):
                    kind = True
                else:
                    continue  # symlinks, FIFOs, sockets, devices: hidden
                child = children.get((name, kind)) or self._child(node, name, kind)
                add((child.name, attrs_of(child, st)))
        finally:
            os.close(dir_fd)
        return entries

    def _dots(self, node: Node) -> list[tuple[bytes, pyfuse3.EntryAttributes]]:
        """"." and ".." (the kernel takes only their inode numbers from readdirplus)."""
        if node.ino == ROOT:
            here = self._root_attrs()
        else:
            st = self._backing_stat(node.store, node.parts)
            if st is None:
                raise _fail(errno.ENOENT)
            here = self._attrs(node, st)
        up = pyfuse3.EntryAttributes()
        up.st_ino = node.parent
        up.st_mode = stat.S_IFDIR | 0o555
        return [(b".", here), (b"..", up)]

    @guarded
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        handle = self._dirs.get(fh)
        if handle is None:
            raise _fail(errno.EBADF)
        if handle.entries is None or start_id == 0:
            handle.entries = self._list(handle)
        for index in range(start_id, len(handle.entries)):
            name, attrs = handle.entries[index]
            if not pyfuse3.readdir_reply(token, name, attrs, index + 1):
                break

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    # -- files ----------------------------------------------------------------------

    def _pin(self, agent: str, node: Node) -> tuple[int, os.stat_result]:
        """Pin the current version, recording it as seen by ``agent``: fd and stat."""
        pinned = self.engine.open_version(agent, node.mem_path())
        if pinned.stat is not None:
            return pinned.fd, pinned.stat
        try:
            return pinned.fd, os.fstat(pinned.fd)
        except BaseException:
            os.close(pinned.fd)
            raise

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        # Guarded like every handler, but by hand: one coroutine per open, not two.
        try:
            node, agent = self._visible_node(inode, ctx)
            if flags & WRITE_FLAGS:
                raise _fail(errno.EROFS)
            if node.is_dir:
                raise _fail(errno.EISDIR)
            if agent is None:
                raise _fail(errno.EACCES)
            if node.last_size is not None and node.last_size <= INLINE_OPEN_LIMIT:
                # Small, the common case: a thread hop would cost more than the open.
                # (A file planted by hand is hashed once here; at most 1 MiB of blake3.)
                fd, st = self._pin(agent, node)
                self.counters.opens_inline += 1
            else:
                fd, st = await trio.to_thread.run_sync(self._pin, agent, node)
                self.counters.opens_thread += 1
            return self._opened(node, fd, st)
        except pyfuse3.FUSEError:
            raise
        except (MemfsError, OSError) as error:
            raise pyfuse3.FUSEError(_errno_of(error)) from None
        except Exception:
            log.exception("unexpected error in FUSE handler open")
            raise pyfuse3.FUSEError(errno.EIO) from None

    def _opened(self, node: Node, fd: int, st: os.stat_result) -> pyfuse3.FileInfo:
        """The handle of a pinned version: decides how it may use the page cache."""
        ident = _ident(st)
        keep_cache = direct_io = False
        if node.owner_handles == 0:
            keep_cache = node.owner == ident
            node.owner, node.owner_stat = ident, st
            node.owner_handles = 1
            cached = True
            if not keep_cache or node.last_size != st.st_size:
                # The kernel may hold another version's size: make it ask again
                # before the first cached read (attributes only: never blocks).
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_inode(node.ino, attr_only=True)
        elif node.owner == ident:
            keep_cache = cached = True
            node.owner_handles += 1
        else:
            direct_io, cached = True, False  # another version owns the page cache
        fh = next(self._next_fh)
        self._handles[fh] = Handle(fd, node, cached)
        if keep_cache:
            self.counters.keep_cache += 1
        if direct_io:
            self.counters.direct_io += 1
        return pyfuse3.FileInfo(fh=fh, keep_cache=keep_cache, direct_io=direct_io)

    @guarded
    async def read(self, fh: int, off: int, size: int) -> bytes:
        handle = self._handles.get(fh)
        if handle is None:
            raise _fail(errno.EBADF)
        return os.pread(handle.fd, size, off)

    async def release(self, fh: int) -> None:
        handle = self._handles.pop(fh, None)
        if handle is None:
            return
        if handle.cached:
            handle.node.owner_handles -= 1
        with contextlib.suppress(OSError):
            os.close(handle.fd)

    # -- extended attributes ----------------------------------------------------------

    @guarded
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        node, agent = self._visible_node(inode, ctx)
        if node.is_dir or agent is None or name not in XATTRS:
            raise _fail(pyfuse3.ENOATTR)
        path = node.mem_path()
        if name == XATTR_SEEN:
            return (self.engine.seen.get(agent, path) or "").encode()
        if node.last_size is not None and node.last_size <= INLINE_OPEN_LIMIT:
            digest = self.engine.current_digest(path)
        else:
            digest = await trio.to_thread.run_sync(self.engine.current_digest, path)
        if digest is None:
            raise _fail(errno.ENOENT)
        return digest.encode()

    @guarded
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> Sequence[bytes]:
        node, _agent = self._visible_node(inode, ctx)
        return [] if node.is_dir else list(XATTRS)

    # -- everything that would change something: read-only ---------------------------

    async def setxattr(self, *args: Any, **kwargs: Any) -> None:
        raise _fail(errno.EROFS)

    async def removexattr(self, *args: Any, **kwargs: Any) -> None:
        raise _fail(errno.EROFS)

    async def setattr(self, *args: Any, **kwargs: Any) -> pyfuse3.EntryAttributes:
        raise _fail(errno.EROFS)

    async def mknod(self, *args: Any, **kwargs: Any) -> pyfuse3.EntryAttributes:
        raise _fail(errno.EROFS)

    async def mkdir(self, *args: Any, **kwargs: Any) -> pyfuse3.EntryAttributes:
        raise _fail(errno.EROFS)

    async def unlink(self, *args: Any, **kwargs: Any) -> None:
        raise _fail(errno.EROFS)

    async def rmdir(self, *args: Any, **kwargs: Any) -> None:
        raise _fail(errno.EROFS)

    async def symlink(self, *args: Any, **kwargs: Any) -> pyfuse3.EntryAttributes:
        raise _fail(errno.EROFS)

    async def rename(self, *args: Any, **kwargs: Any) -> None:
        raise _fail(errno.EROFS)

    async def link(self, *args: Any, **kwargs: Any) -> pyfuse3.EntryAttributes:
        raise _fail(errno.EROFS)

    async def create(self, *args: Any,
                     **kwargs: Any) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        raise _fail(errno.EROFS)

    async def write(self, *args: Any, **kwargs: Any) -> int:
        raise _fail(errno.EROFS)

    async def readlink(self, *args: Any, **kwargs: Any) -> bytes:
        raise _fail(errno.EINVAL)  # memfs never shows symlinks

    # -- commits: drop what the kernel caches about a changed file --------------------

    def committed(self, path: MemPath) -> None:
        """Engine commit listener (called in the committing worker thread, after the
        new version is in place and before the caller is answered)."""
        with self._lock:
            self._commit_epoch += 1  # store directories' times are read again
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
        self._drop_negative(path)
        node = self._by_key.get((path.store, path.parts, False))
        parent = self._by_key.get((path.store, path.parts[:-1], True))
        if node is not None:
            node.last_size = None
            with contextlib.suppress(OSError):
                pyfuse3.invalidate_inode(node.ino)  # attributes and cached pages
        if parent is not None:
            with contextlib.suppress(OSError):
                pyfuse3.invalidate_inode(parent.ino, attr_only=True)
            if node is not None and self._backing_stat(path.store, path.parts) is None:
                # Deleted: drop the dentry now (blocking is fine off the loop).
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_entry(parent.ino, node.name, deleted=node.ino)

    def _drop_negative(self, path: MemPath) -> None:
        """Invalidate the negative entries we handed out for the file's name or any
        directory above it (a commit may have created them): the next walk asks again."""
        now = time.monotonic()
        for depth, name in enumerate(path.parts):
            directory = self._by_key.get((path.store, path.parts[:depth], True))
            if directory is None:
                return  # never looked up: the kernel has no entry below it
            key = (directory.ino, os.fsencode(name))
            with self._lock:
                until = self._negative.pop(key, None)
            if until is not None and until > now:
                with contextlib.suppress(OSError):
                    pyfuse3.invalidate_entry(directory.ino, key[1])
