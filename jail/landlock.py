"""Landlock through its three system calls (ctypes, x86-64/aarch64 numbers are shared).

Landlock lets an unprivileged process give up file-system (and TCP, signal, abstract
socket) access for itself and every future child. We build a ruleset that *handles*
every access right the ABI the jail runs at knows (best-effort: ``jail.kernel`` says
what stands in for the rights of later ABIs), so anything not granted by a rule is
denied, then add rules on already-open file descriptors and enforce it.

Reference: Documentation/userspace-api/landlock.rst in the Linux tree.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable

from memfs.jail import kernel

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446

CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1

# File-system access rights, with the ABI version that introduced them.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# Rights that make sense on a regular file (the kernel refuses directory rights there).
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The Landlock ABI of the running kernel, or 0 without Landlock (see ``jail.kernel``,
    whose ``detect`` is what the jail runs at)."""
    return kernel.landlock_abi()


def handled_fs(abi: int) -> int:
    """Every file-system right the given ABI knows: all of them are denied unless granted."""
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def handled_net(abi: int) -> int:
    """TCP bind and connect, denied outright (no network rule is ever added)."""
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    """Abstract unix sockets and signals outside the sandbox are off limits."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= kernel.SCOPES_ABI else 0


def create_ruleset(
    abi: int,
    read_fds: Iterable[int],
    read_paths: Iterable[str],
    exec_paths: Iterable[str],
    *,
    path_rules: Iterable[tuple[int, int]] = (),
    store_fds: Iterable[int] = (),
) -> int:
    """Return the fd of a ruleset (close-on-exec) that, once enforced, grants only:

    - ``read_fds`` (open directory fds, O_PATH is fine): read files and list directories
      beneath them;
    - ``read_paths``: read (and list, for directories) beneath each path;
    - ``exec_paths``: read and execute these files;
    - ``path_rules``: (open fd, rights) pairs, e.g. the paths above opened ahead;
    - ``store_fds``: like ``read_fds``, plus TRUNCATE (see :data:`STORE_RIGHTS`); only
      for directories the tool sees through read-only mounts.
    Writes, creates, removes, renames and what later ABIs handle (truncates from ABI 3,
    TCP from 4, device ioctls from 5, signals or abstract sockets reaching outside the
    domain from 6) are all denied.
    Paths are opened now, with the caller's current root and credentials.
    """
    if abi < 1:
        raise OSError(0, "Landlock is not available on this kernel")
    attr = _RulesetAttr(handled_fs(abi), handled_net(abi), scopes(abi))
    ruleset = _check(
        _libc.syscall(
            SYS_CREATE_RULESET,
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:
        read = FS_READ_FILE | FS_READ_DIR
        for fd in read_fds:
            _add_rule(ruleset, fd, read)
        for fd in store_fds:
            _add_rule(ruleset, fd, store_rights(abi), directory=True)
        for path in read_paths:
            _add_path_rule(ruleset, path, read)
        for path in exec_paths:
            _add_path_rule(ruleset, path, FS_READ_FILE | FS_EXECUTE)
        for fd, rights in path_rules:
            _add_rule(ruleset, fd, rights)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def add_rules(ruleset: int, abi: int, read_fds: Iterable[int], store_fds: Iterable[int]) -> None:
    """Add the ``read_fds`` and ``store_fds`` rules of :func:`create_ruleset` to a
    ruleset made ahead; closes it on failure."""
    try:
        for fd in read_fds:
            _add_rule(ruleset, fd, FS_READ_FILE | FS_READ_DIR)
        for fd in store_fds:
            _add_rule(ruleset, fd, store_rights(abi), directory=True)
    except BaseException:
        os.close(ruleset)
        raise


def store_rights(abi: int) -> int:
    """Rights granted beneath a store: read files, list directories, and TRUNCATE.

    Why TRUNCATE: on every open the kernel also asks Landlock whether TRUNCATE would be
    allowed (an "optional" right, remembered in the file), and while some asked right is
    still denied its check walks the file's path up to the root of the file system.
    Granting it beneath the store lets the walk stop at the store root: on a search
    over thousands of files this is a visible share of rg's time. It grants nothing in
    practice: the tool sees the stores through read-only mounts (truncate fails with
    EROFS before Landlock is asked), and seccomp refuses truncate(2), ftruncate(2) and
    any open for writing or with O_TRUNC.
    """
    return FS_READ_FILE | FS_READ_DIR | (FS_TRUNCATE if abi >= 3 else 0)


def enforce(ruleset: int) -> None:
    """Confine the calling thread (and all it executes) to ``ruleset``, then close it.

    The caller must already have set no_new_privs (or hold CAP_SYS_ADMIN).
    """
    try:
        _check(
            _libc.syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


def _add_path_rule(ruleset: int, path: str, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        _add_rule(ruleset, fd, access)
    finally:
        os.close(fd)


def _add_rule(ruleset: int, fd: int, access: int, *, directory: bool = False) -> None:
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        if directory:
            raise OSError(20, f"fd {fd}: {os.strerror(20)}")  # ENOTDIR
        access &= _FILE_RIGHTS
    rule = _PathBeneathAttr(access, fd)
    _check(
        _libc.syscall(
            SYS_ADD_RULE,
            ctypes.c_int(ruleset),
            ctypes.c_int(RULE_PATH_BENEATH),
            ctypes.byref(rule),
            ctypes.c_uint32(0),
        ),
        f"landlock_add_rule(fd {fd})",
    )
