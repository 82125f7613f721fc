"""The private views of the jail: the stores shown to rg, the read-only root of sed.

Both are made by a tool child in a mount namespace of its own, owned by the jail's
user namespace (``jail.userns``): no privilege is needed, and nothing propagates back
to the host; everything vanishes with the process, even if the launcher is killed.

:func:`enter` makes that namespace with a directory of the host as the working
directory: the kernel then moves the working directory to the new namespace's copy of
its mount, and this is the one way in from the daemon's fds (a bind mount or
``open_tree`` of an fd opened in the host's namespace is refused in another one). For
rg, :func:`show_stores` then mounts a small tmpfs on the launcher's work directory,
looks each store up beneath the working directory (the stores' common directory),
checks that it is the very directory the daemon opened (same device and inode: no
path swapped in between can show another one), and attaches a read-only, nosuid,
nodev, noexec clone of it there under the store's name. rg runs in that directory
and prints ``STORE/PATH``. For sed, :func:`enter_root` makes a read-only clone of
the sed root (entered the same way) the process's root.

Landlock rules attach to inodes, so the rules on the daemon's store fds cover the
clones too. The tool itself can never mount or unshare: seccomp refuses both and it
holds no capability.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

from memfs.jail import userns

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]
_libc.unshare.argtypes = [ctypes.c_int]

# The same numbers on every architecture (the unified syscall table, Linux >= 5.1).
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442

_CLONE_NEWNS = 0x00020000
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_NOEXEC = 0x8
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18

_LOCKED_DOWN = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
_TMPFS_OPTIONS = b"mode=0711,size=64k,nr_inodes=4096"


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_READ_ONLY = _MountAttr(
    _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV | _MOUNT_ATTR_NOEXEC, 0, 0, 0
)
_READ_ONLY_ROOT = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, 0, 0)


def check_name(name: str) -> None:
    """A store name must be one plain path component."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"bad store name {name!r}")


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _clone(directory: int, path: str, attributes: _MountAttr, what: str) -> int:
    """A detached clone of the mount at ``path`` (relative to ``directory``, or the
    directory itself for ""), with ``attributes`` set: an fd for :func:`_attach`."""
    flags = _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | (0 if path else _AT_EMPTY_PATH)
    tree = _check(
        _libc.syscall(
            _SYS_OPEN_TREE, ctypes.c_int(directory), os.fsencode(path), ctypes.c_uint(flags)
        ),
        f"open_tree({what})",
    )
    try:
        _check(
            _libc.syscall(
                _SYS_MOUNT_SETATTR,
                ctypes.c_int(tree),
                b"",
                ctypes.c_uint(_AT_EMPTY_PATH),
                ctypes.byref(attributes),
                ctypes.c_size_t(ctypes.sizeof(attributes)),
            ),
            f"mount_setattr({what})",
        )
    except BaseException:
        os.close(tree)
        raise
    return tree


def _attach(tree: int, point: bytes, what: str) -> None:
    _check(
        _libc.syscall(
            _SYS_MOVE_MOUNT,
            ctypes.c_int(tree),
            b"",
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(point),
            ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
        ),
        f"move_mount({what})",
    )


def enter(directory: int, namespace: int | None) -> None:
    """Join the jail's user namespace ``namespace`` (None: joined already) and enter a
    new mount namespace whose mounts are all private, with ``directory`` (an open fd,
    O_PATH is fine, which this uid may search) as the working directory, moved to the
    new namespace's copy of its mount (see the module's docstring)."""
    try:
        os.fchdir(directory)
    except OSError as error:
        raise OSError(error.errno, f"cannot enter {os.readlink(f'/proc/self/fd/{directory}')}: "
                      f"{error.strerror} (uid {os.getuid()}, the jail's, must be able to "
                      "search it)") from None
    if namespace is not None:
        userns.join(namespace)
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")


def show_stores(where: str, stores: tuple[tuple[str, str, int], ...]) -> None:
    """After :func:`enter`: mount a fresh tmpfs on ``where`` (0711, this uid's) holding,
    for each store ``(name, path, fd)``, a read-only clone of ``path`` (beneath the
    working directory; it must be the directory ``fd``) at ``where/name``, then make
    ``where`` read-only. Raises OSError or ValueError (a store that is not ``fd``)."""
    for name, _path, _fd in stores:
        check_name(name)
    trees: list[tuple[str, int]] = []
    try:
        for name, path, fd in stores:
            found = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                mine, theirs = os.fstat(found), os.fstat(fd)
                if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
                    raise ValueError(f"store {name!r}: {path!r} is not the directory opened")
                trees.append((name, _clone(found, "", _READ_ONLY, name)))
            finally:
                os.close(found)
        target = os.fsencode(where)
        _check(_libc.mount(b"memfs-jail", target, b"tmpfs", _LOCKED_DOWN, _TMPFS_OPTIONS),
               "tmpfs")
        for name, tree in trees:
            point = os.path.join(target, os.fsencode(name))
            os.mkdir(point, 0o555)
            _attach(tree, point, name)
        remount = _MS_REMOUNT | _MS_RDONLY | _LOCKED_DOWN
        _check(_libc.mount(None, target, None, remount, None), "remount tmpfs read-only")
    finally:
        for _, tree in trees:
            os.close(tree)


def rehearse() -> None:
    """Make each system call of :func:`enter` and :func:`show_stores` once, on arguments
    the kernel refuses (a bad fd, a missing path), to no effect. For a forked child
    that will make them on its call's path (rg's spare, see ``jail.spare_child``): the
    first run of a code path in a fork writes to shared pages (reference counts), each
    write copying a page; this moves those copies off the call's path."""
    missing = b"/nonexistent/memfs-rehearsal"
    for attempt in (
        lambda: userns.join(-1),
        lambda: _check(_libc.unshare(0), "unshare"),  # no flag: changes nothing
        lambda: _check(_libc.mount(None, missing, None, 0, None), "mount"),
        lambda: os.open(missing, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC),
        lambda: os.fstat(-1),
        lambda: _clone(-1, "", _READ_ONLY, "rehearsal"),
        lambda: _attach(-1, missing, "rehearsal"),
        lambda: os.mkdir(missing),
    ):
        with contextlib.suppress(OSError):
            attempt()


def enter_root() -> None:
    """After :func:`enter`: make a read-only, nosuid, nodev clone of the working
    directory (exec allowed: the tool runs from it) this process's root, and enter it."""
    tree = _clone(_AT_FDCWD, ".", _READ_ONLY_ROOT, "root")
    try:
        _attach(tree, b".", "root")
        os.fchdir(tree)
    finally:
        os.close(tree)
    os.chroot(".")
    os.chdir("/")
