"""Starting a new root from a mirror: a store with a mirror, no history and no file gets
its files and its history back from the mirror before the daemon serves (a lost host
recovered from its backup), also when a crash cuts the restore short; a mirror that
cannot be reached at start leaves the store empty and its backup untouched."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pygit2
import pytest

from memfs.config import parse_config
from memfs.control.client import ConflictError
from memfs.store.crashpoints import ENV
from memfs.store.history.gitcli import GitRunner
from memfs.store.history.restore import restore_store
from tests.store.history.gitcheck import assert_valid_git, commits, store_files, tree_files
from tests.store.mirror.remotes import (
    bare_repository,
    converged,
    fsck,
    log_of,
    main_of,
    mirror_status,
    mirrored,
    wait_for,
    write_many,
)
from tests.support import UID_A, Daemon, connect_as, memfs_as


def lost_host(base: Path) -> tuple[dict[str, Any], Path, dict[str, bytes], list[str]]:
    """A daemon whose ``notes`` is mirrored to a bare repository, used and stopped:
    (its config, the remote, the files of notes, the commits of notes newest first)."""
    remote = bare_repository(base / "remotes" / "notes.git")
    config = mirrored(base, f"file://{remote}")
    with Daemon(config) as daemon:
        write_many(daemon, 3, "a")
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/runbooks/db/failover.md", "promote the replica\n")
            alice.write("notes/a-1.md", "- more\n", append=True)
            alice.delete("notes/a-2.md")
        wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")
    root = Path(config["root"])
    return (config, remote, store_files(root, "notes"),
            [str(c.id) for c in commits(root, "notes")])


def test_a_new_root_gets_the_files_and_history_of_its_mirror(base: Path) -> None:
    config, remote, files, history = lost_host(base)
    new = {**config, "root": str(base / "new-root")}
    root = Path(new["root"])
    with Daemon(new) as daemon:
        assert store_files(root, "notes") == files
        assert [str(c.id) for c in commits(root, "notes")] == history
        assert main_of(remote) == history[0]
        assert "store notes: restored from mirror" in daemon.log()
        status = mirror_status(daemon.socket, "notes")
        assert status[0]["state"] == "ok" and status[0]["commits_behind"] == 0
        with connect_as(UID_A, daemon.socket) as alice:
            info = alice.stat("notes/runbooks/db/failover.md")
            last = next(c for c in commits(root, "notes")
                        if c.message.startswith("write notes/runbooks/db/failover.md"))
            assert info["last_writer"] == "alice"
            assert info["last_written_at"] == last.commit_time
            # this host has no record of what alice read: a blind replace is a conflict
            with pytest.raises(ConflictError):
                alice.write("notes/a-1.md", "blind\n")
            alice.read("notes/a-1.md")
            alice.write("notes/a-1.md", "after the restore\n")
        wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")
        assert log_of(remote)[1].startswith(history[0])  # a fast-forward of the old main
    fsck(remote)
    assert_valid_git(root, "notes")


def test_a_restore_cut_short_is_finished_at_the_next_start(base: Path) -> None:
    config, remote, files, history = lost_host(base)
    new = {**config, "root": str(base / "new-root")}
    root = Path(new["root"])
    Daemon(new, env={ENV: "restore.file@2"}).run_until_killed()
    assert len(store_files(root, "notes")) == 2  # two files in place, no main yet
    assert commits(root, "notes") == []
    aside = remote.with_name("away.git")
    remote.rename(aside)  # the mirror is gone now: the objects fetched before suffice
    with Daemon(new) as daemon:
        assert store_files(root, "notes") == files
        assert [str(c.id) for c in commits(root, "notes")] == history
        assert "fetched before a restart" in daemon.log()
        assert memfs_as(UID_A, daemon.socket, "cat", "notes/a-1.md").returncode == 0
    aside.rename(remote)
    assert_valid_git(root, "notes")


def test_an_unreachable_mirror_at_start_leaves_the_backup_untouched(base: Path) -> None:
    config, remote, _, history = lost_host(base)
    new = {**config, "root": str(base / "new-root")}
    root = Path(new["root"])
    aside = remote.with_name("away.git")
    remote.rename(aside)  # unreachable at start
    with Daemon(new) as daemon:
        assert "starts EMPTY" in daemon.log()
        assert store_files(root, "notes") == {}
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/new.md", "a new history\n")
        aside.rename(remote)  # back: a push of the new history is refused, never forced
        done = memfs_as(UID_A, daemon.socket, "mirror", "push", "notes")
        assert done.returncode == 7, done.stderr
        assert mirror_status(daemon.socket, "notes")[0]["state"] == "diverged"
    assert main_of(remote) == history[0]
    assert log_of(remote)[0].startswith(history[0])
    fsck(remote)


# -- restore_store in process (no daemon): what it takes and what it leaves -------------


def _bare_with(path: Path, entries: dict[str, tuple[bytes, int]]) -> str:
    """A bare repository (root's) whose main holds ``entries`` (name -> data, file
    mode), one commit; its id."""
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    builder = repo.TreeBuilder()
    for name, (data, mode) in entries.items():
        builder.insert(name, repo.create_blob(data), mode)
    who = pygit2.Signature("bob", "bob@example.org", 1_700_000_000, 0)
    return str(repo.create_commit("refs/heads/main", who, who, "planted", builder.write(), []))


def test_only_plain_files_with_names_memfs_takes_are_restored(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    modes = pygit2.enums.FileMode
    commit = _bare_with(remote, {"kept.md": (b"kept\n", modes.BLOB),
                                 "run.sh": (b"#!/bin/sh\n", modes.BLOB_EXECUTABLE),
                                 "link": (b"/etc/passwd", modes.LINK)})
    root = tmp_path / "root"
    config = parse_config({"root": str(root), "stores": {"notes": {"mirror": str(remote)}}})
    restored = restore_store(root, "notes", config.stores["notes"].mirrors, GitRunner())
    assert restored is not None and restored.commit == commit and restored.files == 2
    folder = root / "stores" / "notes"
    assert sorted(os.listdir(folder)) == ["kept.md", "run.sh"]
    assert (folder / "run.sh").stat().st_mode & 0o777 == 0o644  # memfs keeps no modes
    history = pygit2.Repository(str(root / "state" / "history" / "notes.git"))
    assert str(history.references["refs/heads/main"].target) == commit
    assert "refs/memfs/restoring" not in history.references
    assert tree_files(history[commit]) == {"kept.md": b"kept\n", "run.sh": b"#!/bin/sh\n",
                                           "link": b"/etc/passwd"}
    # a second start finds the store restored: nothing to do
    assert restore_store(root, "notes", (str(remote),), GitRunner()) is None


def test_a_store_that_holds_files_is_never_restored_over(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    _bare_with(remote, {"theirs.md": (b"theirs\n", pygit2.enums.FileMode.BLOB)})
    root = tmp_path / "root"
    (root / "stores" / "notes").mkdir(parents=True)
    (root / "stores" / "notes" / "mine.md").write_text("mine\n")
    assert restore_store(root, "notes", (str(remote),), GitRunner()) is None
    assert os.listdir(root / "stores" / "notes") == ["mine.md"]
    assert not (root / "state" / "history" / "notes.git").exists()
