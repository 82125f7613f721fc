"""The seccomp allow-list shared by the jailed tools (rg and sed).

The filter is described with libseccomp (through pyseccomp), compiled to classic BPF
once by :func:`program` (in the launcher, before any call) and only *loaded* per call
by :func:`load`, which is one ``prctl(2)`` system call.

Cost: the kernel caches the verdict of every system call allowed whatever its
arguments (``read``, ``close``, ``getdents64``, ``futex``...), so only the calls with
argument checks run the BPF program, a binary tree (a few jumps to ``openat``, made
once per file searched).

Default action: EPERM for every system call not listed. The list holds what rg 14 and
GNU sed 4.9 (plus the dynamic loader and glibc) use to read files and write their
output; notable restrictions are commented where the rule is added.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyseccomp as sc

# open/openat flags that could create, truncate or write a file: all must be clear.
_WRITE_FLAGS = (
    os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | 0o20000000  # __O_TMPFILE
)
# Namespace flags of clone(2); CLONE_NEWTIME is 0x80.
_NAMESPACE_FLAGS = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_NAMESPACE_FLAGS |= 0x20000000 | 0x40000000
_CLONE_THREAD = 0x00010000
_LOW32 = 0xFFFFFFFF

_TCGETS = 0x5401
_TIOCGWINSZ = 0x5413
_FIONREAD = 0x541B
_PR_SET_NAME = 15
_PR_GET_NAME = 16

# Plain "allow" system calls: memory, signals, time, reading files and directories,
# identity queries, threads' bookkeeping, exit.
_ALLOWED = (
    "read", "readv", "pread64", "preadv", "preadv2",
    "close", "close_range", "dup", "dup2", "dup3", "fcntl", "lseek",
    "fstat", "newfstatat", "stat", "lstat", "statx", "fstatfs", "statfs",
    "getdents64", "getdents", "readlink", "readlinkat", "access", "faccessat",
    "faccessat2", "getcwd", "chdir", "fchdir", "fadvise64",
    "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "membarrier",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "rt_sigsuspend",
    "futex", "set_robust_list", "get_robust_list", "set_tid_address", "rseq",
    "sched_yield", "sched_getaffinity", "getcpu",
    "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time",
    "poll", "ppoll", "getrandom", "uname", "arch_prctl", "sysinfo", "umask",
    "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid", "getegid",
    "getresuid", "getresgid", "getgroups", "getpgrp", "getpgid", "getsid",
    "getrlimit", "restart_syscall", "exit", "exit_group",
    # Running the tool. A second execve is harmless by construction: Landlock grants
    # EXECUTE only on the tool's own binary and its ELF loader (see policy.apply), so
    # nothing else can ever be executed, and the re-executed tool stays in this jail.
    "execve", "execveat",
)  # fmt: skip


def _build(pid_one: bool) -> sc.SyscallFilter:
    # Imported here, not at the top: the launcher only loads programs compiled by the
    # daemon, and pyseccomp (ctypes.util, libseccomp) would double the cost of its forks.
    import pyseccomp as sc

    f = sc.SyscallFilter(defaction=sc.ERRNO(errno.EPERM))
    # Foreign-architecture system calls (i386 int 0x80, x32) are killed by libseccomp's
    # default "bad arch" action: only the native table is added.
    for name in _ALLOWED:
        f.add_rule(sc.ALLOW, name)

    # abort()/raise() signal the process itself (tgkill). With Landlock's scopes (ABI
    # >= 6) nothing outside the sandbox can be signalled anyway; without, the tool is
    # PID 1 of a PID namespace of its own (jail.kernel), and only its own pid, 1, may
    # be named (tkill, which names a thread alone, is refused).
    if pid_one:
        f.add_rule(sc.ALLOW, "tgkill", sc.Arg(0, sc.MASKED_EQ, _LOW32, 1))
    else:
        f.add_rule(sc.ALLOW, "tgkill")
        f.add_rule(sc.ALLOW, "tkill")

    # Opening is allowed only for reading: every write/create/truncate flag must be clear.
    read_only = sc.Arg(2, sc.MASKED_EQ, _WRITE_FLAGS, 0)
    f.add_rule(sc.ALLOW, "openat", read_only)
    f.add_rule(sc.ALLOW, "open", sc.Arg(1, sc.MASKED_EQ, _WRITE_FLAGS, 0))
    # openat2 hides its flags in a struct seccomp cannot read: ENOSYS makes libc fall
    # back to openat, which is checked above.
    f.add_rule(sc.ERRNO(errno.ENOSYS), "openat2")

    # Output goes to stdout and stderr only (fds 0.. are pipes set up by the launcher).
    for name in ("write", "writev"):
        for fd in (1, 2):
            f.add_rule(sc.ALLOW, name, sc.Arg(0, sc.MASKED_EQ, _LOW32, fd))

    # Threads only: CLONE_THREAD set and no namespace flag (so no fork, no new
    # namespaces). clone3 passes flags in a struct: ENOSYS makes glibc use clone.
    thread = sc.Arg(0, sc.MASKED_EQ, _CLONE_THREAD | _NAMESPACE_FLAGS, _CLONE_THREAD)
    f.add_rule(sc.ALLOW, "clone", thread)
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")

    # Terminal queries only (isatty, window size), never TIOCSTI and friends.
    for request in (_TCGETS, _TIOCGWINSZ, _FIONREAD):
        f.add_rule(sc.ALLOW, "ioctl", sc.Arg(1, sc.MASKED_EQ, _LOW32, request))
    # Thread names only.
    for option in (_PR_SET_NAME, _PR_GET_NAME):
        f.add_rule(sc.ALLOW, "prctl", sc.Arg(0, sc.MASKED_EQ, _LOW32, option))
    # Resource limits of the process itself, read or lowered (raising needs privileges).
    f.add_rule(sc.ALLOW, "prlimit64", sc.Arg(0, sc.EQ, 0))
    # Everything else (socket, connect, ptrace, mount, unshare, setns, setuid, kill,
    # io_uring_*, bpf, memfd_create, fork, vfork, personality, keyctl ...) gets EPERM.

    # A binary tree of system call numbers rather than libseccomp's default linear list:
    # loading (the kernel then tries every call number to fill its verdict cache) takes
    # half the time, and the argument-checked calls are reached in a few jumps.
    try:
        f.set_attr(sc.Attr.CTL_OPTIMIZE, 2)
    except (AttributeError, OSError, ValueError):  # libseccomp < 2.5: the linear list
        f.syscall_priority("openat", 255)  # the calls made per file searched, first
        f.syscall_priority("write", 254)
    return f


@functools.cache
def compiled_filter(pid_one: bool = False) -> bytes:
    """The allow-list as a classic BPF program (an array of 8-byte ``sock_filter``);
    ``pid_one``: for a tool run as PID 1 of its own PID namespace (below Landlock ABI
    6, see ``jail.kernel``), which may signal only itself.

    Compiled once per process and cached; raises OSError if libseccomp fails.
    """
    with os.fdopen(os.memfd_create("memfs-seccomp"), "w+b") as sink:
        _build(pid_one).export_bpf(sink)
        sink.seek(0)
        program = sink.read()
    if not program or len(program) % 8:
        raise OSError(errno.EINVAL, "libseccomp exported an empty or malformed BPF program")
    return program


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Program:
    """A BPF program ready to load: the ``sock_fprog`` is built once, not per call."""

    def __init__(self, code: bytes) -> None:
        self.code = code
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self.fprog = _SockFprog(len(code) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))


@functools.cache
def program(pid_one: bool = False) -> Program:
    """:func:`compiled_filter`, ready to :func:`load` (cached)."""
    return Program(compiled_filter(pid_one))


def checked_program(code: bytes) -> Program:
    """A program compiled elsewhere (by :func:`compiled_filter` in the daemon)."""
    if not code or len(code) % 8 or len(code) // 8 > 4096:
        raise ValueError("malformed seccomp BPF program")
    return Program(code)


_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_libc = ctypes.CDLL(None, use_errno=True)


def load(program: Program | bytes) -> None:
    """Install ``program`` on the calling thread (needs no_new_privs). Irreversible."""
    ready = program if isinstance(program, Program) else Program(program)
    result = _libc.prctl(
        ctypes.c_int(_PR_SET_SECCOMP),
        ctypes.c_ulong(_SECCOMP_MODE_FILTER),
        ctypes.byref(ready.fprog),
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")
