"""Where personal mode keeps things (memfs/places.py), and the registry of its
agents (memfs/store/access/agents.py), on a real file system."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from memfs import places as personal
from memfs.errors import MemfsError
from memfs.store.access.agents import SEEN_EVERY, AgentRegistry
from memfs.store.errors import InvalidInput, PermissionDenied


def test_places_follow_xdg_and_ignore_relative_values() -> None:
    env = {"XDG_DATA_HOME": "/d", "XDG_RUNTIME_DIR": "/run/user/7"}
    assert personal.places(env, home="/home/u") == {
        "root": "/d/memfs", "mount": "/home/u/memory",
        "socket": "/run/user/7/memfs/control.sock"}
    relative = {"XDG_DATA_HOME": "data", "XDG_RUNTIME_DIR": "run"}
    assert personal.places(relative, home="/home/u") == {
        "root": "/home/u/.local/share/memfs", "mount": "/home/u/memory",
        "socket": f"/tmp/memfs-{os.getuid()}/control.sock"}
    assert personal.socket_path({}, uid=1234) == "/tmp/memfs-1234/control.sock"


def test_private_dir_is_made_ours_and_0700(tmp_path: Path) -> None:
    made = tmp_path / "a" / "memfs"
    personal.private_dir(str(made))
    assert made.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    personal.private_dir(str(loose))
    assert loose.stat().st_mode & 0o777 == 0o700


def test_private_dir_refuses_what_someone_else_made(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 2001, 2001)  # another uid made /tmp/memfs-UID first
    with pytest.raises(personal.NotPrivate, match="is not a directory of uid"):
        personal.private_dir(str(theirs))
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(personal.NotPrivate):
        personal.private_dir(str(link))


def test_the_running_socket_is_found_only_in_a_directory_of_ours(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert personal.running_socket() is None  # none yet
    folder = tmp_path / "memfs"
    personal.private_dir(str(folder))
    path = folder / "control.sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        assert personal.running_socket() == str(path)
        folder.chmod(0o777)  # anyone could have planted it
        assert personal.running_socket() is None
        folder.chmod(0o700)
        os.chown(folder, 2001, 2001)
        assert personal.running_socket() is None


def test_candidates_in_order_without_repeats() -> None:
    env = {"MEMFS_SOCKET": "/s/env.sock", "XDG_RUNTIME_DIR": "/run/user/7"}
    assert personal.candidates("/s/given.sock", env, uid=7) == [
        "/s/given.sock", "/s/env.sock", "/run/user/7/memfs/control.sock",
        "/tmp/memfs-7/control.sock", "/run/memfs/control.sock"]
    assert personal.candidates(None, {}, uid=8) == [
        "/run/user/8/memfs/control.sock", "/tmp/memfs-8/control.sock",
        "/run/memfs/control.sock"]


def test_the_given_socket_and_memfs_socket_always_win() -> None:
    env = {"MEMFS_SOCKET": "/nowhere/env.sock"}
    assert personal.find_socket("/nowhere/given.sock", env) == "/nowhere/given.sock"
    assert personal.find_socket(None, env) == "/nowhere/env.sock"


def test_no_daemon_names_every_place_and_what_to_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uid = 40000 + os.getpid() % 10000  # nobody's: no place of it exists
    system = tmp_path / "system.sock"
    monkeypatch.setattr(personal, "SYSTEM_SOCKET", str(system))
    with pytest.raises(personal.NoDaemon) as caught:
        personal.find_socket(None, {"XDG_RUNTIME_DIR": str(tmp_path)}, uid=uid)
    message = str(caught.value)
    for place in (f"{tmp_path}/memfs/control.sock", f"/run/user/{uid}/memfs/control.sock",
                  f"/tmp/memfs-{uid}/control.sock", str(system),
                  "memfs serve --personal", "MEMFS_SOCKET"):
        assert place in message
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(system))  # the system daemon's: anyone's to try
        assert personal.find_socket(None, {}, uid=uid) == str(system)


def test_a_published_socket_is_found_from_the_uid_alone(tmp_path: Path) -> None:
    """The daemon's socket in XDG_RUNTIME_DIR, published by a symlink in
    /tmp/memfs-UID: found with no environment at all; the link goes with the daemon,
    unless another daemon published its own meanwhile."""
    uid = os.getuid()
    private = f"/tmp/memfs-{uid}"
    existed = os.path.exists(private)
    folder = tmp_path / "memfs"
    personal.private_dir(str(folder))
    path = str(folder / "control.sock")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(path)
        listening.listen()
        links = personal.publish(path)
        try:
            assert f"{private}/control.sock" in links
            assert os.readlink(f"{private}/control.sock") == path
            assert personal.find_socket(None, {}) == f"{private}/control.sock"
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(personal.find_socket(None, {}))  # the link leads there
            os.chmod(private, 0o777)  # anyone could have planted it: not ours
            assert not personal.is_ours(f"{private}/control.sock")
            os.chmod(private, 0o700)
        finally:
            personal.unpublish(links, path)
        assert not os.path.lexists(f"{private}/control.sock")
        links = personal.publish(path)
        os.symlink("/elsewhere.sock", f"{private}/new")
        os.replace(f"{private}/new", f"{private}/control.sock")  # a later daemon's
        personal.unpublish(links, path)
        assert os.readlink(f"{private}/control.sock") == "/elsewhere.sock"
        os.unlink(f"{private}/control.sock")
    if not existed:
        os.rmdir(private)


def registry(tmp_path: Path, owner: int = 1000) -> AgentRegistry:
    return AgentRegistry(tmp_path, owner)


def test_a_name_is_registered_on_first_use_and_kept(tmp_path: Path) -> None:
    agents = registry(tmp_path)
    assert "claude" not in agents and len(agents) == 0
    record = agents.use("claude", now=100.0)
    assert (record.name, record.uid, record.first_seen, record.last_seen) == \
        ("claude", 1000, 100.0, 100.0)
    assert "claude" in agents and list(agents) == ["claude"]
    assert "claude" in registry(tmp_path)  # on disk, for the next daemon
    data = json.loads((tmp_path / "agents.json").read_text())
    assert data == {"agents": {"claude": {"uid": 1000, "first_seen": 100.0,
                                          "last_seen": 100.0}}}
    assert (tmp_path / "agents.json").stat().st_mode & 0o777 == 0o600


def test_last_seen_is_written_at_most_every_minute(tmp_path: Path) -> None:
    agents = registry(tmp_path)
    agents.use("codex", now=100.0)
    agents.use("codex", now=100.0 + SEEN_EVERY - 1)
    assert registry(tmp_path).list()[0].last_seen == 100.0
    agents.use("codex", now=100.0 + SEEN_EVERY)
    (record,) = registry(tmp_path).list()
    assert (record.first_seen, record.last_seen) == (100.0, 100.0 + SEEN_EVERY)


def test_a_name_never_changes_hands(tmp_path: Path) -> None:
    registry(tmp_path, owner=1000).use("claude", now=1.0)
    with pytest.raises(PermissionDenied, match="registered by uid 1000, not by uid 1001"):
        registry(tmp_path, owner=1001).use("claude", now=2.0)
    registry(tmp_path, owner=1001).use("claude2", now=2.0)
    assert [r.uid for r in registry(tmp_path).list()] == [1000, 1001]


@pytest.mark.parametrize("name", ["", "a b", "-x", "x" * 65, "claude\n", "é"])
def test_an_invalid_name_is_never_registered(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInput, match="bad agent name"):
        registry(tmp_path).use(name)
    assert not (tmp_path / "agents.json").exists()


def test_a_malformed_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "agents.json").write_text("{not json")
    agents = registry(tmp_path)
    assert "claude" not in agents
    with pytest.raises(MemfsError, match="malformed"):
        agents.use("claude")
    assert (tmp_path / "agents.json").read_text() == "{not json"


def test_a_name_is_lowercase_or_refused_with_the_folded_hint(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"are lowercase .*: use 'claude'"):
        registry(tmp_path).use("Claude")
    assert not (tmp_path / "agents.json").exists()


def test_rename_and_retire_are_kept_on_disk(tmp_path: Path) -> None:
    agents = registry(tmp_path)
    agents.use("old", now=1.0)
    agents.rename("old", "new", now=5.0)
    data = json.loads((tmp_path / "agents.json").read_text())["agents"]
    assert data["new"] == {"uid": 1000, "first_seen": 1.0, "last_seen": 5.0}
    assert data["old"]["state"] == "renamed" and data["old"]["renamed_to"] == "new"
    with pytest.raises(PermissionDenied, match="renamed to 'new'"):
        registry(tmp_path).use("old")  # another daemon's registry sees it too
    with pytest.raises(PermissionDenied, match="renamed to 'new'"):
        agents.use("old")
    with pytest.raises(InvalidInput, match="exists already"):
        agents.rename("new", "old")
    agents.retire("new", now=6.0)
    assert list(agents) == [] and "new" in agents and "old" in agents  # known, not listed
    with pytest.raises(PermissionDenied, match="retire new --undo"):
        registry(tmp_path).use("new")
    with pytest.raises(InvalidInput, match="is retired, not active"):
        agents.retire("new")
    agents.retire("new", undo=True)
    assert registry(tmp_path).use("new", now=100.0).state == "active"
    assert "state" not in json.loads((tmp_path / "agents.json").read_text())["agents"]["new"]
