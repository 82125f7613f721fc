"""The remote mount's FUSE request handlers: the token's agent's view, read-only, as
the local mount shows it (memfs/fuse/view.py): the root lists the agent's stores;
folders are ``dr-xr-xr-x``, files ``-r--r--r--``, owned by root, with the sizes and
times of the daemon's backing files; ``user.memfs.digest`` and ``user.memfs.seen`` on
every file; every change is EROFS. The mount is its user's alone (no ``allow_other``):
every process that reaches it acts as the agent.

Opens. Each open fetches the current version once (``GET .../files/PATH``: the daemon
records it as the agent's read, exactly the bytes this handle then serves) unless the
opener is scanning (memfs/fuse/scans.py's rule, judged here by the opener's process):
then ``?record=false`` records nothing, or, when the content kept is known current
(control/client/remote/cache.py), nothing is asked at all. A content kept from before
is revalidated with ``If-None-Match`` (a 304 is still a read). The kernel keeps a
file's pages across opens only while the version is the same; a handle whose size
differs from what the kernel was told reads with direct I/O.

Kernel caches. Attributes the kernel may keep (ENTRY_TIMEOUT, while the change stream
is up) are given only in answer to a getattr: the kernel asked for an inode it holds,
so a change's invalidation that overtakes the answer makes the kernel drop it (its
attribute version moved on). A lookup or readdirplus answer may instead create the
inode, and an invalidation sent just before that finds nothing to invalidate: the
stale answer would then stand for ENTRY_TIMEOUT. So those answers carry attributes
the kernel must ask for again (timeout 0; the entry itself is kept: a name gone since
then fails that getattr and the open with ENOENT).

Errors. The token refused (revoked): EACCES for everything. The daemon unreachable
for ``wait`` seconds: ETIMEDOUT, unless ``stale_ok`` lets what was cached within that
many seconds of losing the daemon be served (an open served so is recorded nowhere).
More than MAX_HANDLES open files: ENFILE.
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, ParamSpec, TypeVar

import pyfuse3
import trio

from memfs.control.client.remote.cache import ROOT, Cache, Entry, Listing, Node
from memfs.control.client.remote.http import Daemon, Refused, Reply, Unreachable, quoted
from memfs.fuse.scans import ScanDetector

log = logging.getLogger("memfs.remote")

ENTRY_TIMEOUT = 5.0  # what the kernel may cache while the change stream is up
ROOT_TIMEOUT = 1.0
BLKSIZE = 128 * 1024
MAX_HANDLES = 4096
XATTR_DIGEST = b"user.memfs.digest"
XATTR_SEEN = b"user.memfs.seen"
XATTRS = (XATTR_DIGEST, XATTR_SEEN)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT

P = ParamSpec("P")
T = TypeVar("T")


def _fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


def _unkept(attrs: pyfuse3.EntryAttributes) -> pyfuse3.EntryAttributes:
    """``attrs`` for a lookup or readdirplus answer: the kernel keeps the entry but asks
    for the attributes again (see "Kernel caches" above)."""
    attrs.attr_timeout = 0.0
    return attrs


def guarded(handler: Callable[P, Coroutine[Any, Any, T]]
            ) -> Callable[P, Coroutine[Any, Any, T]]:
    """A refused token is EACCES, an unreachable daemon ETIMEDOUT, anything else
    unexpected EIO (logged)."""

    @functools.wraps(handler)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await handler(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Refused:
            raise _fail(errno.EACCES) from None
        except Unreachable as error:
            log.warning("%s", error)
            raise _fail(errno.ETIMEDOUT) from None
        except Exception:
            log.exception("unexpected error in remote FUSE handler %s", handler.__name__)
            raise _fail(errno.EIO) from None

    return wrapper


@dataclass(eq=False, slots=True)
class Handle:
    node: Node
    data: bytes


class RemoteView(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, daemon: Daemon, cache: Cache, scans: ScanDetector, *,
                 stale_ok: float = 0.0) -> None:
        super().__init__()
        self.daemon = daemon
        self.cache = cache
        self.scans = scans
        self.stale_ok = stale_ok
        self._handles: dict[int, Handle] = {}
        self._dirs: dict[int, list[tuple[bytes, pyfuse3.EntryAttributes]]] = {}
        self._next_fh = itertools.count(1)
        self._started_ns = time.time_ns()
        self.opens_recorded = self.opens_scanned = 0

    # -- talking to the daemon ----------------------------------------------------------

    async def _get(self, path: str, headers: dict[str, str] | None = None,
                   method: str = "GET") -> Reply:
        if self.daemon.refused:
            raise Refused("refused before")
        return await trio.to_thread.run_sync(
            functools.partial(self.daemon.request, method, path, headers))

    def _stale_allowed(self) -> bool:
        return bool(self.stale_ok) and not self.cache.trusted and \
            time.monotonic() - self.cache.lost_at <= self.stale_ok

    async def _stores(self) -> list[str]:
        stores = self.cache.stores
        if stores is not None and (self.cache.trusted or self._stale_allowed()):
            return stores
        reply = await self._get("/v1/stores")
        if reply.status != 200:
            raise _fail(errno.EIO)
        stores = [s["name"] for s in json.loads(reply.body)["stores"]]
        self.cache.stores = stores
        return stores

    async def _listing(self, store: str, rel: str) -> Listing:
        """The folder STORE/REL (ENOENT if it is not one). When a change in the store
        came while it was fetched (``Listing.racing``), the kernel is told to cache
        nothing from it: the change's invalidation may have been done already."""
        found = self.cache.listing(store, rel)
        if found is not None:
            return found
        generation = self.cache.generation(store)
        target = f"/v1/stores/{quoted(store)}/dir"
        if rel:
            target += "?path=" + quoted(rel)
        try:
            reply = await self._get(target)
        except Unreachable:
            found = self.cache.listing(store, rel, stale_ok=self.stale_ok)
            if found is not None:
                return found
            raise
        if reply.status in (400, 404):
            raise _fail(errno.ENOENT)
        if reply.status == 403:
            raise _fail(errno.EACCES)
        if reply.status != 200:
            raise _fail(errno.EIO)
        body = json.loads(reply.body)
        listing = Listing(body["mtime_ns"], body["ctime_ns"], {
            e["name"]: Entry(e["dir"], e["size"], e["mtime_ns"], e["ctime_ns"])
            for e in body["entries"]})
        if not self.cache.keep(store, rel, listing, generation):
            listing.racing = True
        return listing

    # -- attributes ---------------------------------------------------------------------

    def _timeout(self, listing: Listing | None = None) -> float:
        trusted = self.cache.trusted and (listing is None or not listing.racing)
        return ENTRY_TIMEOUT if trusted else 0.0

    def _root_attrs(self) -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ROOT
        attrs.st_mode = stat.S_IFDIR | 0o555
        attrs.st_nlink = 2
        attrs.st_blksize = BLKSIZE
        attrs.st_atime_ns = attrs.st_mtime_ns = attrs.st_ctime_ns = self._started_ns
        attrs.attr_timeout = attrs.entry_timeout = ROOT_TIMEOUT
        return attrs

    def _attrs(self, node: Node, is_dir: bool, size: int, mtime_ns: int,
               ctime_ns: int, listing: Listing | None = None) -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = node.ino
        attrs.st_uid = attrs.st_gid = 0
        attrs.st_blksize = BLKSIZE
        attrs.st_nlink = 1
        if is_dir:
            attrs.st_mode = stat.S_IFDIR | 0o555
            attrs.st_size = 0
        else:
            attrs.st_mode = stat.S_IFREG | 0o444
            attrs.st_size = size
            attrs.st_blocks = (size + 511) // 512
            node.kernel_size = size
        attrs.st_atime_ns = attrs.st_mtime_ns = mtime_ns
        attrs.st_ctime_ns = ctime_ns
        attrs.attr_timeout = attrs.entry_timeout = self._timeout(listing)
        return attrs

    async def _node_attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        if node.ino == ROOT:
            return self._root_attrs()
        if not node.rel:  # a store's folder
            if node.store not in await self._stores():
                raise _fail(errno.ENOENT)
            top = await self._listing(node.store, "")
            return self._attrs(node, True, 0, top.mtime_ns, top.ctime_ns, top)
        folder, _, name = node.rel.rpartition("/")
        listing = await self._listing(node.store, folder)
        entry = listing.entries.get(name)
        if entry is None or entry.is_dir != node.is_dir:
            raise _fail(errno.ENOENT)
        return self._attrs(node, entry.is_dir, entry.size, entry.mtime_ns, entry.ctime_ns,
                           listing)

    def _node(self, inode: int) -> Node:
        """The node of ``inode``: EACCES once the token is refused (every handler
        that names an inode asks this first), ENOENT if unknown."""
        if self.daemon.refused:
            raise _fail(errno.EACCES)
        node = self.cache.node(inode)
        if node is None:
            raise _fail(errno.ENOENT)
        return node

    @guarded
    async def lookup(self, parent_inode: int, name: bytes,
                     ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        text = os.fsdecode(name)
        if parent.ino == ROOT:
            if text not in await self._stores():
                raise _fail(errno.ENOENT)
            return _unkept(await self._node_attrs(self.cache.child(parent, text, True)))
        if not parent.is_dir:
            raise _fail(errno.ENOTDIR)
        listing = await self._listing(parent.store, parent.rel)
        entry = listing.entries.get(text)
        if entry is None:
            raise _fail(errno.ENOENT)
        node = self.cache.child(parent, text, entry.is_dir)
        return _unkept(self._attrs(node, entry.is_dir, entry.size, entry.mtime_ns,
                                   entry.ctime_ns, listing))

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        return None  # inodes stay for the mount's life (stable per path)

    @guarded
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return await self._node_attrs(self._node(inode))

    @guarded
    async def access(self, inode: int, mode: int, ctx: pyfuse3.RequestContext) -> bool:
        node = self._node(inode)
        if mode & os.W_OK:
            raise _fail(errno.EROFS)
        return not (mode & os.X_OK and not node.is_dir)

    @guarded
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = 4096
        data.f_namemax = 255
        return data

    # -- folders ------------------------------------------------------------------------

    @guarded
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        node = self._node(inode)
        if not node.is_dir:
            raise _fail(errno.ENOTDIR)
        up = pyfuse3.EntryAttributes()
        up.st_ino = node.parent
        up.st_mode = stat.S_IFDIR | 0o555
        entries = [(b".", await self._node_attrs(node)), (b"..", up)]
        if node.ino == ROOT:
            for store in await self._stores():
                entries.append((store.encode(), await self._node_attrs(
                    self.cache.child(node, store, True))))
        else:
            listing = await self._listing(node.store, node.rel)
            for name, entry in listing.entries.items():
                child = self.cache.child(node, name, entry.is_dir)
                entries.append((os.fsencode(name), self._attrs(
                    child, entry.is_dir, entry.size, entry.mtime_ns, entry.ctime_ns, listing)))
        fh = next(self._next_fh)
        self._dirs[fh] = [(name, _unkept(attrs)) for name, attrs in entries]
        return fh

    @guarded
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        entries = self._dirs.get(fh)
        if entries is None:
            raise _fail(errno.EBADF)
        for index in range(start_id, len(entries)):
            name, attrs = entries[index]
            if not pyfuse3.readdir_reply(token, name, attrs, index + 1):
                break

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    # -- files --------------------------------------------------------------------------

    @guarded
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if flags & WRITE_FLAGS:
            raise _fail(errno.EROFS)
        if node.is_dir:
            raise _fail(errno.EISDIR)
        if len(self._handles) >= MAX_HANDLES:
            raise _fail(errno.ENFILE)
        scan = self.scans.is_scan(ctx.pid)
        digest, data = await self._fetch(node, record=not scan)
        if scan:
            self.opens_scanned += 1
        else:
            self.opens_recorded += 1
        keep_cache = node.page_digest == digest and node.kernel_size == len(data)
        direct_io = node.kernel_size is not None and node.kernel_size != len(data)
        node.page_digest = None if direct_io else digest
        fh = next(self._next_fh)
        self._handles[fh] = Handle(node, data)
        return pyfuse3.FileInfo(fh=fh, keep_cache=keep_cache, direct_io=direct_io)

    async def _fetch(self, node: Node, *, record: bool) -> tuple[str, bytes]:
        """The current version of the file: digest and bytes (recorded as the agent's
        read with ``record``)."""
        if not record:
            current = self.cache.current_content(node.store, node.rel)
            if current is not None:
                return current
        kept = self.cache.content(node.path)
        generation = self.cache.generation(node.store)
        headers = {"If-None-Match": f'"{kept[0]}"'} if kept is not None else None
        target = f"/v1/stores/{quoted(node.store)}/files/{quoted(node.rel)}"
        if not record:
            target += "?record=false"
        try:
            reply = await self._get(target, headers)
        except Unreachable:
            if kept is not None and self._stale_allowed():
                log.warning("serving %s as cached (the daemon is unreachable, --stale-ok)",
                            node.path)
                return kept
            raise
        if reply.status == 304 and kept is not None:
            self.cache.keep_content(node.path, kept[0], kept[1], generation)
            return kept
        if reply.status == 404:
            raise _fail(errno.ENOENT)
        if reply.status == 403:
            raise _fail(errno.EACCES)
        if reply.status != 200:
            log.warning("GET %s: %s %s", node.path, reply.status, reply.body[:200])
            raise _fail(errno.EIO)
        digest = reply.headers.get("etag", "").strip('"')
        self.cache.keep_content(node.path, digest, reply.body, generation)
        return digest, reply.body

    @guarded
    async def read(self, fh: int, off: int, size: int) -> bytes:
        handle = self._handles.get(fh)
        if handle is None:
            raise _fail(errno.EBADF)
        return handle.data[off:off + size]

    async def release(self, fh: int) -> None:
        self._handles.pop(fh, None)

    # -- extended attributes ----------------------------------------------------------

    @guarded
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        node = self._node(inode)
        if node.is_dir or name not in XATTRS:
            raise _fail(pyfuse3.ENOATTR)
        reply = await self._get(f"/v1/stores/{quoted(node.store)}/files/{quoted(node.rel)}",
                                method="HEAD")
        if reply.status == 404:
            raise _fail(errno.ENOENT)
        if reply.status not in (200, 304):
            raise _fail(errno.EIO)
        if name == XATTR_SEEN:
            return reply.headers.get("x-memfs-seen", "").encode()
        return reply.headers.get("etag", "").strip('"').encode()

    @guarded
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> Sequence[bytes]:
        return [] if self._node(inode).is_dir else list(XATTRS)

    # -- everything that would change something: read-only ----------------------------

    async def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise _fail(errno.EROFS)

    setxattr = removexattr = setattr = mknod = mkdir = unlink = rmdir = _read_only
    symlink = rename = link = create = write = _read_only

    async def readlink(self, *args: Any, **kwargs: Any) -> bytes:
        raise _fail(errno.EINVAL)
