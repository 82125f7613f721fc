"""Personal mode end to end as a real unprivileged user made for the test (useradd,
removed after): the one command, ``memfs serve --personal``, run as that user with
nothing but its home; three MCP stdio clients named by ``clientInfo.name`` or
``--agent``: a stale write refused as a conflict, a claim refused as lease_held,
three briefs; the same clients with no name of their own refused, never one shared
agent; the CLI and the mount of that user finding everything by themselves.

``serve`` is the daemon started by the user itself (no privilege anywhere);
``root-started`` runs the very same steps against a daemon that root starts for that
user (``[personal] owner``), which drops to its service user before it serves.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import time
import tomllib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, StdioServerParameters
from mcp_types import Implementation

from memfs.control.client import Client, PermissionDeniedError
from tests.control.mcp.conftest import SETPRIV, call_error, call_ok
from tests.control.mcp.test_mcp_personal import refusal
from tests.support import (
    MEMFS,
    REPO,
    Daemon,
    account,
    dump_toml,
    is_mounted,
    public_tmpdir,
    scaled,
)

NOBODY = 65534
_users = itertools.count()




@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path

    @property
    def env(self) -> dict[str, str]:
        """What a login of this user has (and nothing that names memfs's places)."""
        return {"HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.home / "run"),
                "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8",  # no sbin
                "PYTHONPATH": str(REPO), "USER": self.name}

    def run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(argv, capture_output=True, timeout=scaled(60), user=self.uid,
                              group=self.gid, extra_groups=[], env=self.env, cwd=self.home,
                              **kwargs)

    def memfs(self, *args: str, input: bytes | None = None
              ) -> subprocess.CompletedProcess[bytes]:
        return self.run([*MEMFS, *args], input=input)


@contextlib.contextmanager
def real_user(under: str = "/tmp") -> Iterator[User]:
    """A new local user with a home of its own (in a new folder in ``under``); removed
    (home too) afterwards."""
    name = f"memfs-e2e-{os.getpid() % 100000}-{next(_users)}"
    home = public_tmpdir("memfs-e2e-", under) / "home"
    account(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh",
             "--user-group", name], check=True)
    try:
        entry = pwd.getpwnam(name)
        user = User(name, entry.pw_uid, entry.pw_gid, home)
        (home / "run").mkdir(mode=0o700)
        os.chown(home / "run", user.uid, user.gid)
        yield user
    finally:
        account(["userdel", "--remove", name])
        shutil.rmtree(home, ignore_errors=True)


class UserDaemon:
    """``memfs serve --personal`` run by the user itself."""

    def __init__(self, user: User) -> None:
        self.user = user
        self.socket = user.home / "run" / "memfs" / "control.sock"
        self.mount = user.home / "memory"
        self.root = user.home / ".local" / "share" / "memfs"
        self.log = user.home.parent / "serve.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([*MEMFS, "serve", "--personal"], stdout=log,
                                         stderr=log, user=user.uid, group=user.gid,
                                         extra_groups=[], env=user.env, cwd=REPO)
        deadline = time.monotonic() + scaled(120)
        while not self._ready():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)

    def _ready(self) -> bool:
        if not is_mounted(self.mount):
            return False
        try:
            with Client(str(self.socket)) as client:
                client.whoami()
        except PermissionDeniedError:  # root is not served: it is up
            return True
        except Exception:
            return False
        return True

    def log_text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(scaled(60)) == 0, self.log.read_text()


class RootDaemon:
    """The same personal memory, in the user's places, started by root for it."""

    def __init__(self, user: User) -> None:
        self.socket = user.home / "run" / "memfs" / "control.sock"
        self.mount = user.home / "memory"
        self.root = user.home / ".local" / "share" / "memfs"
        self.socket.parent.mkdir(mode=0o700)
        os.chown(self.socket.parent, user.uid, user.gid)
        config = {"root": str(self.root), "mount": str(self.mount), "socket": str(self.socket),
                  "stores": {"notes": {"structured": True}}, "personal": {"owner": user.uid}}
        self.daemon = Daemon(config, mount=True,
                             config_path=user.home.parent / "personal.toml").start()
        assert "[personal]" in dump_toml(config)

    def stop(self) -> None:
        assert self.daemon.stop() == 0


@pytest.fixture(params=["serve", "root-started"])
def setup(request: pytest.FixtureRequest) -> Iterator[tuple[User, Any]]:
    with real_user() as user:
        daemon = UserDaemon(user) if request.param == "serve" else RootDaemon(user)
        try:
            yield user, daemon
        finally:
            daemon.stop()
        assert not is_mounted(daemon.mount), getattr(daemon, "log_text", lambda: "")()


def mcp_params(user: User, extra: list[str]) -> StdioServerParameters:
    """``memfs mcp`` as the user, finding the personal socket by itself."""
    argv = [SETPRIV, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
            *MEMFS, "mcp", *extra]
    return StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO),
                                 env=user.env)


@contextlib.asynccontextmanager
async def mcp(user: User, name: str | None = None, extra: Mapping[str, str] | None = None,
              *, agent: str | None = None) -> AsyncIterator[McpClient]:
    info = None if name is None else Implementation(name=name, version="1.0")
    params = mcp_params(user, [] if agent is None else ["--agent", agent])
    async with McpClient(params, client_info=info, read_timeout_seconds=scaled(60)) as client:
        yield client


async def test_one_developer_several_agents(setup: tuple[User, Any]) -> None:
    user, daemon = setup
    async with mcp(user, "claude-code") as claude, mcp(user, "Codex CLI") as codex, \
            mcp(user, agent="gemini") as gemini:
        for client, name in ((claude, "claude-code"), (codex, "codex-cli"), (gemini, "gemini")):
            assert f"You are agent {name} in memfs" in (client.instructions or ""), name
        await call_ok(claude, "storage_write", {"path": "notes/plan.md", "content": "A\n"})
        stale = await call_error(codex, "storage_write",
                                 {"path": "notes/plan.md", "content": "blind\n"})
        assert "CONFLICT" in stale and '"claude-code"' in stale, stale
        await call_ok(codex, "task_create", {"task": "fix-login", "title": "Fix the login"})
        await call_ok(codex, "task_claim", {"task": "fix-login"})
        for other in (claude, gemini):
            held = await call_error(other, "task_claim", {"task": "fix-login"})
            assert held.startswith("LEASE HELD") and '"codex-cli"' in held, held
        briefs = [await call_ok(c, "memory_brief", {}) for c in (claude, codex, gemini)]
    assert [b.split(" (", 1)[0] for b in briefs] == [
        "# Brief for claude-code", "# Brief for codex-cli", "# Brief for gemini"]

    # the same clients with no name of their own: refused, each of them
    for _ in range(3):
        with pytest.raises(BaseException) as refused:
            async with mcp(user) as unnamed:
                await unnamed.call_tool("storage_write", {"path": "notes/u.md", "content": "u"})
        assert "did not name itself" in refusal(refused.value)

    # the user's CLI and mount find the personal memory by themselves
    listed = user.memfs("agent", "list")
    assert listed.returncode == 0, listed.stderr
    assert {"claude-code", "codex-cli", "gemini"} <= set(listed.stdout.decode().split())
    assert b"mcp " not in listed.stdout
    cat = user.run(["cat", str(daemon.mount / "gemini" / "notes" / "plan.md")])
    assert cat.stdout == b"A\n", cat.stderr
    wrote = user.memfs("--agent", "gemini", "write", "notes/plan.md", input=b"C\n")
    assert wrote.returncode == 0, wrote.stderr  # gemini read it through its own view
    unnamed = user.memfs("ls")
    assert unnamed.returncode == 4 and b"--agent" in unnamed.stderr
    assert (daemon.root / "state" / "agents.json").exists()


def login_env(user: User) -> dict[str, str]:
    """What the official Python SDK passes a stdio server by default
    (``get_default_environment``: HOME, LOGNAME, PATH, SHELL, TERM, USER), as this
    user's login has them: no XDG_RUNTIME_DIR, no MEMFS_*."""
    values = {"HOME": str(user.home), "LOGNAME": user.name, "USER": user.name,
              "PATH": "/usr/local/bin:/usr/bin:/bin", "SHELL": "/bin/sh", "TERM": "dumb"}
    assert set(values) == set(DEFAULT_INHERITED_ENV_VARS)
    return values


async def test_found_from_the_uid_alone(setup: tuple[User, Any]) -> None:
    """``memfs mcp`` and ``memfs`` find the user's personal daemon (its socket in
    XDG_RUNTIME_DIR) with the SDK's default environment and with none at all."""
    user, daemon = setup
    published = f"/tmp/memfs-{user.uid}/control.sock"
    assert os.readlink(published) == str(daemon.socket)  # a link to it, made at start
    for how, env in (("default", login_env(user)), ("env -i", {})):
        argv = ["env", "-i", *(f"{key}={value}" for key, value in env.items()),
                SETPRIV, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                *MEMFS, "mcp", "--agent", "stripped"]
        params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO))
        async with McpClient(params, read_timeout_seconds=scaled(60)) as client:
            await call_ok(client, "storage_write",
                          {"path": f"notes/{how}.md", "content": f"via {how}\n"})
            text = await call_ok(client, "storage_read", {"path": f"notes/{how}.md"})
            assert f"via {how}" in text, text
        cat = user.run(["env", "-i", *MEMFS, "--agent", "stripped", "cat", f"notes/{how}.md"])
        assert cat.stdout == f"via {how}\n".encode(), cat.stderr


async def test_no_daemon_is_refused_at_initialize_naming_the_places() -> None:
    """Without a daemon, ``memfs mcp`` refuses the client's handshake with every place
    it looked and what to set, instead of failing each tool call later."""
    with real_user() as user:
        argv = ["env", "-i", SETPRIV, f"--reuid={user.uid}", f"--regid={user.gid}",
                "--clear-groups", *MEMFS, "mcp", "--agent", "lonely"]
        params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO))
        for mode in ("legacy", "auto"):
            with pytest.raises(BaseException) as refused:
                async with McpClient(params, read_timeout_seconds=scaled(60),
                                     mode=mode) as client:
                    await client.list_tools()
            text = refusal(refused.value)
            for place in (f"/run/user/{user.uid}/memfs/control.sock",
                          f"/tmp/memfs-{user.uid}/control.sock", "/run/memfs/control.sock",
                          "memfs serve --personal", "MEMFS_SOCKET"):
                assert place in text, (mode, text)
        listed = user.run(["env", "-i", *MEMFS, "--agent", "lonely", "ls"])
        assert listed.returncode == 1 and b"memfs serve --personal" in listed.stderr


def test_a_normal_user_has_memfs_on_its_path() -> None:
    """What scripts/setup does (scripts/link-memfs) puts ``memfs`` on the login PATH of
    a user made with useradd."""
    assert "\nscripts/link-memfs\n" in (REPO / "scripts" / "setup").read_text()
    linked = subprocess.run([str(REPO / "scripts" / "link-memfs")], capture_output=True,
                            text=True, timeout=60, check=False)
    assert linked.returncode == 0, linked.stderr
    with real_user() as user:
        login = subprocess.run(["su", "--login", user.name, "-c",
                                "command -v memfs && memfs --version"],
                               capture_output=True, text=True, timeout=scaled(60),
                               env={"PATH": "/usr/bin:/bin"}, check=False)
    assert login.returncode == 0, login.stderr
    where, shown = login.stdout.splitlines()
    assert where == "/usr/local/bin/memfs" and shown.startswith("memfs 0."), login.stdout


async def test_a_client_config_runs_as_it_is_in_the_sdks_default_environment(
        setup: tuple[User, Any]) -> None:
    """``memfs mcp config codex`` as the user: its command, run by the official SDK's
    stdio client with the SDK's default environment (``env=None``), serves the user's
    personal memory as agent codex."""
    user, daemon = setup
    printed = user.memfs("mcp", "config", "codex")
    assert printed.returncode == 0, printed.stderr
    server = tomllib.loads(printed.stdout.decode())["mcp_servers"]["memfs"]
    assert server["args"] == ["mcp", "--socket", str(daemon.socket), "--agent", "codex"]
    params = StdioServerParameters(
        command=SETPRIV, args=[f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                               server["command"], *server["args"]], env=None)
    async with McpClient(params, read_timeout_seconds=scaled(60)) as client:
        assert "You are agent codex in memfs" in (client.instructions or "")
        await call_ok(client, "storage_write", {"path": "notes/config.md", "content": "ok\n"})
        assert "ok" in await call_ok(client, "storage_read", {"path": "notes/config.md"})
