"""Every accepted change is exactly one commit, with the agent as author, the op, the
digest and the forced flag in its message; the tree of main equals the files; plain
git reads the repository."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from memfs.control.client import ConflictError, NotFoundError
from tests.store.history.gitcheck import commits, git, store_files, trailers, tree_files
from tests.support import UID_A, UID_B, Daemon, connect_as, daemon_ids, public_tmpdir, run_as


def test_each_change_is_one_commit(daemon: Daemon, root: Path) -> None:
    before = len(commits(root, "notes"))
    steps: list[tuple[str, str, str, str | None, bool]] = []  # author, op, summary, digest
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        r = alice.write("notes/c/db.md", "one\n")
        steps.append(("alice", "write", "write notes/c/db.md", r["digest"], False))
        r = alice.write("notes/c/db.md", "one\ntwo\n")
        steps.append(("alice", "write", "write notes/c/db.md", r["digest"], False))
        r = alice.write("notes/c/db.md", "three\n", append=True)
        steps.append(("alice", "append", "append notes/c/db.md", r["digest"], False))
        bob.read("notes/c/db.md")
        r = bob.edit("notes/c/db.md", ["s/two/TWO/"])
        steps.append(("bob", "edit", "edit notes/c/db.md", r["digest"], False))
        r = bob.write("notes/c/bin.dat", bytes(range(256)))  # an upload: exact bytes
        steps.append(("bob", "write", "write notes/c/bin.dat", r["digest"], False))
        r = alice.write("notes/c/bin.dat", "forced\n", force=True)
        steps.append(("alice", "write", "write notes/c/bin.dat", r["digest"], True))
        first = commits(root, "notes")[len(steps) - 1]  # this test's first commit
        bob.read("notes/c/db.md")
        bob.delete("notes/c/db.md")
        steps.append(("bob", "delete", "delete notes/c/db.md", None, False))
        with pytest.raises(ConflictError):  # refused: no commit
            bob.write("notes/c/bin.dat", "stale\n")
        r = alice.restore("notes/c/db.md", str(first.id)[:8])
        steps.append(("alice", "restore", f"restore notes/c/db.md to {str(first.id)[:7]}",
                      r["digest"], False))
    made = commits(root, "notes")[: len(steps)][::-1]
    assert len(commits(root, "notes")) == before + len(steps)
    for commit, (author, op, summary, digest, forced) in zip(made, steps, strict=True):
        found = trailers(commit)
        assert commit.author.name == author
        assert commit.author.email == ("alice@example.org" if author == "alice"
                                       else "bob@memfs.invalid")
        assert (commit.committer.name, commit.author.offset) == ("memfs", 0)
        assert abs(commit.commit_time - time.time()) < 600
        assert commit.message.split("\n", 1)[0] == summary
        assert found["Memfs-Op"] == op
        assert found.get("Memfs-Digest") == digest
        assert ("Memfs-Forced" in found) == forced
    assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")
    assert tree_files(made[-1])["c/db.md"] == b"one\n"


def test_tree_equals_files_after_every_change(daemon: Daemon, root: Path) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        for n in range(5):
            alice.write(f"notes/t/{n % 3}/f.md", f"v{n}\n", force=True)
            assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")
        alice.delete("notes/t/0/f.md", force=True)
        assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")


def test_plain_git_reads_it(daemon: Daemon, root: Path) -> None:
    with connect_as(UID_B, daemon.socket) as bob:
        bob.write("notes/git/plain.md", "plain git\n", force=True)
    log = git(root, "notes", "log", "-p", "--format=%an %s", "-1")
    assert log.startswith("bob write notes/git/plain.md")
    assert "+plain git" in log
    git(root, "notes", "fsck", "--strict")
    clone = public_tmpdir("memfs-clone-")
    os.chown(clone, *daemon_ids())
    clone /= "clone"
    done = run_as(daemon_ids()[0], ["git", "clone", "-q", str(root / "state/history/notes.git"),
                                    str(clone)])
    assert done.returncode == 0, done.stderr
    cloned = {str(p.relative_to(clone)): p.read_bytes() for p in clone.rglob("*")
              if p.is_file() and ".git" not in p.relative_to(clone).parts}
    assert cloned == store_files(root, "notes")
    assert int(git(root, "notes", "rev-list", "--count", "main")) == len(commits(root, "notes"))


def test_a_store_without_history_keeps_none(daemon: Daemon, root: Path) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        result = alice.write("scratch/x.md", "x\n")
        assert result["commit"] is None
        with pytest.raises(NotFoundError) as caught:
            alice.log("scratch")
        assert "keeps no history" in caught.value.message
    assert not (root / "state" / "history" / "scratch.git").exists()


def test_a_change_to_the_same_content_commits_nothing(daemon: Daemon, root: Path) -> None:
    """A replace, restore, sed edit or empty append that leaves the bytes as they are
    says so (``unchanged``) and adds no commit; the writer has still seen the version."""
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        made = alice.write("notes/noop/a.md", "same\n")
        before = len(commits(root, "notes"))
        again = alice.write("notes/noop/a.md", "same\n")
        assert again["unchanged"] is True and again["commit"] is None
        assert (again["digest"], again["previous_digest"]) == (made["digest"], made["digest"])
        assert alice.edit("notes/noop/a.md", ["s/nothing-matches/x/"])["unchanged"] is True
        assert alice.restore("notes/noop/a.md", "HEAD")["unchanged"] is True
        assert alice.write("notes/noop/a.md", "", append=True)["unchanged"] is True
        # bob never read it: the same bytes written by force are recorded as seen by him,
        # so his next plain write is accepted
        assert bob.write("notes/noop/a.md", "same\n", force=True)["unchanged"] is True
        assert len(commits(root, "notes")) == before
        changed = bob.write("notes/noop/a.md", "bob's\n")
        assert changed["unchanged"] is False and changed["commit"] is not None
        # the version check comes first: alice has not seen bob's version
        with pytest.raises(ConflictError):
            alice.write("notes/noop/a.md", "bob's\n")
    assert len(commits(root, "notes")) == before + 1
