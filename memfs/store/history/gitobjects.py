"""Writing git objects with few file operations (the history's object writer).

libgit2's loose-object backend writes each object as a temporary file that it links
into place and unlinks, first checking every backend for the object (the pack backend
lists ``objects/pack`` on every miss) and touching existing copies: about 90 file
system calls per commit. On a local disk that is ~1 ms; on a network file system each
call is a round trip (a commit took ~0.6 s on GlusterFS). `LooseWriter` is an object
database backend that receives the object libgit2 has already hashed and serialised,
and writes it in git's loose format in four calls: an unnamed file (``O_TMPFILE``) is
written, then linked under its final name, so a kill at any moment leaves nothing
behind, and what git finds under an object's name is always whole. Where the file
system has no ``O_TMPFILE`` (FUSE, e.g. GlusterFS) the file gets a temporary name,
``tmp_obj_...`` (git's own prefix: fsck skips it, prune removes it, and so does
`StoreHistory.pack`), and is renamed into place. Reads go to libgit2's own loose and
pack backends.

A power loss can still leave a linked object whose data never reached the disk: a
later write of the same object reads what it finds and, unless it is exactly that
object, replaces it atomically; `StoreHistory.pack` removes the others.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import zlib
from collections.abc import Iterator
from pathlib import Path

import pygit2

from memfs.store import crashpoints
from memfs.store.fs.shared_root import mount_of
from memfs.store.read.lru import LRU

_KIND = pygit2.enums.ObjectType
TYPES: dict[int, bytes] = {_KIND.COMMIT: b"commit", _KIND.TREE: b"tree", _KIND.BLOB: b"blob",
                           _KIND.TAG: b"tag"}
LEVEL = 1  # zlib level: objects are small, and packing recompresses them
RECENT = 256  # trees and commits kept in memory after they are written


class LooseWriter(pygit2.OdbBackend):
    """Writes loose objects under ``objects``; reads through ``reader`` (an Odb with
    libgit2's loose and pack backends)."""

    def __init__(self, objects: str, reader: pygit2.Odb, *, sync: bool = False) -> None:
        super().__init__()
        self._objects = objects
        self._reader = reader
        self._sync = sync  # fsync each object (see writer_repository)
        self._tmpfile = True  # until the file system refuses O_TMPFILE
        # The trees and commits written last: the next commit reads the head commit
        # and the trees along its paths, which are exactly these (saves reading them
        # back from disk, several file operations each).
        self._recent: LRU[str, tuple[int, bytes]] = LRU(RECENT)
        # While `collecting`: the objects written, kept here for one pack (see pack).
        self._collected: dict[str, tuple[int, bytes]] | None = None

    def _path(self, oid: pygit2.Oid) -> str:
        text = str(oid)
        return f"{self._objects}/{text[:2]}/{text[2:]}"

    @contextlib.contextmanager
    def collecting(self) -> Iterator[dict[str, tuple[int, bytes]]]:
        """Within, objects are kept in the dict yielded (id -> (kind, data)), not
        written: the caller writes them as one pack (`write_pack`)."""
        self._collected = {}
        try:
            yield self._collected
        finally:
            self._collected = None

    def write_cb(self, oid: pygit2.Oid, data: bytes, kind: int) -> None:
        if kind != _KIND.BLOB:
            self._recent.put(str(oid), (kind, data))
        if self._collected is not None:
            self._collected[str(oid)] = (kind, data)
            return None
        path = self._path(oid)
        raw = TYPES[kind] + b" %d\0" % len(data) + data
        body = deflate(raw)
        fd = self._unnamed(os.path.dirname(path)) if self._tmpfile else None
        if fd is None:
            _replace(path, body, sync=self._sync)
            return None
        try:
            crashpoints.reached("history.object-open")
            _write_all(fd, body)
            if self._sync:
                os.fsync(fd)
            _link(fd, path)
        except FileExistsError:
            if not intact(Path(path)):  # a power loss's empty or partial leftover
                _replace(path, body, sync=self._sync)
        finally:
            os.close(fd)
        return None

    def _unnamed(self, directory: str) -> int | None:
        """An unnamed file open for writing in ``directory`` (created if missing);
        None, from then on, if the file system cannot make one."""
        try:
            return os.open(directory, os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC, 0o444)
        except FileNotFoundError:
            _mkdir(directory)
            return self._unnamed(directory)
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR):  # EISDIR: Linux < 3.11
                raise
            self._tmpfile = False
            return None

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        # Never "yes": libgit2 skips writing an object that exists, and a file a power
        # loss left empty must be written again; write_cb checks what it finds instead.
        return False

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        recent = self._recent.get(str(oid))
        if recent is None and self._collected is not None:
            recent = self._collected.get(str(oid))
        return recent if recent is not None else self._reader.read(oid)

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        if self._collected is not None and str(oid) in self._collected:
            kind, data = self._collected[str(oid)]
            return kind, len(data)
        return self._reader.read_header(oid)

    def read_prefix_cb(self, oid: pygit2.Oid) -> tuple[int, bytes, pygit2.Oid]:
        raise KeyError(oid)  # the writer never looks objects up by abbreviation

    def exists_prefix_cb(self, oid: pygit2.Oid) -> pygit2.Oid:
        raise KeyError(oid)

    def refresh_cb(self) -> None:
        return None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(())


def deflate(raw: bytes) -> bytes:
    """``raw`` compressed as git's loose objects are (a zlib stream, at LEVEL), with a
    window and hash table no larger than ``raw`` needs: zlib's default ones (64 KiB
    each, and as much again) are allocated and cleared for every stream, which cost
    far more than compressing a tree or a small blob (a 48-byte tree: 94 us against
    4 us). Any zlib reader takes a stream of a smaller window."""
    wbits = min(15, max(9, len(raw).bit_length()))
    compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, wbits, wbits - 7)
    return compressor.compress(raw) + compressor.flush()


PACK_TYPES: dict[int, int] = {_KIND.COMMIT: 1, _KIND.TREE: 2, _KIND.BLOB: 3, _KIND.TAG: 4}
LARGE_OFFSET = 0x80000000  # in a pack index: the offset is in the table of 8-byte ones


def write_pack(directory: str, objects: dict[str, tuple[int, bytes]], *,
               sync: bool = False) -> str:
    """Write ``objects`` (id -> (kind, data)) as one pack and its index (git's formats:
    version 2, each object whole, zlib at LEVEL) in ``directory`` (``objects/pack``);
    returns the index's path. Both are written under temporary names (git's
    ``tmp_pack_``/``tmp_idx_``: `packs.tidy` removes those a kill left) and renamed
    into place, the index last, so that a reader, which finds packs by their index,
    never sees half of one. ``sync``: each is fsynced before its rename, and the
    directory after (a shared file system; else the caller makes them durable)."""
    entries = sorted(objects.items())
    parts = [b"PACK", (2).to_bytes(4, "big"), len(entries).to_bytes(4, "big")]
    offset = 12
    table = []  # (id, crc, offset), in id order
    for oid, (kind, data) in entries:
        size = len(data)
        header = bytearray([(PACK_TYPES[kind] << 4) | (size & 0x0F)])
        size >>= 4
        while size:
            header[-1] |= 0x80
            header.append(size & 0x7F)
            size >>= 7
        body = deflate(data)
        table.append((bytes.fromhex(oid), zlib.crc32(body, zlib.crc32(header)), offset))
        parts += [bytes(header), body]
        offset += len(header) + len(body)
    pack = b"".join(parts)
    checksum = hashlib.sha1(pack).digest()
    pack += checksum
    fanout = [0] * 256
    for oid_bytes, _, _ in table:
        fanout[oid_bytes[0]] += 1
    for n in range(1, 256):
        fanout[n] += fanout[n - 1]
    large = [at for _, _, at in table if at >= LARGE_OFFSET]
    offsets, next_large = [], 0
    for _, _, at in table:
        if at >= LARGE_OFFSET:
            offsets.append((LARGE_OFFSET | next_large).to_bytes(4, "big"))
            next_large += 1
        else:
            offsets.append(at.to_bytes(4, "big"))
    index = b"".join([b"\377tOc", (2).to_bytes(4, "big"),
                      *(n.to_bytes(4, "big") for n in fanout),
                      *(oid_bytes for oid_bytes, _, _ in table),
                      *(crc.to_bytes(4, "big") for _, crc, _ in table),
                      *offsets, *(at.to_bytes(8, "big") for at in large), checksum])
    index += hashlib.sha1(index).digest()
    token = secrets.token_hex(8)
    name = f"{directory}/pack-{checksum.hex()}"
    temporary = [f"{directory}/tmp_pack_{token}", f"{directory}/tmp_idx_{token}"]
    try:
        for path, content in zip(temporary, (pack, index), strict=True):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
            try:
                crashpoints.reached("history.object-open")
                _write_all(fd, content)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        os.rename(temporary[0], f"{name}.pack")
        os.rename(temporary[1], f"{name}.idx")
    except BaseException:
        for path in temporary:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise
    if sync:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return f"{name}.idx"


def _write_all(fd: int, body: bytes) -> None:
    view = memoryview(body)
    while view:
        view = view[os.write(fd, view):]


def intact(path: Path) -> bool:
    """True if the loose object file at ``path`` (``objects/ab/cdef...``) holds a whole
    object, in git's format, whose id is its name."""
    try:
        raw = zlib.decompress(path.read_bytes())
    except (OSError, zlib.error):
        return False
    header, nul, data = raw.partition(b"\0")
    kind, _, size = header.partition(b" ")
    return (bool(nul) and kind in TYPES.values() and size == b"%d" % len(data)
            and hashlib.sha1(raw).hexdigest() == path.parent.name + path.name)


def temporary_name(path: str) -> str:
    """A name beside ``path`` for a file to be renamed over it, unique among every
    host writing the same directory (a pid alone is not: hosts share a volume)."""
    return f"{path}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


TEMPORARY_OBJECT = "tmp_obj_"  # git's prefix for an object not yet in place


def _mkdir(directory: str) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o755)


def _link(fd: int, path: str) -> None:
    """Give the unnamed file open as ``fd`` the name ``path`` (FileExistsError if it
    is taken). The fan-out directory is made again if packing removed it meanwhile."""
    # Linking /proc/self/fd/N needs AT_SYMLINK_FOLLOW (AT_EMPTY_PATH would need a
    # capability); Python 3.11 passes it only when a dir_fd is given, and the path
    # being absolute, the descriptor given is not used.
    try:
        os.link(f"/proc/self/fd/{fd}", path, dst_dir_fd=fd, follow_symlinks=True)
    except FileNotFoundError:
        _mkdir(os.path.dirname(path))
        os.link(f"/proc/self/fd/{fd}", path, dst_dir_fd=fd, follow_symlinks=True)


def _replace(path: str, body: bytes, *, sync: bool) -> None:
    """Write ``body`` as the loose object file ``path``: under a temporary name, then
    renamed over it."""
    directory = os.path.dirname(path)
    temporary = os.path.join(directory, TEMPORARY_OBJECT + secrets.token_hex(8))
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    except FileNotFoundError:
        _mkdir(directory)
        return _replace(path, body, sync=sync)
    try:
        _write_all(fd, body)
        if sync:
            os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # e.g. a full disk: no partial temporary is left
        raise
    finally:
        os.close(fd)
    os.replace(temporary, path)
    return None


def writer_repository(path: str, *, sync: bool = False) -> tuple[pygit2.Repository,
                                                                   LooseWriter]:
    """A Repository of the bare repository at ``path`` whose writes go through
    `LooseWriter` (for the history's commits), and that writer; its reads use
    libgit2's backends. ``sync``: fsync each object as it is written (a shared file
    system: another host reads it as soon as the ref names it, and a network file
    system may hold written data back until then)."""
    objects = os.path.join(path, "objects")
    reader = pygit2.Odb()
    reader.add_backend(pygit2.OdbBackendLoose(objects, 1, False), 1)
    reader.add_backend(pygit2.OdbBackendPack(objects), 2)
    writer = LooseWriter(objects, reader, sync=sync)
    odb = pygit2.Odb()
    odb.add_backend(writer, 1)
    repo = pygit2.Repository(path)
    repo.set_odb(odb)
    return repo, writer


def write_ref(repo_path: str, ref: str, oid: str, *, shared: bool = False) -> None:
    """Point ``ref`` at ``oid``. The caller holds the store lock, so no other memfs
    writer updates it meanwhile.

    On a local file system the ref file is rewritten in place: one small write instead
    of libgit2's lock file and rename, and readers see the old or the new id (41 bytes
    in one write). ``shared`` (a file system other hosts mount): a new file, fsynced,
    renamed over the ref, because another host's kernel may keep the old content of an
    inode cached across opens, and the next holder of the store lock, on another host,
    must read this id."""
    path = os.path.join(repo_path, ref)
    line = f"{oid}\n".encode()
    if shared:
        temporary = temporary_name(path)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if os.pwrite(fd, line, 0) != len(line):
            raise OSError(errno.EIO, f"short write to {path}")
        if os.fstat(fd).st_size != len(line):
            os.ftruncate(fd, len(line))
    finally:
        os.close(fd)


LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs",
                               "zfs", "bcachefs", "jfs", "reiserfs"})


def on_shared_filesystem(path: str) -> bool:
    """True unless ``path`` is on a file system known to be local (a FUSE, NFS, SMB,
    Ceph, GlusterFS... mount may delay writes other hosts read: see `write_ref`)."""
    mount = mount_of(Path(path))
    return mount is None or mount.fstype not in LOCAL_FILESYSTEMS
