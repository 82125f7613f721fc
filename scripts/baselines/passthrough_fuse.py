"""The least a pyfuse3 + trio read-only daemon does: the ceiling memfs's mount is measured
against (scripts/bench_mount.py). Not part of memfs.

    python passthrough_fuse.py SOURCE MOUNTPOINT

mounts SOURCE read-only at MOUNTPOINT (``allow_other``: the benchmark reads it as
another uid) and serves until SIGTERM or SIGINT, then unmounts. It prints ``ready``
on stdout once mounted.

What it does per request is what any read-only pyfuse3 daemon must: LOOKUP and
GETATTR are one ``lstat`` of the source path, OPEN pins the file (``os.open``: later
reads see that file even if it is replaced) and asks the kernel to keep its page
cache (``keep_cache``), READ is one ``pread``, RELEASE one ``close``. Entries and
attributes are cached by the kernel for 300 s. What it does not do, and memfs does:
agents, per-uid visibility (memfs answers a store directory with timeouts 0, so
every path walk through a store is a LOOKUP), versions, seen records, scans, the
page cache's ownership across versions, statistics, its request-wait shortcut.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys

import pyfuse3
import trio

TIMEOUT = 300.0  # seconds the kernel keeps entries and attributes


class Passthrough(pyfuse3.Operations):
    def __init__(self, source: str) -> None:
        super().__init__()
        # inode -> source path; the source's own inode numbers (the root's is ROOT_INODE)
        self.paths = {pyfuse3.ROOT_INODE: source}
        self.source_root_ino = os.lstat(source).st_ino
        self.fds: dict[int, int] = {}  # fh (= the pinned file's fd) -> fd
        self.dirs: dict[int, list[tuple[bytes, pyfuse3.EntryAttributes]]] = {}
        self.next_dir = 1

    def _attrs(self, st: os.stat_result) -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = pyfuse3.ROOT_INODE if st.st_ino == self.source_root_ino else st.st_ino
        attrs.st_mode = st.st_mode & ~0o222  # read-only
        attrs.st_nlink = st.st_nlink
        attrs.st_size = st.st_size
        attrs.st_blocks = st.st_blocks
        attrs.st_blksize = st.st_blksize
        attrs.st_atime_ns = st.st_atime_ns
        attrs.st_mtime_ns = st.st_mtime_ns
        attrs.st_ctime_ns = st.st_ctime_ns
        attrs.entry_timeout = attrs.attr_timeout = TIMEOUT
        return attrs

    def _stat(self, path: str) -> pyfuse3.EntryAttributes:
        try:
            st = os.lstat(path)
        except OSError as error:
            raise pyfuse3.FUSEError(error.errno) from None
        attrs = self._attrs(st)
        self.paths[attrs.st_ino] = path
        return attrs

    async def lookup(self, parent_inode: int, name: bytes,
                     ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._stat(os.path.join(self.paths[parent_inode], os.fsdecode(name)))

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._stat(self.paths[inode])

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        path = self.paths[inode]
        entries = []
        for name in sorted(os.listdir(path)):
            entries.append((os.fsencode(name), self._stat(os.path.join(path, name))))
        fh = self.next_dir
        self.next_dir += 1
        self.dirs[fh] = entries
        return fh

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        entries = self.dirs[fh]
        for index in range(start_id, len(entries)):
            if not pyfuse3.readdir_reply(token, *entries[index], index + 1):
                break

    async def releasedir(self, fh: int) -> None:
        self.dirs.pop(fh, None)

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT):
            raise pyfuse3.FUSEError(errno.EROFS)
        try:
            fd = os.open(self.paths[inode], os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise pyfuse3.FUSEError(error.errno) from None
        self.fds[fd] = fd
        return pyfuse3.FileInfo(fh=fd, keep_cache=True)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return os.pread(fh, size, off)

    async def release(self, fh: int) -> None:
        if self.fds.pop(fh, None) is not None:
            os.close(fh)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        vfs = os.statvfs(self.paths[pyfuse3.ROOT_INODE])
        data = pyfuse3.StatvfsData()
        for name in ("f_bsize", "f_frsize", "f_blocks", "f_files"):
            setattr(data, name, getattr(vfs, name))
        data.f_namemax = 255
        return data


async def serve() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pyfuse3.main)
        print("ready", flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        nursery.cancel_scope.cancel()


def main() -> None:
    source, mountpoint = sys.argv[1], sys.argv[2]
    if not stat.S_ISDIR(os.stat(source).st_mode):
        raise SystemExit(f"{source} is not a directory")
    pyfuse3.init(Passthrough(source), mountpoint,
                 {"fsname=passthrough", "ro", "noatime", "allow_other"})
    try:
        trio.run(serve)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
