"""The index is never the source of truth, with a real daemon: it is caught up at start
with what changed while no daemon ran (an operator's edits in the backing directory,
a daemon killed before it indexed an acknowledged change); a missing, truncated or
garbage index is rebuilt from the files and never stops the daemon (also one removed
under a running daemon); a daemon sharing the root finds another daemon's changes; the
index is private state (mode 0600 files in 0700 folders, the serving user's)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from memfs.control.client import BusyError, Client, InvalidError
from tests.support import (
    UID_A,
    Daemon,
    connect_as,
    daemon_ids,
    plant,
    scaled,
    standard_config,
)


def found(client: Client, query: str, **fields: Any) -> list[str]:
    return [hit["path"] for hit in client.recall(query, limit=100, **fields)["hits"]]


def caught_up(daemon: Daemon, query: str, uid: int = UID_A) -> list[str]:
    """The paths a recall finds once no store is being caught up any more (a daemon
    just started indexes in the background; waiting on its report, not on time). A
    recall that found the changes before it still unindexed after its own wait (busy,
    as under emulation, embedding a few notes) is asked again, within the same time."""
    deadline = time.monotonic() + scaled(60)
    with connect_as(uid, daemon.socket) as client:
        while True:
            try:
                result = client.recall(query, limit=100)
            except BusyError:
                assert time.monotonic() < deadline, f"still busy:\n{daemon.log()}"
                continue
            if not result["indexing"]:
                return [hit["path"] for hit in result["hits"]]
            assert time.monotonic() < deadline, f"still indexing:\n{daemon.log()}"
            time.sleep(0.05)


def index_of(config: dict[str, Any], slot: int = 0) -> Path:
    return Path(config["root"]) / "state" / "recall" / str(slot) / "index"


def test_caught_up_at_start_with_what_changed_meanwhile(config: dict[str, Any]) -> None:
    store = Path(config["root"]) / "stores" / "notes"
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/kept.md", "a narwhal note\n")
        alice.write("notes/gone.md", "a narwhal to delete\n")
        alice.write("notes/edited.md", "a narwhal to edit\n")
    plant(store / "planted" / "new.md", "a narwhal the operator planted\n")
    (store / "gone.md").unlink()
    plant(store / "edited.md", "now about a quokka\n")
    with Daemon(config) as daemon:
        assert sorted(caught_up(daemon, "narwhal")) == ["notes/kept.md",
                                                        "notes/planted/new.md"]
        assert caught_up(daemon, "quokka") == ["notes/edited.md"]
        assert "recall: store notes caught up: 3 files" in daemon.log()


def test_an_acknowledged_change_survives_kill_9(config: dict[str, Any]) -> None:
    daemon = Daemon(config).start()
    try:
        with connect_as(UID_A, daemon.socket) as alice:
            for n in range(20):
                alice.write(f"notes/crash/{n}.md", f"axolotl number {n}\n")
        daemon.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        daemon.proc.wait()  # type: ignore[union-attr]
        daemon.start()
        assert len(caught_up(daemon, "axolotl")) == 20
    finally:
        if daemon.alive():
            daemon.stop()


def settled(directory: Path) -> None:
    """Wait until the index's files have not changed for a second: a merge of its
    segments in the background is over (a truncation while one reads them is the
    limit docs/reference/limits.md states: it may end the process)."""
    def listing() -> set[tuple[str, int]]:
        found = set()
        for entry in os.scandir(directory):
            with contextlib.suppress(FileNotFoundError):  # removed by a merge meanwhile
                found.add((entry.name, entry.stat().st_size))
        return found

    deadline = time.monotonic() + scaled(30)
    before = listing()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = listing()
        if now == before:
            return
        before = now


def _truncate(directory: Path) -> None:
    settled(directory)
    for path in directory.iterdir():
        if path.is_file():
            os.truncate(path, 0)


def _remove(directory: Path) -> None:
    settled(directory)  # as _truncate: a merge's temporary files vanish under rmtree
    shutil.rmtree(directory)


def _garbage(directory: Path) -> None:
    for path in directory.iterdir():
        if path.is_file():
            path.write_bytes(os.urandom(max(64, path.stat().st_size)))


@pytest.mark.parametrize("damage", [_truncate, _garbage, shutil.rmtree],
                         ids=["truncated", "garbage", "missing"])
def test_a_broken_index_is_rebuilt_at_start(config: dict[str, Any], damage: Any) -> None:
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        for n in range(10):
            alice.write(f"notes/broken/{n}.md", f"pangolin {n}\n")
        assert len(found(alice, "pangolin")) == 10
    index = index_of(config)
    assert any(index.iterdir())
    damage(index)
    with Daemon(config) as daemon:
        assert len(caught_up(daemon, "pangolin")) == 10
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/broken/after.md", "pangolin after\n")
            assert len(found(alice, "pangolin")) == 11
        if damage is not shutil.rmtree:
            assert "recall: the index is unusable" in daemon.log()
        assert daemon.alive()


@pytest.mark.parametrize("damage", [_truncate, _remove], ids=["truncated", "removed"])
def test_an_index_broken_under_a_running_daemon_is_rebuilt(config: dict[str, Any],
                                                           damage: Any) -> None:
    """Its files are memory-mapped: one truncated under the daemon is noticed before
    it is read (reading it would end the process), and the index rebuilt."""
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        for n in range(10):
            alice.write(f"notes/broken/{n}.md", f"tapir {n}\n")
        assert len(found(alice, "tapir")) == 10
        damage(index_of(config))
        found(alice, "tapir")  # a recall notices a truncated index; a removed one is fine
        alice.write("notes/broken/after.md", "tapir after\n")  # so does the indexer
        assert len(caught_up(daemon, "tapir")) == 11
        assert "recall: the index failed" in daemon.log()
        damage(index_of(config))
        assert alice.reindex("notes") == {"indexed": {"notes": 11}}
        assert len(found(alice, "tapir")) == 11
        alice.write("notes/broken/later.md", "tapir later\n")
        assert len(found(alice, "tapir")) == 12
        assert daemon.alive()


def test_the_index_is_private_state(config: dict[str, Any]) -> None:
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/private.md", "a dugong\n")
        assert found(alice, "dugong") == ["notes/private.md"]
        uid, _ = daemon_ids()
        for folder, _dirs, files in os.walk(Path(config["root"]) / "state" / "recall"):
            assert (os.stat(folder).st_mode & 0o777, os.stat(folder).st_uid) == (0o700, uid)
            for name in files:
                st = os.stat(os.path.join(folder, name))
                assert (st.st_mode & 0o777, st.st_uid) == (0o600, uid), name


def test_another_daemons_changes_are_found(base: Path) -> None:
    """Two daemons on one root, each with an index of its own (a slot each): a change
    made through one is found by the other's recall once it has seen the store's
    generation move (it polls 4 times a second) and caught up."""
    first = standard_config(base)
    second = standard_config(base, socket=str(base / "second.sock"))
    with Daemon(first) as one, Daemon(second) as two:
        with connect_as(UID_A, two.socket) as alice:
            alice.write("notes/elsewhere.md", "a kinkajou seen through the second daemon\n")
            assert found(alice, "kinkajou") == ["notes/elsewhere.md"]
        deadline = time.monotonic() + scaled(30)
        with connect_as(UID_A, one.socket) as alice:
            while found(alice, "kinkajou") != ["notes/elsewhere.md"]:
                assert time.monotonic() < deadline, one.log()
                time.sleep(0.05)
        assert index_of(first, 0).is_dir() and index_of(first, 1).is_dir()


def test_recall_off_keeps_no_index_and_refuses_recall(config: dict[str, Any]) -> None:
    config["recall"] = False
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/off.md", "a civet\n")
        with pytest.raises(InvalidError, match="recall is off"):
            alice.recall("civet")
        assert not (Path(config["root"]) / "state" / "recall").exists()
