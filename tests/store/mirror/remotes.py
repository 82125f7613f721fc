"""The mirror tests' helpers: a config whose ``notes`` is mirrored, writes, the mirrors'
status, and real git remotes: bare repositories reached through file://, a real
``git daemon --enable=receive-pack`` on loopback (stopped and started again on its
port to play a remote that is down for a while), and a pre-receive hook that holds a
push in the middle (its pack received, ``main`` not yet moved) until the test lets it
go. Everything runs as the daemon's user (memfs), as the pushes do: the remote's
files are then its own, and plain git reads them without complaint."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.store.history.gitcheck import commits
from tests.support import (
    UID_A,
    Daemon,
    connect_as,
    daemon_ids,
    memfs_as,
    run_as,
    scaled,
    standard_config,
)


def as_owner(*argv: str, cwd: str | Path = "/") -> str:
    """Run ``argv`` as the daemon's user (memfs); its output (asserts success)."""
    uid, gid = daemon_ids()
    done = run_as(uid, list(argv), gid=gid, cwd=cwd)
    assert done.returncode == 0, (argv, done.stderr.decode())
    return done.stdout.decode()


def bare_repository(path: Path) -> Path:
    """A new empty bare repository at ``path``, the daemon's user's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chown(path.parent, *daemon_ids())
    as_owner("git", "init", "--quiet", "--bare", "--initial-branch=main", str(path))
    return path


def git(repository: Path, *args: str) -> str:
    """Plain git on ``repository`` as its owner; its output."""
    return as_owner("git", "--git-dir", str(repository), *args)


def main_of(repository: Path) -> str | None:
    """The commit ``main`` names in ``repository`` (None: no main)."""
    uid, gid = daemon_ids()
    done = run_as(uid, ["git", "--git-dir", str(repository), "rev-parse", "--verify",
                        "--quiet", "refs/heads/main"], gid=gid)
    return done.stdout.decode().strip() or None


def log_of(repository: Path) -> list[str]:
    """The commits of ``main``, newest first: id, author, subject."""
    return git(repository, "log", "--format=%H %an %s", "main").splitlines()


def fsck(repository: Path) -> None:
    """``git fsck --strict`` is clean."""
    git(repository, "fsck", "--strict")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class GitDaemon:
    """``git daemon`` serving the repositories under ``base`` (push enabled) on
    127.0.0.1:``port``, as the daemon's user; `stop` and `start` again: a remote
    that is down, then back on the same address."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = base / "git-daemon.log"

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def start(self) -> GitDaemon:
        uid, gid = daemon_ids()
        self.proc = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
             "--informative-errors", f"--base-path={self.base}", "--listen=127.0.0.1",
             f"--port={self.port}", str(self.base)],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"),  # noqa: SIM115
            user=uid, group=gid, extra_groups=[], cwd="/")
        deadline = time.monotonic() + scaled(30)
        while time.monotonic() < deadline:  # until it accepts connections
            assert self.proc.poll() is None, self.log.read_text()
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return self
            time.sleep(0.05)
        raise AssertionError("git daemon never listened")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.proc = None

    def __enter__(self) -> GitDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HeldPush:
    """A pre-receive hook in a bare repository that counts pushes and holds every push
    once its pack has arrived (``arrived`` appears) until `release` (``release``
    appears); pushes after that pass at once."""

    def __init__(self, repository: Path) -> None:
        self.arrived = repository / "push-arrived"
        self.released = repository / "push-release"
        self.log = repository / "pushes"
        hook = repository / "hooks" / "pre-receive"
        hook.parent.mkdir(exist_ok=True)
        hook.write_text(f"""#!/bin/sh
cat >/dev/null
echo push >> {self.log}
touch {self.arrived}
i=0
while [ ! -e {self.released} ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i+1)); done
exit 0
""")
        hook.chmod(0o755)
        os.chown(hook, *daemon_ids())

    def pushes(self) -> int:
        """How many pushes the hook has seen."""
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def wait_arrived(self) -> None:
        wait_for(self.arrived.exists, "a push to reach the remote's hook")

    def release(self) -> None:
        self.released.touch()


def wait_for(check: Any, what: str, timeout: float = 120.0) -> Any:
    """Poll ``check()`` until it returns something true; that value. A bound on a wait
    for an event, never a measure of speed."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"waited in vain for {what}")


def mirror_status(socket_path: Path, store: str | None = None,
                  uid: int = UID_A) -> list[dict[str, Any]]:
    """``memfs --json mirror status [STORE]`` as ``uid``: each mirror's status."""
    done = memfs_as(uid, socket_path, "--json", "mirror", "status", *([store] if store else []))
    assert done.returncode == 0, done.stderr.decode()
    mirrors: list[dict[str, Any]] = json.loads(done.stdout)["mirrors"]
    return mirrors


def converged(socket_path: Path, store: str) -> list[dict[str, Any]] | None:
    """The status of every mirror of ``store`` once each is ok with nothing behind."""
    found = mirror_status(socket_path, store)
    done = found and all(m["state"] == "ok" and m["commits_behind"] == 0
                         and not m["pushing"] for m in found)
    return found if done else None


def mirrored(base: Path, *urls: str, **overrides: Any) -> dict[str, Any]:
    """The standard config with ``notes`` mirrored to ``urls``."""
    config = standard_config(base, **overrides)
    config["stores"]["notes"] = {"mirror": list(urls)}
    return config


def local_main(daemon: Daemon) -> str:
    return str(commits(Path(daemon.config["root"]), "notes")[0].id)


def write_many(daemon: Daemon, count: int, prefix: str) -> list[str]:
    """``count`` writes by alice, each acknowledged with its commit; the commit ids."""
    with connect_as(UID_A, daemon.socket) as alice:
        done = [alice.write(f"notes/{prefix}-{i}.md", f"{prefix} {i}\n") for i in range(count)]
    assert all(result["commit"] for result in done)
    return [str(result["commit"]) for result in done]
