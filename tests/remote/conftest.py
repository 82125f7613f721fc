"""Fixtures for the remote mount's tests: a real daemon with an HTTP listener on a fixed
loopback port (so that a restart listens where the mount reconnects) and its local
mount, a real unprivileged user made for the test, and `RemoteMount`: ``memfs mount
URL MOUNTPOINT --token-file FILE`` run by that user, with nothing but the token file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.test_personal_user import User, real_user
from tests.support import MEMFS, PYTHON, REPO, Daemon, is_mounted, public_tmpdir, scaled
from tests.support import standard_config as base_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def remote_config(base: Path, port: int) -> dict[str, Any]:
    config = base_config(base)
    config["http"] = {"listen": f"127.0.0.1:{port}"}
    return config


@pytest.fixture(scope="module")
def user() -> Iterator[User]:
    with real_user() as made:
        yield made


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    base = public_tmpdir("memfs-remote-")
    started = Daemon(remote_config(base, free_port()), mount=True).start()
    try:
        yield started
    finally:
        if started.alive():
            started.stop()


def token_file(user: User, token: str, name: str = "token") -> Path:
    path = user.home / name
    path.write_text(token + "\n")
    os.chown(path, user.uid, user.gid)
    path.chmod(0o600)
    return path


class RemoteMount:
    """``memfs mount`` run by ``user``; ``start`` returns once mounted and following
    the change stream."""

    def __init__(self, user: User, url: str, token: str, *args: str,
                 wrapper: Sequence[str] = ()) -> None:
        """``wrapper``: argv run as root in front of the mount, which must end by
        running it as the user (e.g. nsenter into a network namespace, then setpriv)."""
        self.user = user
        self.wrapper = list(wrapper)
        self.url = url
        self.mountpoint = Path(public_tmpdir("memfs-remote-mnt-", str(user.home))) / "memory"
        self.mountpoint.mkdir()
        os.chown(self.mountpoint.parent, user.uid, user.gid)
        os.chown(self.mountpoint, user.uid, user.gid)
        self.token_path = token_file(user, token, f"token-{self.mountpoint.parent.name}")
        self.log_path = self.mountpoint.parent / "mount.log"
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> RemoteMount:
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept for the process's life
        argv = [*self.wrapper, *MEMFS, "mount", self.url, str(self.mountpoint),
                "--token-file", str(self.token_path), *self.args]
        as_user: dict[str, Any] = {} if self.wrapper else {
            "user": self.user.uid, "group": self.user.gid, "extra_groups": []}
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=self.user.env,
                                     cwd=self.user.home, **as_user)
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memfs mount exited {self.proc.returncode}:\n{self.log()}")
            if is_mounted(self.mountpoint) and "following the changes" in self.log():
                return self
            time.sleep(0.02)
        raise RuntimeError(f"not mounted after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def run(self, code: str, *args: str, timeout: float = 60.0) -> Any:
        """Python ``code`` run as the user (``args`` in sys.argv[1:]); its stdout as
        JSON."""
        done = subprocess.run([PYTHON, "-c", code, *args], capture_output=True,
                              timeout=scaled(timeout), user=self.user.uid,
                              group=self.user.gid, extra_groups=[], env=self.user.env,
                              cwd=self.user.home)
        assert done.returncode == 0, done.stderr.decode(errors="replace") + self.log()
        return json.loads(done.stdout)

    def tool(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(list(argv), capture_output=True, timeout=scaled(timeout),
                              user=self.user.uid, group=self.user.gid, extra_groups=[],
                              env=self.user.env, cwd=self.user.home)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(scaled(30))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        deadline = time.monotonic() + scaled(10)
        while is_mounted(self.mountpoint) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_mounted(self.mountpoint):  # never left behind by a failed test
            subprocess.run(["umount", "-l", str(self.mountpoint)], check=False)


@contextlib.contextmanager
def remote_mount(user: User, daemon: Daemon, agent: str, *args: str) -> Iterator[RemoteMount]:
    mounted = RemoteMount(user, daemon.http_url, daemon.token(agent), *args).start()
    try:
        yield mounted
    finally:
        mounted.stop()


__all__ = ["REPO", "RemoteMount", "remote_mount"]
