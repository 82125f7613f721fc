"""Test support: real daemons in subprocesses, clients and commands as real uids.

Tests run as root. Agents are plain numeric uids (no passwd entry needed); a client
for uid U is a socket connected while the test process's effective uid is U, which
is exactly what the daemon reads with SO_PEERCRED. Daemons are started as root, so
each one serves as the service user DAEMON_USER after its privileged phase
(memfs/daemon/privilege.py): a file a test plants in a backing directory as an
operator's change must be that user's (`plant`), as docs/operate/privilege.md tells operators.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from memfs.control.client import Client, PermissionDeniedError

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MEMFS = [PYTHON, "-m", "memfs.cli"]

# Numeric uids used by the tests; none needs to exist in /etc/passwd.
UID_A, UID_B, UID_C, UID_UNKNOWN = 2001, 2002, 2003, 2999

# MEMFS_TEST_SLOWDOWN (default 1): how many times slower than a developer's laptop this
# machine may be (an emulated VM, a loaded CI runner). No test needs it to pass: stress
# tests stop on counts, and a limit under test is set so that it trips first anyway.
# It only stretches the budgets that bound a wait for something that normally comes
# quickly (pytest's per-test timeout, a daemon's start), so that a very slow machine
# gets a slow pass rather than a time-out.
SLOWDOWN = float(os.environ.get("MEMFS_TEST_SLOWDOWN") or 1)
if not SLOWDOWN >= 1:
    raise ValueError(f"MEMFS_TEST_SLOWDOWN must be a number >= 1, not {SLOWDOWN}")


DAEMON_USER = "memfs"  # config `user`'s default: scripts/setup creates it


def daemon_ids() -> tuple[int, int]:
    """The uid and gid a daemon started as root serves as (DAEMON_USER's)."""
    entry = pwd.getpwnam(DAEMON_USER)
    return entry.pw_uid, entry.pw_gid


def plant(path: Path, data: bytes | str = b"") -> Path:
    """An operator's change in a store's backing directory, made the way docs/operate/privilege.md
    says (as the memfs user): write ``data`` to ``path`` and create its missing
    folders, each owned by the daemon's user (memfs shows no file of another owner).
    Returns ``path``."""
    uid, gid = daemon_ids()
    missing = [parent for parent in reversed(path.parents) if not parent.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        os.chown(folder, uid, gid)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.chown(path, uid, gid, follow_symlinks=False)
    return path


def scaled(seconds: float) -> float:
    """A wait budget of ``seconds`` on a developer's machine, stretched by SLOWDOWN."""
    return seconds * SLOWDOWN


class Acks:
    """A count of acknowledged changes that threads add to and a test waits on: a
    storm is stopped (a daemon killed, a phase ended) once it has made a number of
    changes, never after a time, so that a slow machine makes the same number."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.count = 0

    def add(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_for(self, count: int, *, alive: Callable[[], bool] = lambda: True,
                 seconds: float = 120) -> None:
        """Until ``count`` changes were acknowledged in all. Fails the test if
        ``alive()`` turns false first (the writers stopped) or after ``scaled(seconds)``
        (a budget for a hung storm, not a measure of speed)."""
        deadline = time.monotonic() + scaled(seconds)
        with self._changed:
            while self.count < count:
                assert alive(), f"the writers stopped after {self.count} of {count} changes"
                left = deadline - time.monotonic()
                assert left > 0, f"only {self.count} of {count} changes after {scaled(seconds)} s"
                self._changed.wait(min(left, 0.1))  # alive() is asked again each 0.1 s


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f'"{k}" = {toml_value(v)}' for k, v in value.items()) + " }"
    raise TypeError(value)


def dump_toml(config: Mapping[str, Any]) -> str:
    """Enough TOML for memfs configs: top-level scalars, then [table.name] sections."""
    lines = [f"{k} = {toml_value(v)}" for k, v in config.items() if not isinstance(v, Mapping)]
    for key, table in config.items():
        if isinstance(table, Mapping):
            scalars = [f"{name} = {toml_value(body)}" for name, body in table.items()
                       if not isinstance(body, Mapping)]
            if scalars or not table:  # e.g. [jail] or [limits], or [personal] left empty
                lines += [f"\n[{key}]", *scalars]
            for name, body in table.items():
                if isinstance(body, Mapping):
                    lines.append(f'\n[{key}."{name}"]')
                    lines += [f"{k} = {toml_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


CREATED_DIRS: list[Path] = []  # removed at the end of the test session (conftest)


def is_mounted(path: Path) -> bool:
    """Something is mounted at ``path`` (mountinfo: also a FUSE mount root may not stat,
    one without allow_other)."""
    target = os.fsencode(path)
    with open("/proc/self/mountinfo", "rb") as handle:
        return any(line.split(b" ")[4] == target for line in handle)


def named(uid: int) -> int:
    """``uid``, made a user of this machine if it is none yet (``memfs-test-UID``, with
    a group of the same id): a personal memory's owner must be one (fusermount3 mounts
    only for a user with a name). Kept for later runs; returns ``uid``."""
    try:
        pwd.getpwuid(uid)
    except KeyError:
        name = f"memfs-test-{uid}"
        account(["groupadd", "-f", "-g", str(uid), name], check=True)
        done = account(["useradd", "-u", str(uid), "-g", str(uid), "-M", "-N",
                        "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name])
        # "already exists": another process (a parallel test worker) made it meanwhile
        assert done.returncode == 0 or "already exists" in done.stderr, done.stderr
    return uid


def account(argv: Sequence[str], *, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``useradd``, ``userdel``, ``groupadd`` ... run until it did not find
    /etc/passwd or /etc/group locked by another process (a parallel test worker, which
    shadow's tools refuse as "cannot lock ...; try again later"), for at most
    ``scaled(60)`` seconds; ``check``: fail unless it succeeded."""
    deadline = time.monotonic() + scaled(60)
    while True:
        done = subprocess.run(list(argv), capture_output=True, text=True)
        if "cannot lock" not in done.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not check or done.returncode == 0, f"{argv}: {done.stderr}"
    return done


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a thread that ends meanwhile has none)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            found += [int(child) for child in
                      Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


class LoopUnavailable(Exception):
    """This machine cannot loop-mount a file system image (no loop devices)."""


@contextlib.contextmanager
def loop_filesystem(mountpoint: Path, image: Path, mib: int) -> Iterator[Path]:
    """A fresh ext4 file system of ``mib`` MiB in the (sparse) file ``image``,
    loop-mounted at ``mountpoint``, its root mode 0755; unmounted and deleted
    afterwards. Raises LoopUnavailable when the machine cannot loop-mount at all."""
    subprocess.run(["truncate", "-s", f"{mib}M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        image.unlink()
        raise LoopUnavailable(f"mount -o loop: {done.stderr.strip()}")
    try:
        mountpoint.chmod(0o755)
        yield mountpoint
    finally:
        gc.collect()  # a caller's pygit2 objects may hold the history's pack files open
        subprocess.run(["umount", str(mountpoint)], check=True)
        image.unlink()


def public_tmpdir(prefix: str = "memfs-test-", under: str = "/tmp") -> Path:
    """A directory every test uid can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=under))
    path.chmod(0o755)
    CREATED_DIRS.append(path)
    return path


def standard_config(base: Path, **overrides: Any) -> dict[str, Any]:
    """Two stores, three agents: A read_write both, B read_write notes + read ops,
    C read notes only. Root 0 is a delegate."""
    config: dict[str, Any] = {
        "root": str(base / "root"),
        "mount": str(base / "memory"),
        "socket": str(base / "control.sock"),
        "delegates": [0],
        "stores": {"notes": {}, "ops": {}, "secret": {}},
        "agents": {
            "alice": {"uid": UID_A, "stores": {"notes": "read_write", "ops": "read_write"}},
            "bob": {"uid": UID_B, "stores": {"notes": "read_write", "ops": "read"}},
            "carol": {"uid": UID_C, "stores": {"notes": "read"}},
        },
    }
    config.update(overrides)
    return config


# A config's ``recall`` when it names none (None: the product's default, hybrid).
# tests/conftest.py sets lexical: the embedding model costs each change ~25 ms of CPU
# in the background; the tests about recall ask for the model by name. Benchmarks
# keep the default.
DEFAULT_RECALL: dict[str, Any] | None = None


class Daemon:
    """A real ``memfs serve`` in a subprocess."""

    def __init__(self, config: Mapping[str, Any], *, mount: bool = False,
                 config_path: Path | None = None, nofile: tuple[int, int] | None = None,
                 wrapper: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 user: str | None = None, await_mount: bool = False,
                 args: Sequence[str] | None = None) -> None:
        """``await_mount``: ``memfs serve --await-mount`` (the system service's: root
        must mount it with ``memfs attach``; ready once the socket answers).
        ``args``: ``memfs serve``'s arguments instead of ``--config FILE`` (e.g.
        ``--demo``); ``config`` then says only where its socket is (and whether it has
        ``[http]``).
        ``nofile``: start the daemon with this (soft, hard) RLIMIT_NOFILE.
        ``wrapper``: argv run in front of ``memfs serve`` (e.g. nsenter into a network
        namespace); it must exec the daemon so that its pid is the daemon's.
        ``env``: added to the daemon's environment. ``user``: start it as this user
        (with its group and no other) instead of root: no privileged phase at all."""
        self.config = dict(config)
        if DEFAULT_RECALL is not None:
            self.config.setdefault("recall", DEFAULT_RECALL)
        self.nofile = nofile
        self.wrapper = list(wrapper)
        self.socket = Path(self.config["socket"])
        self.mountpoint = Path(self.config.get("mount", "/memory"))
        self.mount = mount
        self.await_mount = await_mount
        self.config_path = config_path or self.socket.with_suffix(".toml")
        self.config_path.write_text(dump_toml(self.config))
        self.log_path = self.socket.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self.env = dict(env or {})  # added to the daemon's environment
        self.user = user
        self.args = ["--config", str(self.config_path)] if args is None else list(args)

    def start(self, timeout: float = 120.0) -> Daemon:
        argv = [*self.wrapper, *MEMFS, "serve", *self.args]
        if self.await_mount:
            argv.append("--await-mount")
        elif not self.mount:
            argv.append("--no-mount")
        if self.nofile is not None:  # prlimit execs the daemon: same pid
            argv = ["prlimit", f"--nofile={self.nofile[0]}:{self.nofile[1]}", "--", *argv]
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept for the process's life
        as_user: dict[str, Any] = {}
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, cwd=REPO,
                                     env={**os.environ, **self.env}, **as_user)
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            if self._ready():
                return self
            time.sleep(0.02)
        self.kill()  # never left running by a start that failed
        raise RuntimeError(f"daemon not ready after {timeout}s:\n{self.log()}")

    def _ready(self) -> bool:
        if self.mount and not is_mounted(self.mountpoint):
            return False
        if "http" in self.config and self._http_url() is None:
            return False
        try:
            with Client(str(self.socket)) as client:
                client.call("whoami")
        except PermissionDeniedError:  # root is a delegate (or not served at all): up
            return True
        except Exception:
            return False
        return True

    def _http_url(self) -> str | None:
        if not self.log_path.exists():
            return None
        this_start = self.log_path.read_bytes()[self._log_start:].decode(errors="replace")
        found = re.findall(r"http: listening on (\S+)", this_start)
        return found[-1].rstrip(",") if found else None

    @property
    def http_url(self) -> str:
        """The base URL of the HTTP listener of this start (``[http]`` configured;
        ``listen`` may use port 0: the daemon logs the port it bound)."""
        url = self._http_url()
        assert url is not None, "no HTTP listener"
        return url

    def token(self, agent: str, *args: str) -> str:
        """A new bearer token for ``agent`` (``memfs token create`` as root)."""
        done = subprocess.run([*MEMFS, "--socket", str(self.socket), "token", "create", agent,
                               *args], capture_output=True, cwd=REPO, timeout=scaled(60))
        assert done.returncode == 0, done.stderr
        return done.stdout.decode().strip()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(scaled(timeout))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run_until_killed(self, timeout: float = 120.0) -> None:
        """Start the daemon and wait until it SIGKILLs itself at the crash point its
        ``env`` names (memfs/store/crashpoints.py); it may die before it answers."""
        with contextlib.suppress(RuntimeError):
            self.start(timeout)
        assert self.proc is not None
        try:
            code = self.proc.wait(scaled(timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"never reached its crash point:\n{self.log()}") from None
        assert code == -signal.SIGKILL, f"exited with {code}:\n{self.log()}"

    def __enter__(self) -> Daemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.alive():
            self.stop()


@contextlib.contextmanager
def killed_at(config: Mapping[str, Any], step: str,
              env: Mapping[str, str] | None = None) -> Iterator[Daemon]:
    """A daemon that SIGKILLs itself at the crash point ``step`` (``NAME`` or
    ``NAME@N``, see memfs/store/crashpoints.py), which the ``with`` body must make it
    reach: asserts that it died there, and never leaves it running. ``env``: more of
    the daemon's environment."""
    from memfs.store.crashpoints import ENV

    daemon = Daemon(config, env={**(env or {}), ENV: step}).start()
    try:
        yield daemon
        assert daemon.proc is not None
        assert daemon.proc.wait(scaled(30)) == -signal.SIGKILL, f"not killed at {step}"
    finally:
        if daemon.alive():
            daemon.kill()


_EUID_LOCK = threading.Lock()


def connect_as(uid: int, socket_path: str | Path, as_agent: str | None = None) -> Client:
    """A client whose connection the kernel attributes to ``uid``. The effective uid
    is the whole process's: threads connecting at once take turns (a thread doing
    anything else as root meanwhile would still act as ``uid``: connect first)."""
    with _EUID_LOCK:
        os.seteuid(uid)
        try:
            return Client(str(socket_path), as_agent=as_agent)
        finally:
            os.seteuid(0)


def run_as(uid: int, argv: Sequence[str], *, input: bytes | None = None,
           timeout: float = 60, env: Mapping[str, str] | None = None,
           cwd: str | Path = "/", gid: int | None = None,
           ) -> subprocess.CompletedProcess[bytes]:
    """Run a real program as ``uid`` (gid ``gid``, default uid; no supplementary groups)."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8",
                "HOME": "/", "PYTHONPATH": str(REPO)}
    full_env.update(env or {})
    return subprocess.run(list(argv), input=input, capture_output=True, timeout=scaled(timeout),
                          user=uid, group=uid if gid is None else gid,
                          extra_groups=[], env=full_env, cwd=cwd)


def memfs_as(uid: int, socket_path: str | Path, *args: str, input: bytes | None = None,
             ) -> subprocess.CompletedProcess[bytes]:
    """The real ``memfs`` CLI run as ``uid``."""
    return run_as(uid, [*MEMFS, "--socket", str(socket_path), *args], input=input)


@contextlib.contextmanager
def as_euid(uid: int) -> Iterator[None]:
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
