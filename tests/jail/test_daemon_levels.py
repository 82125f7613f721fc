"""The daemon on every kernel: it starts at the level the kernel allows and logs it;
without Landlock or seccomp, or (started unprivileged) without user namespaces, it
serves everything but search and sed edits, which are refused as ``unavailable``,
saying what to enable. The kernel's lacks are simulated (``jail.kernel``'s
MEMFS_JAIL_SIMULATE_* settings); everything else is real: ``memfs serve``, the socket,
HTTP, rg and sed."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from memfs.control.client import Client, MemfsClientError
from memfs.jail import kernel
from memfs.jail.settings import service_ids
from tests.support import (
    REPO,
    UID_A,
    Daemon,
    connect_as,
    public_tmpdir,
    run_as,
    standard_config,
)

REAL_ABI = kernel.landlock_abi()


def _search_and_edit(client: Client) -> None:
    client.write("notes/levels.md", "alpha\n")
    found = client.search(["-n", "alpha", "notes"])
    assert found["output"] == "notes/levels.md:1:alpha\n", found
    client.edit("notes/levels.md", ["s/alpha/beta/"])
    assert client.read_bytes("notes/levels.md")[0] == b"beta\n"


@pytest.mark.parametrize("abi", [1, 2, 4, 6, 7])
def test_the_daemon_runs_at_each_level_and_says_which(abi: int) -> None:
    if abi > REAL_ABI:
        pytest.skip(f"this kernel has Landlock ABI {REAL_ABI}, below {abi}")
    config = standard_config(public_tmpdir("memfs-levels-"))
    with Daemon(config, env={kernel.SIMULATE_ABI: str(abi)}) as daemon, \
            connect_as(UID_A, daemon.socket) as alice:
        _search_and_edit(alice)
        lines = [line for line in daemon.log().splitlines() if "jail: Landlock ABI" in line]
        assert len(lines) == 1, daemon.log()
        assert f"jail: Landlock ABI {abi}" in lines[0]
        assert ("PID namespace" in lines[0]) == (abi < kernel.SCOPES_ABI), lines[0]


LACKS = {
    "no Landlock": ({kernel.SIMULATE_ABI: "0"}, "Landlock", "lsm="),
    "no seccomp": ({kernel.SIMULATE_NO_SECCOMP: "1"}, "seccomp", "CONFIG_SECCOMP_FILTER"),
}


def _refused(call: Any, what: str, hint: str) -> None:
    with pytest.raises(MemfsClientError) as refused:
        call()
    assert refused.value.code == "unavailable", refused.value
    assert what in refused.value.message and hint in refused.value.message


@pytest.mark.parametrize("lack", list(LACKS))
def test_without_landlock_or_seccomp_all_else_serves(lack: str) -> None:
    env, what, hint = LACKS[lack]
    config = standard_config(public_tmpdir("memfs-lacks-"), http={"listen": "127.0.0.1:0"},
                             stores={"notes": {"structured": True}, "ops": {}})
    with Daemon(config, env=env, mount=True) as daemon, \
            connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/a.md", "alpha\n")  # writes, reads, history, memory serve
        alice.write("notes/a.md", "gamma\n", append=True)
        assert alice.read_bytes("notes/a.md")[0] == b"alpha\ngamma\n"
        assert len(alice.call("log", path="notes/a.md")["entries"]) == 2
        alice.call("session_start", store="notes", goal="survive a small kernel")
        alice.recall("alpha")  # answers (the index may still be catching up)
        through_mount = run_as(UID_A, ["cat", str(daemon.mountpoint / "notes" / "a.md")])
        assert through_mount.stdout == b"alpha\ngamma\n", through_mount.stderr
        _refused(lambda: alice.search(["alpha"]), what, hint)
        _refused(lambda: alice.edit("notes/a.md", ["s/alpha/beta/"]), what, hint)
        assert alice.read_bytes("notes/a.md")[0] == b"alpha\ngamma\n"  # nothing changed
        # HTTP: the same refusal, as its own status
        token = daemon.token("alice")
        request = urllib.request.Request(f"{daemon.http_url}/v1/search?pattern=alpha",
                                         headers={"Authorization": f"Bearer {token}"})
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(request, timeout=30)
        assert answered.value.code == 501
        problem = json.loads(answered.value.read())
        assert problem["code"] == "unavailable" and hint in problem["detail"]
        assert "search and sed edits are unavailable: this kernel lacks" in daemon.log()
        assert "jail: Landlock ABI" not in daemon.log()


def test_without_unprivileged_user_namespaces_the_system_service_still_jails() -> None:
    """Started as root, the daemon makes the jail's namespaces before it gives up root:
    search and sed edits work where unprivileged user namespaces are refused."""
    config = standard_config(public_tmpdir("memfs-no-userns-"))
    env = {kernel.SIMULATE_NO_USERNS: "1", kernel.SIMULATE_ABI: "2"}  # Debian 12's
    with Daemon(config, env=env) as daemon, connect_as(UID_A, daemon.socket) as alice:
        _search_and_edit(alice)
        assert "jail: Landlock ABI 2" in daemon.log()


def test_without_unprivileged_user_namespaces_a_personal_memfs_says_what_to_enable(
) -> None:
    """Started by its user (no root at all), a personal memfs serves but search and sed
    edits, which say the one setting to change."""
    uid, gid = service_ids()
    base = public_tmpdir("memfs-personal-no-userns-")
    os.chown(base, uid, gid)
    config: dict[str, Any] = {
        "root": str(base / "root"), "mount": str(base / "memory"),
        "socket": str(base / "control.sock"), "stores": {"notes": {}},
        "personal": {"owner": uid},
    }
    user = pwd.getpwuid(uid).pw_name
    with Daemon(config, env={kernel.SIMULATE_NO_USERNS: "1"}, user=user) as daemon, \
            connect_as(uid, daemon.socket, as_agent="claude") as agent:
        agent.write("notes/a.md", "alpha\n")
        for call in (lambda: agent.search(["alpha"]),
                     lambda: agent.edit("notes/a.md", ["s/alpha/beta/"])):
            _refused(call, "user namespaces", "kernel.unprivileged_userns_clone=1")
        with pytest.raises(MemfsClientError) as refused:
            agent.search(["alpha"])
        assert "apparmor" in refused.value.message.lower()
        assert agent.read_bytes("notes/a.md")[0] == b"alpha\n"
        # it built the sed root all the same, unchecked (no chroot without namespaces)
        assert "build-sed-jail: not checked" in daemon.log()


def test_install_writes_an_apparmor_profile_allowing_user_namespaces(tmp_path: Path) -> None:
    """Ubuntu >= 23.10 restricts unprivileged user namespaces with AppArmor: the one
    command docs/operate/kernels.md gives writes a profile allowing them to the memfs
    binary alone."""
    done = subprocess.run([str(REPO / "scripts" / "install"), "--apparmor-only",
                           "--apparmordir", str(tmp_path), "--prefix", "/opt/memfs-x"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    profile = (tmp_path / "memfs").read_text()
    assert "profile memfs /opt/memfs-x/bin/memfs flags=(unconfined) {" in profile
    assert "\n  userns,\n" in profile
    doc = (REPO / "docs" / "operate" / "kernels.md").read_text()
    assert "sudo scripts/install --apparmor" in doc


def test_docs_kernels_carries_the_table_of_jail_kernel() -> None:
    """docs/operate/kernels.md's table is jail/kernel.py's FEATURES, row for row."""
    doc = (REPO / "docs" / "operate" / "kernels.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| ")]
    for feature in kernel.FEATURES:
        assert (f"| {feature.name} | {feature.since} | {feature.gives} | {feature.instead} |"
                in rows), feature.name
    assert "(docs/operate/kernels.md)" in (REPO / "README.md").read_text()


async def test_without_landlock_mcp_tells_the_model_what_is_unavailable() -> None:
    """Over MCP (stdio, `memfs mcp` as the agent's uid): a search is refused in the
    words of memfs/errors.py's `unavailable` row; a write works."""
    from tests.control.mcp.conftest import call_error, call_ok, mcp_session

    config = standard_config(public_tmpdir("memfs-lacks-mcp-"))
    with Daemon(config, env={kernel.SIMULATE_ABI: "0"}) as daemon:
        async with mcp_session(daemon.socket, uid=UID_A) as client:
            await call_ok(client, "storage_write", {"path": "notes/m.md", "content": "alpha\n"})
            text = await call_error(client, "storage_search", {"pattern": "alpha"})
            assert text.startswith("Unavailable here: ") and "lsm=" in text, text
