"""Personal mode on the real socket: one uid (the owner) runs several agents, each
named on every call, each with its own seen records, leases, sessions and history
author (memfs/store/access/agents.py, Engine.agent_for). The daemon runs as root here with
the owner a test uid; tests/daemon/test_personal_user.py runs the whole thing as a real
unprivileged user."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs.control.client import (
    Client,
    ConflictError,
    InvalidError,
    NotFoundError,
    PermissionDeniedError,
)
from tests.store.history.gitcheck import commits, trailers
from tests.support import (
    MEMFS,
    REPO,
    UID_A,
    UID_B,
    Daemon,
    connect_as,
    memfs_as,
    named,
    public_tmpdir,
    run_as,
    scaled,
    standard_config,
)


def personal_config(base: Path, owner: int = UID_A, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "root": str(base / "root"), "mount": str(base / "memory"),
        "socket": str(base / "control.sock"),
        "stores": {"notes": {"structured": True}}, "personal": {"owner": named(owner)},
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(personal_config(public_tmpdir("memfs-personal-"))) as running:
        yield running


@pytest.fixture
def root(daemon: Daemon) -> Path:
    return Path(daemon.config["root"])


def agent(daemon: Daemon, name: str) -> Client:
    return connect_as(UID_A, daemon.socket, as_agent=name)


def test_a_call_that_names_no_agent_is_refused_saying_what_to_add(daemon: Daemon) -> None:
    done = memfs_as(UID_A, daemon.socket, "ls")
    assert done.returncode == 4, done
    message = done.stderr.decode()
    assert "memfs --agent claude" in message and "MEMFS_AGENT" in message, message
    with connect_as(UID_A, daemon.socket) as client, pytest.raises(PermissionDeniedError) as e:
        client.whoami()
    assert e.value.details == {"agent_required": True}


def test_the_agent_is_named_by_option_or_environment(daemon: Daemon) -> None:
    by_option = memfs_as(UID_A, daemon.socket, "--agent", "namer", "--json", "ls")
    assert by_option.returncode == 0, by_option.stderr
    by_env = run_as(UID_A, [*MEMFS, "--socket", str(daemon.socket), "stat", "notes/none.md"],
                    env={"MEMFS_AGENT": "namer-env"})
    assert by_env.returncode == 5, by_env.stderr  # not found: it ran as an agent
    with agent(daemon, "namer-env") as client:
        assert client.whoami() == {"agent": "namer-env", "stores": {"notes": "read_write"}}
    both = memfs_as(UID_A, daemon.socket, "--as", "one", "--agent", "two", "ls")
    assert both.returncode == 2 and b"name two agents" in both.stderr


def test_no_other_uid_is_served(daemon: Daemon) -> None:
    for uid in (UID_B, 0):
        done = memfs_as(uid, daemon.socket, "--agent", "claude", "ls")
        assert done.returncode == 4, done
        assert f"uid {uid} is not mapped to any agent".encode() in done.stderr
    done = memfs_as(UID_B, daemon.socket, "agent", "list")
    assert done.returncode == 4


@pytest.mark.parametrize("name", ["bad name", "-dash", "x" * 65, "claude\n", "café", ""])
def test_an_invalid_name_is_refused_and_registers_nothing(daemon: Daemon, root: Path,
                                                          name: str) -> None:
    with agent(daemon, name) as client, pytest.raises((InvalidError, PermissionDeniedError)) as e:
        client.list()
    assert "agent" in e.value.message
    registered = json.loads((root / "state" / "agents.json").read_text())["agents"] \
        if (root / "state" / "agents.json").exists() else {}
    assert name not in registered


def test_agents_are_registered_on_first_use_and_listed(daemon: Daemon, root: Path) -> None:
    before = time.time()
    for name in ("lister-a", "lister-b"):
        with agent(daemon, name) as client:
            client.list()
    done = memfs_as(UID_A, daemon.socket, "--json", "agent", "list")
    assert done.returncode == 0, done.stderr
    listed = {a["agent"]: a for a in json.loads(done.stdout)["agents"]}
    for name in ("lister-a", "lister-b"):
        assert before - 1 <= listed[name]["first_seen"] <= listed[name]["last_seen"] <= \
            time.time() + 1
    on_disk = json.loads((root / "state" / "agents.json").read_text())["agents"]
    assert on_disk["lister-a"]["uid"] == UID_A
    assert (root / "state" / "agents.json").stat().st_mode & 0o777 == 0o600
    table = memfs_as(UID_A, daemon.socket, "agent", "list")
    assert table.returncode == 0 and b"FIRST SEEN" in table.stdout and b"lister-b" in table.stdout


def test_each_agent_has_its_own_seen_records_and_history_author(daemon: Daemon,
                                                                root: Path) -> None:
    with agent(daemon, "claude") as claude, agent(daemon, "codex") as codex:
        claude.write("notes/plan.md", "v1 by claude\n")
        with pytest.raises(ConflictError) as refused:  # codex never read it
            codex.write("notes/plan.md", "blind by codex\n")
        assert refused.value.details["last_writer"] == "claude"
        codex.read("notes/plan.md")
        codex.write("notes/plan.md", "v2 by codex\n")
        with pytest.raises(ConflictError):  # claude's copy is stale now
            claude.write("notes/plan.md", "v3 by claude\n")
        assert claude.read("notes/plan.md")["changed_since_last_read"]
    newest = commits(root, "notes")[:2]
    assert [c.author.name for c in newest] == ["codex", "claude"]
    # naming the agent is who one is, not delegation: no delegate trailer
    assert all("Memfs-Delegate" not in trailers(c) for c in newest)


def test_a_lease_of_one_agent_blocks_another_and_a_forced_release_says_so(
        daemon: Daemon, root: Path) -> None:
    def cli(name: str, *args: str) -> Any:
        return memfs_as(UID_A, daemon.socket, "--agent", name, "task", *args)

    assert cli("claude", "add", "fix-login", "--title", "Fix the login").returncode == 0
    assert cli("claude", "claim", "fix-login").returncode == 0
    held = cli("codex", "claim", "fix-login")
    assert held.returncode == 3 and b"lease held" in held.stderr, held
    assert b'"claude"' in held.stderr
    released = cli("codex", "release", "fix-login", "--force")
    assert released.returncode == 0, released.stderr
    newest = commits(root, "notes")[0]
    assert newest.message.splitlines()[0] == \
        "task: claude's lease of fix-login released by codex, forced"
    assert newest.author.name == "codex"
    assert trailers(newest).get("Memfs-Forced") == "yes"
    assert "Memfs-Delegate" not in trailers(newest)
    log = memfs_as(UID_A, daemon.socket, "--agent", "codex", "log", "notes", "-n", "1")
    assert b"(forced)" in log.stdout and b"via uid" not in log.stdout


def test_each_agent_gets_its_own_brief(daemon: Daemon) -> None:
    with agent(daemon, "brief-a") as one, agent(daemon, "brief-b") as other:
        session = one.call("session_start", goal="map the retry queue")["id"]
        one.call("session_handoff", session=session, summary="mapped it",
                 next="drain the retry queue")
        other.write("notes/brief-b.md", "b\n")
        mine = one.call("brief")["markdown"]
        theirs = other.call("brief")["markdown"]
    assert mine.startswith("# Brief for brief-a") and theirs.startswith("# Brief for brief-b")
    assert "from your last handoff" in mine and "drain the retry queue" in mine
    assert "from your last handoff" not in theirs  # brief-a's handoff is not brief-b's


def test_a_name_never_changes_hands(tmp_path: Path) -> None:
    """A root whose agents one uid registered, served later for another owner (the
    operator gave it to that user: chown -R): the names stay that uid's; new names are
    the new owner's."""
    base = public_tmpdir()
    with Daemon(personal_config(base, owner=UID_A)) as first, \
            connect_as(UID_A, first.socket, as_agent="claude") as client:
        client.list()
    subprocess.run(["chown", "-R", f"{named(UID_B)}:{UID_B}", str(base / "root")], check=True)
    with Daemon(personal_config(base, owner=UID_B)) as second:
        with connect_as(UID_B, second.socket, as_agent="claude") as client, \
                pytest.raises(PermissionDeniedError) as refused:
            client.list()
        assert f"registered by uid {UID_A}" in refused.value.message
        with connect_as(UID_B, second.socket, as_agent="claude2") as client:
            assert client.list() == []


def test_tokens_work_for_personal_agents(daemon: Daemon) -> None:
    """The owner makes HTTP tokens for its agents (a new name is registered); a
    delegate-only command is the owner's in personal mode, nobody else's."""
    made = memfs_as(UID_A, daemon.socket, "token", "create", "http-agent")
    assert made.returncode == 0, made.stderr
    listed = memfs_as(UID_A, daemon.socket, "--json", "agent", "list")
    assert "http-agent" in {a["agent"] for a in json.loads(listed.stdout)["agents"]}
    assert memfs_as(UID_B, daemon.socket, "token", "create", "other").returncode == 4


def test_a_personal_agents_token_acts_as_that_agent_over_http() -> None:
    import httpx

    base = public_tmpdir()
    with Daemon(personal_config(base, http={"listen": "127.0.0.1:0"})) as running:
        made = memfs_as(UID_A, running.socket, "token", "create", "webby")
        assert made.returncode == 0, made.stderr
        token = made.stdout.decode().strip()
        headers = {"Authorization": f"Bearer {token}"}
        url = running.http_url
        put = httpx.put(f"{url}/v1/stores/notes/files/web.md", content=b"over http\n",
                        headers=headers, timeout=scaled(60))
        assert put.status_code == 201, put.text
        assert httpx.get(f"{url}/v1/whoami", headers=headers,
                         timeout=scaled(60)).json()["agent"] == "webby"
        with connect_as(UID_A, running.socket, as_agent="cli-agent") as client:
            with pytest.raises(ConflictError) as refused:  # another agent: never read it
                client.write("notes/web.md", "blind\n")
            assert refused.value.details["last_writer"] == "webby"


def test_config_rules_of_personal_mode(tmp_path: Path) -> None:
    from memfs.config import ConfigError, parse_config

    base = {"root": "/srv/m", "personal": {}}
    for extra, message in (({"agents": {"a": {"uid": 5}}}, "registered on first use"),
                           ({"delegates": [0]}, "acts for its own agents")):
        with pytest.raises(ConfigError, match=message):
            parse_config({**base, **extra})


def test_the_one_command_is_refused_to_root_saying_how() -> None:
    """`memfs serve --personal` run by root (then its owner) is refused, saying to run
    it as the user whose agents it serves, and makes nothing in the home; the one
    command as a normal user is tests/daemon/test_personal_user.py."""
    base = public_tmpdir()
    home, run = base / "home", base / "run"
    home.mkdir()
    run.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(run)}
    env.pop("XDG_DATA_HOME", None)
    env.pop("MEMFS_SOCKET", None)
    done = subprocess.run([*MEMFS, "serve", "--personal"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 1, done.stderr
    assert "run `memfs serve --personal` as that user" in done.stderr, done.stderr
    assert os.listdir(home) == [] and not list(run.rglob("*.sock"))


def test_hostile_rg_flags_and_sed_scripts_are_refused_in_personal_mode_too(
        daemon: Daemon) -> None:
    """The jail's argument checks hold for a named agent of the owner's uid: every rg
    flag and sed script the jail suites refuse (commands that run programs, read or
    write files, follow links) is `invalid` here too (a path into a store there is not:
    `not_found`), and the note is unchanged."""
    from tests.jail.test_rg_args import REFUSED as RG_REFUSED
    from tests.jail.test_sed_scripts import PRECHECKED

    with connect_as(UID_A, daemon.socket, as_agent="hostile") as client:
        client.write("notes/target.md", "alpha\n")
        for scripts, _ in PRECHECKED:
            with pytest.raises(InvalidError):
                client.edit("notes/target.md", scripts)
        for args, _ in RG_REFUSED:
            no_store = any(arg == "C" or arg.startswith("/memory/C/") for arg in args)
            with pytest.raises(NotFoundError if no_store else InvalidError):
                client.search(args)
        for outside in ("/etc/passwd", "../../state", "notes/../../state/seen"):
            with pytest.raises((InvalidError, PermissionDeniedError)):
                client.search(["root", outside])
        assert client.read("notes/target.md")["text"] == "alpha\n"


def test_an_agent_name_is_lowercase_on_every_way_in(daemon: Daemon, root: Path) -> None:
    """``Claude`` is never a second agent beside ``claude``: refused with the folded
    name as the hint by the CLI, ``memfs mcp --agent`` and ``memfs token create``."""
    hint = b"agent names are lowercase (one spelling, one agent): use 'case-folded'"
    cli = memfs_as(UID_A, daemon.socket, "--agent", "Case-Folded", "ls")
    assert cli.returncode == 2 and hint in cli.stderr, cli
    token = memfs_as(UID_A, daemon.socket, "token", "create", "Case-Folded")
    assert token.returncode == 2 and hint in token.stderr, token
    mcp = run_as(UID_A, [*MEMFS, "--socket", str(daemon.socket), "mcp", "--agent",
                         "Case-Folded"], input=b"")
    assert mcp.returncode != 0 and hint in mcp.stderr, mcp
    registered = json.loads((root / "state" / "agents.json").read_text())["agents"] \
        if (root / "state" / "agents.json").exists() else {}
    assert not any(name.lower() == "case-folded" for name in registered)


def test_an_agent_renamed_keeps_its_seen_records_and_leases_and_its_history(
        daemon: Daemon, root: Path) -> None:
    def cli(*args: str) -> Any:
        return memfs_as(UID_A, daemon.socket, *args)

    with agent(daemon, "ren-old") as old:
        old.write("notes/ren.md", "by the old name\n")
        old.call("task_add", task="ren-task", title="Renamed midway")
        old.call("task_claim", task="ren-task")
    renamed = cli("agent", "rename", "ren-old", "ren-new")
    assert renamed.returncode == 0, renamed.stderr
    assert b"renamed agent ren-old to ren-new" in renamed.stdout
    assert b"lease of notes/ren-task moved" in renamed.stdout
    newest = commits(root, "notes")[0]
    assert newest.message.splitlines()[0] == \
        "task: ren-old's lease of ren-task now ren-new's: agent ren-old renamed"
    assert newest.author.name == "ren-new"
    with agent(daemon, "ren-old") as old, pytest.raises(PermissionDeniedError) as refused:
        old.list()
    assert "renamed to 'ren-new'" in refused.value.message
    with agent(daemon, "ren-new") as new:
        new.write("notes/ren.md", "by the new name\n")  # it read it (as ren-old): no conflict
        assert new.call("task_show", task="ren-task")["lease"]["agent"] == "ren-new"
        new.call("task_complete", task="ren-task")  # its lease: it holds the task
    authors = [c.author.name for c in commits(root, "notes")[:5]]
    assert authors[:3] == ["ren-new", "ren-new", "ren-new"] and "ren-old" in authors[3:]
    listed = cli("agent", "list")
    assert re.search(rb"ren-old +renamed to ren-new ", listed.stdout), listed.stdout
    assert re.search(rb"ren-new +active ", listed.stdout), listed.stdout
    for again in (("ren-old", "x-other"), ("ren-new", "ren-old"), ("ren-new", "Ren-Next")):
        refused_cli = cli("agent", "rename", *again)
        assert refused_cli.returncode == 2, (again, refused_cli)
    missing = cli("agent", "rename", "never-seen", "x")
    assert missing.returncode == 5 and b"no agent named 'never-seen'" in missing.stderr


def test_an_agent_retired_loses_its_leases_and_its_name_until_undone(
        daemon: Daemon, root: Path) -> None:
    def cli(*args: str) -> Any:
        return memfs_as(UID_A, daemon.socket, *args)

    with agent(daemon, "ret-a") as leaving:
        leaving.call("task_add", task="ret-task", title="Left behind")
        leaving.call("task_claim", task="ret-task")
    retired = cli("agent", "retire", "ret-a")
    assert retired.returncode == 0, retired.stderr
    assert b"lease of notes/ret-task released" in retired.stdout
    newest = commits(root, "notes")[0]
    assert newest.message.splitlines()[0] == \
        "task: ret-a's lease of ret-task released: agent ret-a retired"
    assert trailers(newest).get("Memfs-Forced") == "yes"
    with agent(daemon, "ret-b") as other:
        assert other.call("task_show", task="ret-task")["status"] == "open"
        other.call("task_claim", task="ret-task")  # free for anyone
    for way in (("--agent", "ret-a", "ls"), ("token", "create", "ret-a")):
        refused = cli(*way)
        assert refused.returncode == 4 and b"memfs agent retire ret-a --undo" in \
            refused.stderr, (way, refused)
    assert re.search(rb"ret-a +retired ", cli("agent", "list").stdout)
    assert cli("agent", "retire", "ret-a").returncode == 2  # retired already
    undone = cli("agent", "retire", "ret-a", "--undo")
    assert undone.returncode == 0 and b"agent ret-a is active again" in undone.stdout
    with agent(daemon, "ret-a") as back:
        back.list()
    assert re.search(rb"ret-a +active ", cli("agent", "list").stdout)


def test_agents_of_a_config_are_renamed_in_the_config() -> None:
    with Daemon(standard_config(public_tmpdir("memfs-configured-"))) as running:
        for args in (("rename", "alice", "alicia"), ("retire", "alice")):
            done = run_as(0, [*MEMFS, "--socket", str(running.socket), "agent", *args])
            assert done.returncode == 2 and b"configured" in done.stderr, done
