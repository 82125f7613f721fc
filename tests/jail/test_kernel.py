"""Kernel-level tests of the policy, bypassing every argument check.

Each row forks a child, which becomes the jail's unprivileged uid (as the launcher
does, see ``jail.spawn``), applies a policy like the rg one (stores: A only) with
``jail.policy.apply``, then tries one hostile thing *directly in the forked Python
child* and exits with the errno it got (0 = it worked). The expected errno is per row;
positive rows (reading inside A) make sure the table can fail.

The attack rows run at every level the jail knows (``LEVELS``: Landlock ABI 1, 2, 4, 6
and 7, through ``MEMFS_JAIL_SIMULATE_ABI``, see ``jail.kernel``): each must be refused
at each of them, whatever stands in for a missing Landlock feature.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memfs.jail import Jail, binaries, kernel, landlock, mounts, privileges, userns
from memfs.jail.policy import Limits, Policy, apply, confine, open_paths, prepare, start_ruleset
from memfs.jail.settings import service_ids

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

SYS_PTRACE = 101
SYS_MOUNT = 165
SYS_UMOUNT2 = 166
SYS_UNSHARE = 272
SYS_CLONE = 56
SYS_IO_URING_SETUP = 425
SYS_OPENAT2 = 437
SYS_BPF = 321
SYS_MEMFD_CREATE = 319
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
PTRACE_TRACEME = 0
PTRACE_ATTACH = 16
JAIL_UID, JAIL_GID = service_ids()  # what the launcher runs as when root starts it

# The levels the attack rows run at: Landlock ABI 1 (Linux 5.13/5.15), 2 (Debian 12's
# 6.1), 4 (Ubuntu 24.04's 6.8), 6 (Debian 13's 6.12: scopes), 7 (6.15 and up).
LEVELS = (1, 2, 4, 6, 7)
REAL_ABI = kernel.landlock_abi()


@pytest.fixture(params=LEVELS, ids=[f"abi{n}" for n in LEVELS])
def abi(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Landlock ABI ``n`` for this test: the jail acts as if the kernel offered only it
    (the forked children inherit the setting)."""
    wanted: int = request.param
    if wanted > REAL_ABI:
        pytest.skip(f"this kernel has Landlock ABI {REAL_ABI}, below {wanted}")
    monkeypatch.setenv(kernel.SIMULATE_ABI, str(wanted))
    return wanted


def as_jail_user(uid: int = JAIL_UID, gid: int = JAIL_GID) -> None:
    """In a forked child of this root process: become the jail's uid, as the launcher
    does (no supplementary group, every capability gone with the uid change)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


@dataclass
class Ctx:
    """What a hostile action may aim at (all prepared before the policy applies)."""

    a: Path
    b: Path
    a_fd: int
    b_fd: int  # open, but not granted: as if leaked to the tool
    spare_pipe: int
    parent: int


def _syscall(number: int, *args: int) -> None:
    if libc.syscall(number, *[ctypes.c_long(a) for a in args]) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _open(path: Path | str, flags: int, dir_fd: int | None = None) -> None:
    os.close(os.open(path, flags, 0o644, dir_fd=dir_fd))


def _fork_like(number: int, flags: int) -> None:
    pid = libc.syscall(number, ctypes.c_long(flags), 0, 0, 0, 0)
    if pid == 0:  # we are an unexpected grandchild: vanish
        os._exit(99)
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _write(fd: int, data: bytes) -> None:
    os.write(fd, data)


def _exec(path: str) -> None:
    os.execv(path, [path, "-c", "exit 0"])


def _ptrace_attach(c: Ctx) -> None:
    _syscall(SYS_PTRACE, PTRACE_ATTACH, c.parent, 0, 0)


def _connect_unix_abstract(c: Ctx) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("\0memfs-test-nowhere")


def _socket_inet(c: Ctx) -> None:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()


# name -> (action, expected errno); 0 means "must work".
Action = Callable[[Ctx], None]
ROWS: dict[str, tuple[Action, int]] = {
    # positive rows: what rg must be able to do
    "read a file in A": (lambda c: _open(c.a / "todo.txt", os.O_RDONLY), 0),
    "list A": (lambda c: _open(c.a / "notes", os.O_RDONLY | os.O_DIRECTORY), 0),
    "read via the store fd": (lambda c: _open("todo.txt", os.O_RDONLY, dir_fd=c.a_fd), 0),
    "read via /proc/self/fd": (
        lambda c: _open(f"/proc/self/fd/{c.a_fd}/todo.txt", os.O_RDONLY),
        0,
    ),
    "write to stdout": (lambda c: _write(1, b""), 0),
    # reads outside the granted stores: Landlock
    "read a file in B": (lambda c: _open(c.b / "secret.txt", os.O_RDONLY), errno.EACCES),
    "read B via a leaked fd": (
        lambda c: _open("secret.txt", os.O_RDONLY, dir_fd=c.b_fd),
        errno.EACCES,
    ),
    "read B via /proc/self/fd": (
        lambda c: _open(f"/proc/self/fd/{c.b_fd}/secret.txt", os.O_RDONLY),
        errno.EACCES,
    ),
    "read B via .. from A's fd": (
        lambda c: _open("../B/secret.txt", os.O_RDONLY, dir_fd=c.a_fd),
        errno.EACCES,
    ),
    "read B via a symlink in A": (
        lambda c: _open(c.a / "link-to-b", os.O_RDONLY),
        errno.EACCES,
    ),
    "read /etc/passwd": (lambda c: _open("/etc/passwd", os.O_RDONLY), errno.EACCES),
    "read /etc/shadow": (lambda c: _open("/etc/shadow", os.O_RDONLY), errno.EACCES),
    "read /proc/1/environ": (lambda c: _open("/proc/1/environ", os.O_RDONLY), errno.EACCES),
    "list /": (lambda c: _open("/", os.O_RDONLY | os.O_DIRECTORY), errno.EACCES),
    # writes anywhere, even inside A: seccomp refuses the open flags
    "open for write in A": (lambda c: _open(c.a / "todo.txt", os.O_WRONLY), errno.EPERM),
    "open read-write in A": (lambda c: _open(c.a / "todo.txt", os.O_RDWR), errno.EPERM),
    "create in A": (
        lambda c: _open(c.a / "new.txt", os.O_WRONLY | os.O_CREAT),
        errno.EPERM,
    ),
    "truncate on open in A": (
        lambda c: _open(c.a / "todo.txt", os.O_RDONLY | os.O_TRUNC),
        errno.EPERM,
    ),
    "append in A": (lambda c: _open(c.a / "todo.txt", os.O_WRONLY | os.O_APPEND), errno.EPERM),
    "O_TMPFILE in A": (
        lambda c: _open(c.a, os.O_TMPFILE | os.O_WRONLY),
        errno.EPERM,
    ),
    "create in /tmp": (
        lambda c: _open("/tmp/memfs-jail-escape", os.O_WRONLY | os.O_CREAT),
        errno.EPERM,
    ),
    "truncate(2) in A": (lambda c: os.truncate(c.a / "todo.txt", 0), errno.EPERM),
    "mkdir in A": (lambda c: os.mkdir(c.a / "newdir"), errno.EPERM),
    "unlink in A": (lambda c: os.unlink(c.a / "todo.txt"), errno.EPERM),
    "rename in A": (lambda c: os.rename(c.a / "todo.txt", c.a / "x.txt"), errno.EPERM),
    "symlink in A": (lambda c: os.symlink("/etc/shadow", c.a / "s"), errno.EPERM),
    "chmod in A": (lambda c: os.chmod(c.a / "todo.txt", 0o666), errno.EPERM),
    "openat2": (lambda c: _syscall(SYS_OPENAT2, -100, 0, 0, 0), errno.ENOSYS),
    "write to another fd": (lambda c: _write(c.spare_pipe, b"x"), errno.EPERM),
    # network and IPC
    "socket AF_INET": (_socket_inet, errno.EPERM),
    "socket AF_UNIX + abstract connect": (_connect_unix_abstract, errno.EPERM),
    "socketpair": (lambda c: socket.socketpair()[0].close(), errno.EPERM),
    # executing anything: Landlock grants EXECUTE only on rg and its loader
    "exec /bin/sh": (lambda c: _exec("/bin/sh"), errno.EACCES),
    "exec /usr/bin/python3": (lambda c: _exec("/usr/bin/python3"), errno.EACCES),
    # privileges and kernel surfaces
    "setuid(0)": (lambda c: os.setuid(0), errno.EPERM),
    "setgid(0)": (lambda c: os.setgid(0), errno.EPERM),
    "ptrace(TRACEME)": (lambda c: _syscall(SYS_PTRACE, PTRACE_TRACEME, 0, 0, 0), errno.EPERM),
    "ptrace(ATTACH parent)": (_ptrace_attach, errno.EPERM),
    "io_uring_setup": (lambda c: _syscall(SYS_IO_URING_SETUP, 8, 0), errno.EPERM),
    "mount": (lambda c: _syscall(SYS_MOUNT, 0, 0, 0, 0, 0), errno.EPERM),
    "umount2": (lambda c: _syscall(SYS_UMOUNT2, 0, 0), errno.EPERM),
    "unshare(CLONE_NEWUSER)": (lambda c: _syscall(SYS_UNSHARE, CLONE_NEWUSER), errno.EPERM),
    "unshare(CLONE_NEWNS)": (lambda c: _syscall(SYS_UNSHARE, CLONE_NEWNS), errno.EPERM),
    "clone(CLONE_NEWUSER)": (
        lambda c: _fork_like(SYS_CLONE, CLONE_NEWUSER | signal.SIGCHLD),
        errno.EPERM,
    ),
    "fork": (lambda c: _fork_like(SYS_CLONE, signal.SIGCHLD), errno.EPERM),
    "kill the parent": (lambda c: os.kill(c.parent, 0), errno.EPERM),
    "bpf": (lambda c: _syscall(SYS_BPF, 0, 0, 0), errno.EPERM),
    "memfd_create": (lambda c: _syscall(SYS_MEMFD_CREATE, 0, 0), errno.EPERM),
    "chroot": (lambda c: os.chroot("/tmp"), errno.EPERM),
}


def in_child(setup: Callable[[], None], action: Callable[[], None]) -> int:
    """Fork, run ``setup`` then ``action`` in the child; return 0, the errno
    ``action`` raised, or 2xx when ``setup`` failed (204) or something else (205)."""
    pid = os.fork()
    if pid == 0:
        code = 201
        try:
            setup()
            code = 202
            action()
            code = 0
        except OSError as error:
            code = (error.errno or 203) if code == 202 else 204
        except BaseException:
            code = 205
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def run_confined(policy: Policy, action: Callable[[], None]) -> int:
    """Fork, become the jail's uid, apply ``policy``, run ``action``; return 0, the
    errno it raised, or 2xx."""

    def setup() -> None:
        as_jail_user()
        apply(policy)

    return in_child(setup, action)


@pytest.fixture(scope="module")
def ctx() -> Iterator[Ctx]:
    """Stores A and B under a world-traversable folder, all of the jail's uid (as the
    stores are the daemon's, whose uid the tools share): file permissions allow the
    jailed uid everything, writes too, so each refusal below comes from the policy."""
    base = Path(tempfile.mkdtemp(prefix="memfs-kernel-test-"))
    base.chmod(0o755)
    a, b = base / "A", base / "B"
    (a / "notes").mkdir(parents=True)
    b.mkdir()
    (a / "todo.txt").write_text("alpha\n")
    (b / "secret.txt").write_text("secret\n")
    (a / "link-to-b").symlink_to(b / "secret.txt")
    for path in (base, a, b, a / "notes", a / "todo.txt", b / "secret.txt"):
        os.chown(path, JAIL_UID, JAIL_GID)
    a_fd = os.open(a, os.O_PATH | os.O_DIRECTORY)
    b_fd = os.open(b, os.O_PATH | os.O_DIRECTORY)
    read_end, write_end = os.pipe()
    yield Ctx(a, b, a_fd, b_fd, write_end, os.getpid())
    for fd in (a_fd, b_fd, read_end, write_end):
        os.close(fd)
    shutil.rmtree(base)


@pytest.fixture(scope="module")
def rg_policy(ctx: Ctx, rg_path: Path) -> Policy:
    """The policy rg runs under, with store A as the only readable store."""
    rg = binaries.needs(rg_path.resolve())
    assert rg.loader is not None
    return Policy(
        read_fds=(ctx.a_fd,),
        read_paths=(*rg.libraries, "/etc/ld.so.cache"),
        exec_paths=(str(rg_path.resolve()), rg.loader),
        limits=Limits(cpu_seconds=5),
    )


@pytest.mark.parametrize("name", list(ROWS))
def test_confined(name: str, ctx: Ctx, rg_policy: Policy, abi: int) -> None:
    action, expected = ROWS[name]
    got = run_confined(rg_policy, lambda: action(ctx))
    assert got == expected, f"{name} at ABI {abi}: got {errno.errorcode.get(got, got)}"


def _pid_namespace_check(abi: int) -> None:
    """Below ABI 6 the tool is PID 1 of its own PID namespace; from 6 on it is not."""
    if (os.getpid() == 1) != (abi < kernel.SCOPES_ABI):
        raise OSError(errno.EBADE, f"pid {os.getpid()}")


def test_below_abi_6_each_run_is_pid_one(ctx: Ctx, rg_policy: Policy, abi: int) -> None:
    assert run_confined(rg_policy, lambda: _pid_namespace_check(abi)) == 0


def test_limits_are_set(rg_policy: Policy) -> None:
    def check() -> None:
        wanted = {
            resource.RLIMIT_FSIZE: 0,
            resource.RLIMIT_CORE: 0,
            resource.RLIMIT_CPU: 5,
            resource.RLIMIT_NPROC: rg_policy.limits.nproc,
            resource.RLIMIT_NOFILE: rg_policy.limits.nofile,
            resource.RLIMIT_AS: rg_policy.limits.address_space_bytes,
        }
        for which, value in wanted.items():
            if resource.getrlimit(which) != (value, value):
                raise OSError(errno.ERANGE, f"limit {which}")

    assert run_confined(rg_policy, check) == 0


def test_apply_leaves_no_privilege() -> None:
    """After the drop, /proc/self/status shows no capability and no_new_privs, even
    after joining the jail's user namespace (which gives every capability inside)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            as_jail_user(65534, 65534)
            userns.join(userns.make().user)
            privileges.drop()
            with open("/proc/self/status", "rb") as status:
                os.write(write_end, status.read())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    os.waitpid(pid, 0)
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap].strip(), 16) == 0, cap
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Uid"].split() == ["65534"] * 4
    assert fields["Gid"].split() == ["65534"] * 4
    assert fields["Groups"].strip() == ""


def test_drop_refuses_root() -> None:
    with pytest.raises(ValueError):
        privileges.drop()


# Landlock alone (no seccomp): the second wall holds by itself for what it covers.
ABI = landlock.abi_version()


def _landlock_only(c: Ctx, action: Callable[[], None], abi: int = ABI) -> int:
    def setup() -> None:
        ruleset = landlock.create_ruleset(abi, (c.a_fd,), (), ())
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        landlock.enforce(ruleset)

    return in_child(setup, action)


@pytest.fixture(scope="module")
def listeners() -> Iterator[tuple[int, str]]:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    name = f"\0memfs-jail-test-{os.getpid()}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(name)
    unix.listen()
    yield tcp.getsockname()[1], name
    tcp.close()
    unix.close()


def _tcp_connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def _tcp_bind() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))


def _unix_connect(name: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(name)


LANDLOCK_ROWS = {
    "read in A": (lambda c, p, n: _open(c.a / "todo.txt", os.O_RDONLY), 0, 1),
    "read in B": (lambda c, p, n: _open(c.b / "secret.txt", os.O_RDONLY), errno.EACCES, 1),
    "write in A": (lambda c, p, n: _open(c.a / "todo.txt", os.O_WRONLY), errno.EACCES, 1),
    "create in A": (
        lambda c, p, n: _open(c.a / "n", os.O_WRONLY | os.O_CREAT),
        errno.EACCES,
        1,
    ),
    "exec /bin/sh": (lambda c, p, n: _exec("/bin/sh"), errno.EACCES, 1),
    "truncate in A": (lambda c, p, n: os.truncate(c.a / "todo.txt", 0), errno.EACCES, 3),
    "TCP connect": (lambda c, p, n: _tcp_connect(p), errno.EACCES, 4),
    "TCP bind": (lambda c, p, n: _tcp_bind(), errno.EACCES, 4),
    "abstract unix connect": (lambda c, p, n: _unix_connect(n), errno.EPERM, 6),
    "signal the parent": (lambda c, p, n: os.kill(c.parent, 0), errno.EPERM, 6),
}


# What each Landlock ABI added that the rows above need (and the first Linux with it).
LANDLOCK_FEATURES = {
    1: "filesystem access rules, Linux 5.13",
    3: "LANDLOCK_ACCESS_FS_TRUNCATE, Linux 6.2",
    4: "TCP bind/connect rules, Linux 6.7",
    6: "LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET and LANDLOCK_SCOPE_SIGNAL, Linux 6.12",
}


@pytest.mark.parametrize("name", list(LANDLOCK_ROWS))
def test_landlock_alone(name: str, ctx: Ctx, listeners: tuple[int, str]) -> None:
    action, expected, min_abi = LANDLOCK_ROWS[name]
    if min_abi > ABI:
        pytest.skip(f"{name}: needs Landlock ABI {min_abi} ({LANDLOCK_FEATURES[min_abi]}); "
                    f"this kernel has Landlock ABI {ABI}")
    port, abstract = listeners
    got = _landlock_only(ctx, lambda: action(ctx, port, abstract))
    assert got == expected, f"{name}: got {errno.errorcode.get(got, got)}"


@pytest.mark.parametrize(
    "name, at",
    [(name, at) for name, (_, _, since) in LANDLOCK_ROWS.items() for at in LEVELS
     if since <= at < ABI],
)
def test_landlock_alone_at_a_lower_abi(
    name: str, at: int, ctx: Ctx, listeners: tuple[int, str]
) -> None:
    """A ruleset for an older ABI (best-effort) still refuses what that ABI handles."""
    action, expected, _ = LANDLOCK_ROWS[name]
    port, abstract = listeners
    got = _landlock_only(ctx, lambda: action(ctx, port, abstract), at)
    assert got == expected, f"{name} at ABI {at}: got {errno.errorcode.get(got, got)}"


def test_landlock_is_available() -> None:
    assert ABI >= 1


# The stores as rg sees them: bind mounts in a private mount namespace (jail.mounts).
# Landlock rules attach to inodes: the rules on the store fds must hold through the
# read-only clones too, and nothing may leak into the host's mount table.


@pytest.fixture(scope="module")
def view_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="memfs-view-test-")
    os.chmod(path, 0o711)
    yield path
    os.rmdir(path)


@pytest.fixture(scope="module")
def mounted_policy(ctx: Ctx, rg_policy: Policy, view_dir: str) -> Policy:
    return rg_policy.replace(
        read_fds=(), cwd=view_dir, stores=(("A", ".", ctx.a_fd),), stores_dir=ctx.a_fd
    )


def _expect_flags(path: str, flags: int) -> None:
    if os.statvfs(path).f_flag & flags != flags:
        raise OSError(errno.ENOTSUP, f"{path} lacks mount flags {flags:#x}")


def _rename_in_view() -> None:
    os.rename("A/todo.txt", "A/x.txt")


_RO = os.ST_RDONLY | os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC
MOUNTED_ROWS: dict[str, tuple[Action, int]] = {
    "read A/ through the mount": (lambda c: _open("A/todo.txt", os.O_RDONLY), 0),
    "list A/notes through the mount": (
        lambda c: _open("A/notes", os.O_RDONLY | os.O_DIRECTORY),
        0,
    ),
    "the mount is ro, nosuid, nodev, noexec": (lambda c: _expect_flags("A", _RO), 0),
    "the folder is ro too": (lambda c: _expect_flags(".", _RO), 0),
    "read A by its real path": (lambda c: _open(c.a / "todo.txt", os.O_RDONLY), 0),
    "read B by its real path": (lambda c: _open(c.b / "secret.txt", os.O_RDONLY), errno.EACCES),
    "B is not in the folder": (lambda c: _open("B/secret.txt", os.O_RDONLY), errno.ENOENT),
    "read B via A/..": (lambda c: _open("A/../B/secret.txt", os.O_RDONLY), errno.ENOENT),
    "read B via a symlink in A": (lambda c: _open("A/link-to-b", os.O_RDONLY), errno.EACCES),
    "list the folder": (lambda c: _open(".", os.O_RDONLY | os.O_DIRECTORY), errno.EACCES),
    "write in the mount": (lambda c: _open("A/todo.txt", os.O_WRONLY), errno.EPERM),
    "truncate(2) in the mount": (lambda c: os.truncate("A/todo.txt", 0), errno.EPERM),
    "truncate(2) by the real path": (lambda c: os.truncate(c.a / "todo.txt", 0), errno.EPERM),
    "create in the folder": (lambda c: _open("new", os.O_WRONLY | os.O_CREAT), errno.EPERM),
    "rename in the mount": (lambda c: _rename_in_view(), errno.EPERM),
    "umount the store": (lambda c: _syscall(SYS_UMOUNT2, 0, 0), errno.EPERM),
    "mount": (lambda c: _syscall(SYS_MOUNT, 0, 0, 0, 0, 0), errno.EPERM),
    "unshare(CLONE_NEWNS)": (lambda c: _syscall(SYS_UNSHARE, CLONE_NEWNS), errno.EPERM),
}


@pytest.mark.parametrize("name", list(MOUNTED_ROWS))
def test_confined_with_mounted_stores(
    name: str, ctx: Ctx, mounted_policy: Policy, view_dir: str
) -> None:
    action, expected = MOUNTED_ROWS[name]
    got = run_confined(mounted_policy, lambda: action(ctx))
    assert got == expected, f"{name}: got {errno.errorcode.get(got, got)}"
    assert (ctx.a / "todo.txt").read_text() == "alpha\n"
    assert os.listdir(view_dir) == []  # the host never sees the folder's mounts
    with open("/proc/self/mountinfo") as mountinfo:
        assert view_dir not in mountinfo.read()


def _mounts_only(c: Ctx, action: Callable[[], None], view_dir: str) -> int:
    """The stores mounted (every capability of the jail's namespace still held, no
    Landlock, no seccomp): what the mounts alone do."""

    def setup() -> None:
        as_jail_user()
        mounts.enter(c.a_fd, userns.make().user)
        mounts.show_stores(view_dir, (("A", ".", c.a_fd),))
        os.chdir(view_dir)

    return in_child(setup, action)


@pytest.mark.parametrize(
    "name, action",
    [
        ("truncate", lambda: os.truncate("A/todo.txt", 0)),
        ("write", lambda: _open("A/todo.txt", os.O_WRONLY)),
        ("create", lambda: _open("A/new", os.O_WRONLY | os.O_CREAT)),
        ("create in the folder", lambda: _open("new", os.O_WRONLY | os.O_CREAT)),
    ],
)
def test_the_mounts_alone_are_read_only(
    name: str, action: Callable[[], None], ctx: Ctx, view_dir: str
) -> None:
    """Even with the namespace's capabilities, without Landlock or seccomp, the clones
    refuse writes (EROFS)."""
    assert _mounts_only(ctx, action, view_dir) == errno.EROFS, name
    assert (ctx.a / "todo.txt").read_text() == "alpha\n"


def test_landlock_rules_on_the_store_fd_reach_the_clone(ctx: Ctx, view_dir: str) -> None:
    """Landlock alone (no seccomp), with a rule on A's original fd only: reads through
    the read-only clone of A are granted, B is not."""

    def check() -> None:
        _open("A/todo.txt", os.O_RDONLY)
        try:
            _open(ctx.b / "secret.txt", os.O_RDONLY)
        except PermissionError:
            return
        raise OSError(errno.EEXIST, "B was readable")

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            as_jail_user()
            mounts.enter(ctx.a_fd, userns.make().user)
            mounts.show_stores(view_dir, (("A", ".", ctx.a_fd),))
            os.chdir(view_dir)
            ruleset = landlock.create_ruleset(ABI, (), (), (), store_fds=(ctx.a_fd,))
            libc.prctl(38, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            landlock.enforce(ruleset)
            check()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_store_must_be_the_directory_the_daemon_opened(
    ctx: Ctx, mounted_policy: Policy
) -> None:
    """Each store is looked up by its path beneath ``stores_dir`` inside the new mount
    namespace: a path that names another directory than the daemon's fd (as if swapped
    in between) mounts nothing; the right one works."""
    base = os.open(ctx.a.parent, os.O_PATH | os.O_DIRECTORY)

    def attempt(path: str) -> Callable[[], None]:
        def run() -> None:
            policy = mounted_policy.replace(stores=(("A", path, ctx.a_fd),), stores_dir=base)
            try:
                apply(policy)
            except ValueError as error:
                if "is not the directory opened" in str(error):
                    raise OSError(errno.ESTALE, str(error)) from None
                raise
            _open("A/todo.txt", os.O_RDONLY)

        return run

    try:
        assert in_child(as_jail_user, attempt("B")) == errno.ESTALE
        assert in_child(as_jail_user, attempt("A")) == 0
    finally:
        os.close(base)


# The sed spare waits for its call after ``confine`` (the whole policy but seccomp):
# what it can still do then, in Python, before the filter is loaded.
def _sed_policy(sed_root: Path) -> Policy:
    sed = binaries.check_sed_root(sed_root)
    return Policy(
        chroot=str(sed_root),
        read_paths=(*sed.libraries, binaries.LOCALE_IN_ROOT),
        exec_paths=(binaries.SED_IN_ROOT, *([sed.loader] if sed.loader else [])),
        limits=Limits(cpu_seconds=5),
        die_with_parent=True,
    )


def _recv_one_fd(c: Ctx) -> None:
    """The spare's next step: receive the call's fds; works under Landlock alone."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    socket.send_fds(theirs, [b"call"], [c.spare_pipe])
    _msg, fds, _flags, _addr = socket.recv_fds(mine, 100, 4)
    if len(fds) != 1:
        raise OSError(errno.EBADMSG, "no fd received")


def _mount_tmpfs(where: str) -> None:
    if libc.mount(b"x", where.encode(), b"tmpfs", ctypes.c_ulong(0), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# (with Landlock's scopes, below ABI 6): outside its PID namespace nothing is visible
SCOPED_OR_HIDDEN = (errno.EPERM, errno.ESRCH)
CONFINED_AHEAD_ROWS: dict[str, tuple[Action, int | tuple[int, int]]] = {
    # positive rows: what the waiting spare must still do
    "receive the call's fds": (_recv_one_fd, 0),
    "read the locale in the chroot": (
        lambda c: _open("/usr/lib/locale/C.utf8/LC_CTYPE", os.O_RDONLY),
        0,
    ),
    # the chroot: the host is not there
    "read /etc/passwd": (lambda c: _open("/etc/passwd", os.O_RDONLY), errno.ENOENT),
    # Landlock: nothing outside the granted paths, even through fds opened before
    "read A via a leaked fd": (
        lambda c: _open("todo.txt", os.O_RDONLY, dir_fd=c.a_fd),
        errno.EACCES,
    ),
    "read B via a leaked fd": (
        lambda c: _open("secret.txt", os.O_RDONLY, dir_fd=c.b_fd),
        errno.EACCES,
    ),
    "list the chroot": (lambda c: _open("/", os.O_RDONLY | os.O_DIRECTORY), errno.EACCES),
    # the root is a read-only mount: refused before Landlock is asked (Landlock alone
    # refuses it too: test_landlock_alone)
    "create a file in the chroot": (
        lambda c: _open("/new", os.O_WRONLY | os.O_CREAT),
        errno.EROFS,
    ),
    "execute /bin/sh": (lambda c: _exec("/bin/sh"), errno.ENOENT),
    # no privilege left (and root is not even mapped in the jail's user namespace)
    "setuid(0)": (lambda c: os.setuid(0), errno.EINVAL),
    "chroot out": (lambda c: os.chroot("/usr"), errno.EPERM),
    "mount a tmpfs": (lambda c: _mount_tmpfs("/"), errno.EPERM),
    "unshare(CLONE_NEWNS)": (lambda c: _syscall(SYS_UNSHARE, CLONE_NEWNS), errno.EPERM),
    "ptrace the launcher": (_ptrace_attach, SCOPED_OR_HIDDEN),
    "signal the launcher": (lambda c: os.kill(c.parent, 0), SCOPED_OR_HIDDEN),
}


@pytest.mark.parametrize("name", list(CONFINED_AHEAD_ROWS))
def test_confined_ahead(name: str, ctx: Ctx, sed_root: Path, abi: int) -> None:
    action, expected = CONFINED_AHEAD_ROWS[name]
    if isinstance(expected, tuple):
        expected = expected[0] if abi >= kernel.SCOPES_ABI else expected[1]
    policy = _sed_policy(sed_root)

    def setup() -> None:
        opened = open_paths(policy)  # by root, as the daemon does: the root is under its tmp
        as_jail_user()
        prepared = prepare(policy, opened=opened)
        confine(policy, prepared, ruleset=start_ruleset(prepared))

    got = in_child(setup, lambda: action(ctx))
    assert got == expected, f"{name}: got {errno.errorcode.get(got, got)}"


# The tools run under the launcher's own uid (and the daemon's, once it runs
# unprivileged): the jail alone must keep them from every process of that uid outside
# it, its sockets and its state. Each row runs a tiny hostile program under the real
# tool policies (``jail.spawn.base_tools``: rg with a store mounted as in a call, sed
# chrooted), against the real launcher of the session's jail and a stand-in for the
# daemon: a process of the jail's uid listening on a unix socket (pathname and
# abstract), beside a state/ directory of that uid. The same program with the jail
# switched off, or only its Landlock scopes, shows that each refusal is the jail's.

SYS_TGKILL = 234 if os.uname().machine == "x86_64" else 131
SYS_PROCESS_VM_READV = 310 if os.uname().machine == "x86_64" else 270
PTRACE_SEIZE = 0x4206

STAND_IN = r"""
import signal, socket, sys
path, name = sys.argv[1], sys.argv[2]
sockets = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)]
sockets[0].bind(path)
sockets[1].bind("\0" + name)
for s in sockets:
    s.listen(64)
print("ready", flush=True)
signal.pause()
"""


@dataclass
class Daemon:
    """What a tool of the jail's uid must not reach."""

    launcher: int  # the real launcher of the session's jail
    pid: int  # the stand-in for the daemon
    socket_path: str
    abstract: str
    state_file: Path
    stores: Path  # beside state/: ROOT/stores


@pytest.fixture(scope="module")
def daemon(jail: Jail) -> Iterator[Daemon]:
    """ROOT (0700, of the jail's uid) with stores/A and state/seen, and the stand-in."""
    from tests.support import public_tmpdir

    root = public_tmpdir("memfs-same-uid-") / "root"
    (root / "stores" / "A").mkdir(parents=True)
    (root / "stores" / "A" / "todo.txt").write_text("alpha\n")
    (root / "state").mkdir()
    (root / "state" / "seen").write_text("STATE-OF-THE-DAEMON\n")
    for path in (root, root / "stores", root / "stores" / "A", root / "stores" / "A" / "todo.txt",
                 root / "state", root / "state" / "seen"):
        os.chown(path, JAIL_UID, JAIL_GID)
    root.chmod(0o700)
    socket_path = str(root / "state" / "control.sock")
    abstract = f"memfs-test-daemon-{os.getpid()}"
    stand_in = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, socket_path, abstract],
        stdout=subprocess.PIPE, user=JAIL_UID, group=JAIL_GID, extra_groups=[],
    )
    try:
        assert stand_in.stdout is not None and stand_in.stdout.readline() == b"ready\n"
        yield Daemon(jail.launcher_pid, stand_in.pid, socket_path, abstract,
                     root / "state" / "seen", root / "stores")
    finally:
        stand_in.kill()
        stand_in.wait()


def _tgkill(pid: int) -> None:
    _syscall(SYS_TGKILL, pid, pid, 0)


def _seize(pid: int) -> None:
    _syscall(SYS_PTRACE, PTRACE_SEIZE, pid, 0, 0)  # detached again when the child exits


def _read_memory(pid: int) -> None:
    """process_vm_readv of one byte at address 0: EFAULT once it is allowed at all."""
    buffer = ctypes.create_string_buffer(1)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buffer, ctypes.c_void_p), 1)
    remote = (ctypes.c_void_p * 2)(None, 1)
    _syscall(SYS_PROCESS_VM_READV, pid, ctypes.addressof(local), 1,
             ctypes.addressof(remote), 1, 0)


def _connect(address: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(address)


# name -> (action, errno without any protection)
SAME_UID_ROWS: dict[str, tuple[Callable[[Daemon], None], int]] = {
    "kill the daemon": (lambda d: os.kill(d.pid, 0), 0),
    "kill the launcher": (lambda d: os.kill(d.launcher, 0), 0),
    "tgkill the daemon": (lambda d: _tgkill(d.pid), 0),
    "tgkill the launcher": (lambda d: _tgkill(d.launcher), 0),
    "ptrace the daemon": (lambda d: _seize(d.pid), 0),
    # non-dumpable: refused even to its own uid, jail or not
    "ptrace the launcher": (lambda d: _seize(d.launcher), errno.EPERM),
    "read the daemon's memory": (lambda d: _read_memory(d.pid), errno.EFAULT),
    "connect to its socket": (lambda d: _connect(d.socket_path), 0),
    "connect to its abstract socket": (lambda d: _connect("\0" + d.abstract), 0),
    "read its state": (lambda d: _open(d.state_file, os.O_RDONLY), 0),
    "read its environment": (lambda d: _open(f"/proc/{d.pid}/environ", os.O_RDONLY), 0),
}


@pytest.fixture(scope="module")
def tool_policies(jail: Jail, daemon: Daemon) -> Iterator[dict[str, Policy]]:
    """The real policies of rg (store A mounted on a work folder, as in a call) and sed."""
    from memfs.jail.spawn import base_tools
    from tests.support import public_tmpdir

    tools = base_tools(jail.settings)
    store = os.open(daemon.stores / "A", os.O_PATH | os.O_DIRECTORY)
    stores_dir = os.open(daemon.stores, os.O_PATH | os.O_DIRECTORY)
    work = str(public_tmpdir("memfs-same-uid-work-"))
    rg = tools["rg"].policy.replace(cwd=work, stores=(("A", "A", store),), stores_dir=stores_dir)
    yield {"rg": rg, "sed": tools["sed"].policy}
    os.close(store)
    os.close(stores_dir)


def _as_tool(
    policy: Policy, action: Callable[[], None], *, scopes: bool = True, filtered: bool = True
) -> int:
    """Fork, become the jail's uid, apply ``policy`` (its files opened first, by root, as
    the daemon does), run ``action``; ``scopes=False``: without Landlock's scopes;
    ``filtered=False``: without the seccomp filter (``confine``, not ``apply``)."""

    def setup() -> None:
        if not scopes:
            landlock.scopes = lambda abi: 0  # in this forked child only
        opened = open_paths(policy)
        as_jail_user()
        (apply if filtered else confine)(policy, prepare(policy, opened=opened))

    return in_child(setup, action)


@pytest.mark.parametrize("tool", ["rg", "sed"])
@pytest.mark.parametrize("name", list(SAME_UID_ROWS))
def test_a_jailed_tool_cannot_reach_its_own_uid(
    name: str, tool: str, daemon: Daemon, tool_policies: dict[str, Policy], abi: int
) -> None:
    action, _ = SAME_UID_ROWS[name]
    got = _as_tool(tool_policies[tool], lambda: action(daemon))
    # EACCES: Landlock (paths); ENOENT: not in sed's chroot; EPERM: seccomp, Landlock's
    # scopes, ptrace rules
    assert got in (errno.EPERM, errno.EACCES, errno.ENOENT), f"{name} at ABI {abi}: got {got}"
    assert os.kill(daemon.pid, 0) is None  # still alive


# The rows that pass the kernel's ptrace access check, which Yama tightens
PTRACE_ROWS = {"ptrace the daemon", "read the daemon's memory"}


def yama_ptrace_scope() -> int:
    """Yama's ptrace_scope (0 where Yama is absent: Debian's default is 0 too)."""
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("name", list(SAME_UID_ROWS))
def test_without_the_jail_its_own_uid_is_reachable(name: str, daemon: Daemon) -> None:
    """The control: the same programs as the jail's uid, unconfined, reach the stand-in
    (so the refusals above are the jail's), all but the ptrace of the launcher."""
    action, unprotected = SAME_UID_ROWS[name]
    scope = yama_ptrace_scope()
    if name in PTRACE_ROWS and scope >= 1:
        pytest.skip(f"Yama's ptrace_scope is {scope} here (Ubuntu's default is 1): it "
                    "refuses a same-uid ptrace of a process that is not a child, jail or "
                    "not, so this control cannot succeed")

    def setup() -> None:
        as_jail_user()

    got = in_child(setup, lambda: action(daemon))
    assert got == unprotected, f"{name}: got {errno.errorcode.get(got, got)}"


@pytest.mark.parametrize("tool", ["rg", "sed"])
def test_landlock_scopes_are_what_keeps_signals_in(
    tool: str, daemon: Daemon, tool_policies: dict[str, Policy]
) -> None:
    """seccomp lets a tool signal itself (tgkill, for abort()): under the policy with
    Landlock's scopes switched off, a same-uid tgkill of the daemon and the launcher
    works; with them, it is refused."""
    at = kernel.detect().abi
    if at < kernel.SCOPES_ABI:
        pytest.skip(f"the jail runs at Landlock ABI {at} here: no scopes (ABI 6)")
    policy = tool_policies[tool]
    for target in (daemon.pid, daemon.launcher):
        assert _as_tool(policy, lambda t=target: _tgkill(t), scopes=False) == 0
        assert _as_tool(policy, lambda t=target: _tgkill(t)) == errno.EPERM


BELOW_SCOPES_ROWS: dict[str, tuple[Callable[[Daemon], None], int]] = {
    # another PID namespace: no pid outside is visible
    "tgkill the daemon": (lambda d: _tgkill(d.pid), errno.ESRCH),
    "tgkill the launcher": (lambda d: _tgkill(d.launcher), errno.ESRCH),
    "ptrace the daemon": (lambda d: _seize(d.pid), errno.ESRCH),
    # another network namespace: the daemon's abstract name is not bound there
    "connect to its abstract socket": (lambda d: _connect("\0" + d.abstract),
                                       errno.ECONNREFUSED),
}


@pytest.mark.parametrize("tool", ["rg", "sed"])
@pytest.mark.parametrize("name", list(BELOW_SCOPES_ROWS))
def test_below_abi_6_the_namespaces_keep_signals_and_sockets_in(
    name: str, tool: str, daemon: Daemon, tool_policies: dict[str, Policy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At ABI 4 (no scopes), without the seccomp filter (which refuses all of these
    too): the PID and network namespaces alone keep the daemon out of reach, where the
    same uid unconfined reaches it (test_without_the_jail_its_own_uid_is_reachable)."""
    monkeypatch.setenv(kernel.SIMULATE_ABI, "4")
    action, expected = BELOW_SCOPES_ROWS[name]
    got = _as_tool(tool_policies[tool], lambda: action(daemon), filtered=False)
    assert got == expected, f"{name}: got {errno.errorcode.get(got, got)}"
