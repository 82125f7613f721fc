"""Showing the stores to rg: read-only bind mounts in a private mount namespace.

In the forked child, still root, :func:`show_stores` clones each store directory (an
fd opened by the daemon) as a detached mount with ``open_tree(OPEN_TREE_CLONE)``, makes
the clone read-only, nosuid, nodev and noexec, enters a new mount namespace whose
mounts are all private (nothing propagates back to the host), mounts a small tmpfs on
the launcher's work directory and attaches each clone there under the store's name.
rg then runs in that directory and prints ``STORE/PATH``. Everything vanishes with
the process: nothing is ever left on disk, even if the launcher is killed.

Compared with the former folder of ``NAME -> /proc/self/fd/N`` symlinks, path lookups
no longer go through a magic link on every file open (rg resolves each matched path
again, to canonicalize it), which made searches up to twice as slow.

Landlock rules attach to inodes, so the rules on the store fds cover the clones too.
The tool itself can never mount or unshare: seccomp refuses both and it holds no
capability.
"""

from __future__ import annotations

import ctypes
import os

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


def check_name(name: str) -> None:
    """A store name must be one plain path component."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"bad store name {name!r}")


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def clone_read_only(fd: int) -> int:
    """A detached, read-only (nosuid, nodev, noexec) clone of the mount at ``fd``, a
    directory: an O_PATH fd of the same directory, to :func:`attach`. Must be called
    in the mount namespace ``fd`` belongs to (the kernel refuses other ones)."""
    tree = _check(
        _libc.syscall(
            _SYS_OPEN_TREE,
            ctypes.c_int(fd),
            b"",
            ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_EMPTY_PATH),
        ),
        "open_tree",
    )
    try:
        _check(
            _libc.syscall(
                _SYS_MOUNT_SETATTR,
                ctypes.c_int(tree),
                b"",
                ctypes.c_uint(_AT_EMPTY_PATH),
                ctypes.byref(_READ_ONLY),
                ctypes.c_size_t(ctypes.sizeof(_READ_ONLY)),
            ),
            "mount_setattr",
        )
    except BaseException:
        os.close(tree)
        raise
    return tree


def enter_namespace(where: str) -> None:
    """Enter a new mount namespace whose mounts are all private (nothing propagates to
    or from the host) and mount a fresh, empty tmpfs on ``where`` (0711, root's)."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    target = os.fsencode(where)
    _check(_libc.mount(b"memfs-jail", target, b"tmpfs", _LOCKED_DOWN, _TMPFS_OPTIONS), "tmpfs")


def attach(where: str, trees: tuple[tuple[str, int], ...]) -> None:
    """Attach each detached mount ``(name, tree fd)`` at ``where/name`` (``where`` as
    made by :func:`enter_namespace`), then make ``where`` read-only."""
    target = os.fsencode(where)
    for name, tree in trees:
        check_name(name)
        point = os.path.join(target, os.fsencode(name))
        os.mkdir(point, 0o555)
        _check(
            _libc.syscall(
                _SYS_MOVE_MOUNT,
                ctypes.c_int(tree),
                b"",
                ctypes.c_int(_AT_FDCWD),
                ctypes.c_char_p(point),
                ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
            ),
            f"move_mount({name})",
        )
    remount = _MS_REMOUNT | _MS_RDONLY | _LOCKED_DOWN
    _check(_libc.mount(None, target, None, remount, None), "remount tmpfs read-only")


def show_stores(where: str, stores: tuple[tuple[str, int], ...]) -> None:
    """Enter a private mount namespace in which ``where`` is a fresh read-only tmpfs
    holding each store directory (``(name, fd)``) bind-mounted read-only at
    ``where/name``. Needs root (CAP_SYS_ADMIN); raises OSError or ValueError."""
    for name, _ in stores:
        check_name(name)
    trees: list[tuple[str, int]] = []
    try:
        # Cloned before unshare: a mount of another namespace cannot be cloned.
        for name, fd in stores:
            trees.append((name, clone_read_only(fd)))
        enter_namespace(where)
        attach(where, tuple(trees))
    finally:
        for _, tree in trees:
            os.close(tree)
