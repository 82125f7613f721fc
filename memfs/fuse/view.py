"""The read-only, per-agent FUSE view of the stores (the pyfuse3 request handlers).

Identity. Every request carries the uid of the calling process (``ctx.uid``); it is
mapped to an agent with the config. The root lists exactly that agent's stores; an
unknown uid (root included, it is not an agent) sees an empty root. A store the agent
is not attached to does not exist for it: lookup, getattr, opendir, open, getxattr
and access all answer ENOENT at the root level and EACCES below it.

Personal mode: one uid (the owner) runs every agent, so the uid cannot tell them
apart; the path does. The root lists the registered agents, ``AGENT/`` holds every
store, and whatever is read through ``AGENT/STORE/...`` is read by AGENT (its seen
record, ``user.memfs.seen``, its "changed since"; a search is still no read). Only
the owner's uid sees anything; any other uid sees an empty root.

Isolation under shared kernel caches. The kernel's dentry and attribute caches are
shared by every uid, so a child of the root (a store directory; in personal mode an
agent's directory) is always returned with ``entry_timeout = attr_timeout = 0``:
every path walk through ``/memory/STORE`` (``~/memory/AGENT``) revalidates that
dentry with a LOOKUP that carries the walker's uid, and a denied lookup drops the
dentry. Anything deeper can be cached (ENTRY_TIMEOUT/ATTR_TIMEOUT) because it can
only be reached by walking through that dentry. The root's readdir is never cached
by the kernel (no FOPEN_CACHE_DIR) and is computed per opendir from the opener's
uid. That LOOKUP is the most frequent request of all (every open by path; rg also
canonicalises each matching file's path, one more walk per component), so it is one
probe of a table built from the config (in personal mode, of the registered names
held in memory); still, it is a round trip per open that a daemon without per-uid
views does not make (bench_mount.py measures it). A personal memory mounted without
``allow_other`` is exempt: the kernel lets no uid but the owner's into that mount,
root included, so its agents' directories are cached like anything deeper.

Cost of an open. Pinning is one openat2 and one fstat; the version record and the
agent's seen record are answered from memory while provably unchanged (see
memfs/store/read/versions.py and memfs/store/read/seen.py), so a warm open reads no
xattr at all and writes one only when the agent's record differs from the version it
pins.

The parts. This module holds the request handlers (`MemoryView`), the identity
checks and the open handles; the view builds its two collaborators: ``view.nodes``
(memfs/fuse/nodes.py `NodeTable`: the inode table and the attributes handed to the
kernel; Inodes, Attributes) and ``view.cache`` (memfs/fuse/cache.py `KernelCache`:
negative entries, page-cache ownership across versions and the commit listener;
Negative entries, Versions and the page cache); memfs/fuse/errors.py translates
exceptions to errnos.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import stat
from collections.abc import Sequence
from time import perf_counter_ns
from typing import Any, NoReturn

import pyfuse3
import trio

from memfs.errors import MemfsError
from memfs.fuse.cache import KernelCache
from memfs.fuse.errors import _errno_of, _fail, guarded, guarded_sync
from memfs.fuse.nodes import (
    ROOT,
    DirHandle,
    Handle,
    Node,
    NodeTable,
    _Counters,
    _showable,
    kind_of,
)
from memfs.fuse.scans import ScanDetector
from memfs.fuse.stats import COUNT, SAMPLE_MASK, sample, stats_for
from memfs.store.engine import Engine
from memfs.store.errors import InvalidInput
from memfs.store.fs import backing

log = logging.getLogger("memfs.fuse.mount")

INLINE_OPEN_LIMIT = 1024 * 1024  # bigger files are pinned in a worker thread
XATTR_DIGEST = b"user.memfs.digest"
XATTR_SEEN = b"user.memfs.seen"
XATTRS = (XATTR_DIGEST, XATTR_SEEN)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT
_OPEN_STATS = stats_for("open")


class MemoryView(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, engine: Engine, *, one_uid: bool = False) -> None:
        """``one_uid``: the mount lets one uid alone in (no ``allow_other``: the
        daemon's, which in personal mode is the owner's)."""
        super().__init__()
        self.engine = engine
        self.config = engine.config
        self._agent_by_uid = {spec.uid: name for name, spec in self.config.agents.items()}
        # personal mode: the one uid served; agents are the root's directories
        self._owner = None if self.config.personal is None else self.config.personal.owner
        self._personal = self._owner is not None
        self.nodes = NodeTable(engine.store_fd, personal=self._personal,
                               cached_agents=self._personal and one_uid)
        self.cache = KernelCache(self.nodes)
        self._handles: dict[int, Handle] = {}
        self._dirs: dict[int, DirHandle] = {}
        self._next_fh = itertools.count(1)
        self.counters = _Counters()
        self._scans = ScanDetector(self.config.scans.tools,
                                   self.config.scans.max_opens_per_second)
        # (uid, name) -> store node, for every store the uid's agent may read: the
        # root lookup, sent on every path walk through a store, is one dict probe.
        self._root_entries: dict[tuple[int, bytes], Node] = {}
        self._agent_nodes: dict[bytes, Node] = {}  # personal mode: name -> agent's directory
        for uid, agent in self._agent_by_uid.items():
            for store in self.engine.readable_stores(agent):
                if store in self.config.stores and _showable(store):
                    node = self.nodes.child(self.nodes.root, store, True)
                    self._root_entries[(uid, node.name)] = node

    # -- lifecycle (called by memfs.fuse.mount) -----------------------------------------

    def attach(self) -> None:
        self.cache.attach()
        self.engine.commit_listeners.append(self.cache.committed)

    def detach(self) -> None:
        with contextlib.suppress(ValueError):
            self.engine.commit_listeners.remove(self.cache.committed)
        self.cache.detach()
        for handle in self._handles.values():
            with contextlib.suppress(OSError):
                os.close(handle.fd)
        self._handles.clear()
        self._dirs.clear()

    # -- identity -----------------------------------------------------------------

    def _agent(self, ctx: pyfuse3.RequestContext, node: Node) -> str | None:
        """The agent reading ``node`` for the caller: its uid's agent, or in personal
        mode the agent of the node's view (the owner's uid only)."""
        if self._owner is None:
            return self._agent_by_uid.get(ctx.uid)
        return (node.agent or None) if ctx.uid == self._owner else None

    def _may_read(self, agent: str | None, store: str) -> bool:
        return agent is not None and self.config.access(agent, store) is not None

    def _visible_node(self, inode: int, ctx: pyfuse3.RequestContext) -> tuple[Node, str | None]:
        """The node, checked against the caller: ENOENT for a child of the root it
        cannot see, EACCES for anything below one (only reachable through a leaked
        fd). In personal mode the owner sees every agent's view, whole (a store node
        is made only for a store of the config)."""
        node = self.nodes.node(inode)
        agent = self._agent(ctx, node)
        if node.ino != ROOT and (agent is None if self._personal
                                 else not self._may_read(agent, node.store)):
            raise _fail(errno.ENOENT if node.parent == ROOT else errno.EACCES)
        return node, agent

    # -- lookup and attributes ------------------------------------------------------

    @guarded_sync
    def lookup(self, parent_inode: int, name: bytes,
               ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        if parent_inode == ROOT:
            # Sent on every path walk through a store (its entry is never cached), so
            # kept to one probe of a table built from the (static) config; never a
            # negative entry: the kernel would share it with every uid.
            if self._personal:
                return self._agent_entry(name, ctx)
            node = self._root_entries.get((ctx.uid, name))
            if node is None:
                raise _fail(errno.ENOENT)
            return self.nodes.store_attrs(node)
        parent, _agent = self._visible_node(parent_inode, ctx)
        if not parent.is_dir:
            raise _fail(errno.ENOTDIR)
        text = os.fsdecode(name)
        if not _showable(text):
            raise _fail(errno.ENOENT)
        if parent.is_agent:  # personal mode: a store in an agent's view
            if text not in self.config.stores:
                raise _fail(errno.ENOENT)
            node = self.nodes.child(parent, text, True)
            return self.nodes.attrs(node, os.fstat(self.engine.store_fd(text)))
        # Recorded before looking, so that a commit creating the name while we look
        # finds the record and invalidates the entry we are about to hand out.
        key = (parent.ino, name)
        cacheable = self.cache.note_negative(key)
        st = self.nodes.backing_stat(parent.store, (*parent.parts, text))
        kind = None if st is None else kind_of(st)
        if st is None or kind is None:
            if cacheable:
                return self.cache.negative_entry  # ENOENT, cached by the kernel
            raise _fail(errno.ENOENT)
        if cacheable:
            self.cache.found(key)
        return self.nodes.attrs(self.nodes.child(parent, text, kind), st)

    def _agent_entry(self, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        """Personal mode: the root's entry ``name``, a registered agent's directory,
        for the owner only. Sent on every path walk, so one probe of the agents met
        (names are never unregistered); a new one is looked up in the registry."""
        if ctx.uid != self._owner:
            raise _fail(errno.ENOENT)
        node = self._agent_nodes.get(name)
        if node is None:
            text = os.fsdecode(name)
            if not _showable(text) or text not in self.engine.agents:
                raise _fail(errno.ENOENT)
            node = self._agent_nodes[name] = self.nodes.child(self.nodes.root, text, True)
        return self.nodes.agent_attrs(node)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        # Inode numbers stay allocated for the daemon's life (stable per path), so the
        # kernel may forget them freely; nothing to free.
        return None

    @guarded_sync
    def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        node, _agent = self._visible_node(inode, ctx)
        if node.ino == ROOT:
            return self.nodes.root_attrs()
        if node.is_agent:
            return self.nodes.agent_attrs(node)
        if node.is_store and not self._personal:
            return self.nodes.store_attrs(node)
        if not node.is_dir and node.owner_handles and node.owner_stat is not None:
            return self.nodes.attrs(node, node.owner_stat)
        st = self.nodes.backing_stat(node.store, node.parts)
        if st is None or kind_of(st) is not node.is_dir:
            raise _fail(errno.ENOENT)
        return self.nodes.attrs(node, st)

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
        self._dirs[fh] = DirHandle(node, agent, ctx.uid)
        return fh

    def _list(self, handle: DirHandle) -> list[tuple[bytes, pyfuse3.EntryAttributes]]:
        node = handle.node
        entries = self._dots(node)
        if node.ino == ROOT and self._personal:
            if handle.uid == self._owner:
                for agent in self.engine.agents:
                    if _showable(agent):
                        child = self.nodes.child(node, agent, True)
                        entries.append((child.name, self.nodes.agent_attrs(child)))
            return entries
        if node.ino == ROOT or node.is_agent:
            if handle.agent is None:
                return entries
            for store in self.engine.readable_stores(handle.agent):
                if store in self.config.stores:
                    child = self.nodes.child(node, store, True)
                    entries.append((child.name, self.nodes.attrs(
                        child, os.fstat(self.engine.store_fd(store)))))
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
            files, dirs = node.files, node.dirs
            attrs_of, child_of, add, lstat = (self.nodes.attrs, self.nodes.child,
                                              entries.append, os.stat)
            assert files is not None and dirs is not None  # a directory's
            kept, fsencode = backing.is_kept, os.fsencode
            for name in sorted(os.listdir(dir_fd)):
                if not _showable(name):
                    continue
                try:
                    st = lstat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                if kept(st):
                    child = files.get(name) or child_of(node, name, False)
                elif stat.S_ISDIR(st.st_mode):
                    child = dirs.get(name) or child_of(node, name, True)
                else:
                    continue  # symlinks, FIFOs, sockets, devices, hard links: hidden
                add((fsencode(name), attrs_of(child, st)))
        finally:
            os.close(dir_fd)
        return entries

    def _dots(self, node: Node) -> list[tuple[bytes, pyfuse3.EntryAttributes]]:
        """"." and ".." (the kernel takes only their inode numbers from readdirplus)."""
        if node.ino == ROOT:
            here = self.nodes.root_attrs()
        elif node.is_agent:
            here = self.nodes.agent_attrs(node)
        else:
            st = self.nodes.backing_stat(node.store, node.parts)
            if st is None:
                raise _fail(errno.ENOENT)
            here = self.nodes.attrs(node, st)
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

    def _pin(self, agent: str, node: Node, pid: int) -> tuple[int, os.stat_result]:
        """Pin the current version, recording it as seen by ``agent`` unless process
        ``pid`` is scanning (memfs/fuse/scans.py): fd and stat."""
        pinned = self.engine.open_version(agent, node.mem_path(),
                                          is_scan=lambda: self._scans.is_scan(pid))
        try:
            st = pinned.stat if pinned.stat is not None else os.fstat(pinned.fd)
        except BaseException:
            os.close(pinned.fd)
            raise
        if st.st_size != pinned.version.size:  # an append in place is under way
            st = _with_size(st, pinned.version.size)  # the pinned version's, not the file's
        return pinned.fd, st

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        # Guarded (and counted) like every handler, but by hand: one coroutine per open.
        _OPEN_STATS[COUNT] += 1
        start = 0 if _OPEN_STATS[COUNT] & SAMPLE_MASK else perf_counter_ns()
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
                fd, st = self._pin(agent, node, ctx.pid)
                self.counters.opens_inline += 1
            else:
                fd, st = await trio.to_thread.run_sync(self._pin, agent, node, ctx.pid)
                self.counters.opens_thread += 1
            return self._opened(node, fd, st)
        except pyfuse3.FUSEError:
            raise
        except (MemfsError, OSError) as error:
            raise pyfuse3.FUSEError(_errno_of(error)) from None
        except Exception:
            log.exception("unexpected error in FUSE handler open")
            raise pyfuse3.FUSEError(errno.EIO) from None
        finally:
            if start:
                sample(_OPEN_STATS, perf_counter_ns() - start)

    def _opened(self, node: Node, fd: int, st: os.stat_result) -> pyfuse3.FileInfo:
        """The handle of a pinned version, using the page cache as the cache allows."""
        keep_cache, direct_io = self.cache.opened(node, st)
        fh = next(self._next_fh)
        self._handles[fh] = Handle(fd, node, not direct_io, st.st_size)
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
        return os.pread(handle.fd, max(0, min(size, handle.size - off)), off)

    async def release(self, fh: int) -> None:
        handle = self._handles.pop(fh, None)
        if handle is None:
            return
        if handle.cached:
            self.cache.released(handle.node)
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

    async def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise _fail(errno.EROFS)

    setxattr = removexattr = setattr = mknod = mkdir = unlink = rmdir = _read_only
    symlink = rename = link = create = write = _read_only

    async def readlink(self, *args: Any, **kwargs: Any) -> bytes:
        raise _fail(errno.EINVAL)  # memfs never shows symlinks


_STAT_EXTRAS = ("st_atime", "st_mtime", "st_ctime", "st_atime_ns", "st_mtime_ns",
                "st_ctime_ns", "st_blksize", "st_blocks", "st_rdev")


def _with_size(st: os.stat_result, size: int) -> os.stat_result:
    """``st`` with another size and every other field kept: the sequence part of a
    stat_result holds only ten fields (whole-second times); the rest, the nanosecond
    times included, must be passed by name or they become None."""
    fields = list(st)
    fields[stat.ST_SIZE] = size
    return os.stat_result(fields, {name: getattr(st, name) for name in _STAT_EXTRAS})
