"""The pusher's decisions in process, without a daemon, against real repositories and
the real git: what a push's answer means, when a mirror is tried again (a mirror that
is down: later and later; one that refused: when main moves, or when asked), and the
URL as it is shown."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from memfs.config import parse_config
from memfs.store.history.gitcli import GitRun, GitRunner
from memfs.store.history.mirror import (
    ACCESS_RETRY_FIRST,
    DIVERGED,
    DOWN,
    OK,
    REFUSED,
    RETRY_FIRST,
    MirrorFailed,
    Mirrors,
    StoreMirror,
    _rejected,
    access_refusal,
    shown,
)


def commit(repo: pygit2.Repository, name: str) -> str:
    """A commit on main adding ``name``; its id."""
    parents = [] if repo.head_is_unborn else [repo.head.target]
    builder = repo.TreeBuilder(repo[parents[0]].tree) if parents else repo.TreeBuilder()
    builder.insert(name, repo.create_blob(name.encode()), pygit2.enums.FileMode.BLOB)
    who = pygit2.Signature("alice", "alice@memfs.invalid", 1_700_000_000, 0)
    return str(repo.create_commit("refs/heads/main", who, who, f"write {name}",
                                  builder.write(), parents))


def store_mirror(tmp_path: Path, url: str) -> tuple[StoreMirror, pygit2.Repository]:
    history = tmp_path / "state" / "history" / "notes.git"
    repo = pygit2.init_repository(str(history), bare=True, initial_head="main")
    mirror = StoreMirror("notes", (url,), history, tmp_path / "state" / "mirrors", GitRunner())
    mirror.state_file.parent.mkdir(parents=True)
    return mirror, repo


@pytest.mark.parametrize(("porcelain", "found"), [
    ("To /r\n=\tab:refs/heads/main\t[up to date]\nDone\n", None),
    ("To /r\n!\tab:refs/heads/main\t[rejected] (non-fast-forward)\nDone\n",
     (False, "non-fast-forward")),
    ("To /r\n!\tab:refs/heads/main\t[rejected] (fetch first)\nDone\n", (False, "fetch first")),
    ("To /r\n!\tab:refs/heads/main\t[remote rejected] (pre-receive hook declined)\n",
     (True, "pre-receive hook declined")),
    ("To /r\n!\tab:refs/heads/other\t[rejected] (non-fast-forward)\n", None),
    ("", None),
])
def test_what_a_push_answer_says(porcelain: str, found: tuple[bool, str] | None) -> None:
    assert _rejected(porcelain) == found


def test_a_url_is_shown_without_a_password() -> None:
    assert shown("https://bob:secret@example.org/x.git") == "https://bob@example.org/x.git"
    assert shown("https://example.org/x.git") == "https://example.org/x.git"
    assert shown("git@example.org:x.git") == "git@example.org:x.git"


def test_a_mirror_that_is_down_is_tried_later_and_later(tmp_path: Path) -> None:
    mirror, repo = store_mirror(tmp_path, str(tmp_path / "missing.git"))
    commit(repo, "a.md")
    waits = []
    for failures in (1, 2, 3):
        mirror.push(explicit=True)
        status = mirror.status()[0]
        assert status.state == DOWN and status.commits_behind == 1 and status.last_error
        assert mirror._records()[mirror.urls[0]].failures == failures
        assert status.retry_at is not None and status.last_attempt is not None
        waits.append(status.retry_at - status.last_attempt)
    for failures, wait in enumerate(waits, start=1):
        assert RETRY_FIRST * 2 ** (failures - 1) * 0.9 <= wait <= RETRY_FIRST * 2 ** failures
    attempted = mirror.status()[0].last_attempt
    mirror.push(explicit=False)
    assert mirror.status()[0].last_attempt == attempted  # its retry is not due
    assert mirror.outcomes() == {(mirror.urls[0], DOWN): 3}


def test_a_refused_push_waits_for_main_to_move(tmp_path: Path) -> None:
    remote = pygit2.init_repository(str(tmp_path / "remote.git"), bare=True,
                                    initial_head="main")
    theirs = commit(remote, "theirs.md")
    mirror, repo = store_mirror(tmp_path, str(tmp_path / "remote.git"))
    commit(repo, "a.md")
    mirror.push(explicit=False)
    status = mirror.status()[0]
    assert status.state == DIVERGED and status.remote_head == theirs
    assert status.commits_behind == 1  # their commit is unknown here: all of ours count
    attempted = status.last_attempt
    mirror.push(explicit=False)
    assert mirror.status()[0].last_attempt == attempted  # main did not move
    commit(repo, "b.md")
    mirror.push(explicit=False)
    again = mirror.status()[0]
    assert again.state == DIVERGED and again.last_attempt != attempted
    assert str(remote.references["refs/heads/main"].target) == theirs  # never overwritten


def test_a_push_asked_for_raises_mirror_failed_and_one_up_to_date_does_not(
        tmp_path: Path) -> None:
    pygit2.init_repository(str(tmp_path / "remote.git"), bare=True, initial_head="main")
    config = parse_config({"root": str(tmp_path), "stores": {
        "notes": {"mirror": str(tmp_path / "remote.git")}, "plain": {}}})
    mirrors = Mirrors(config)
    assert list(mirrors.stores) == ["notes"]
    repo = pygit2.init_repository(str(tmp_path / "state" / "history" / "notes.git"),
                                  bare=True, initial_head="main")
    (tmp_path / "state" / "mirrors").mkdir()
    head = commit(repo, "a.md")
    [status] = mirrors.push(["notes"])
    assert status.state == OK and status.remote_head == head
    (tmp_path / "remote.git").rename(tmp_path / "away.git")
    commit(repo, "b.md")
    with pytest.raises(MirrorFailed) as failed:
        mirrors.push(["notes"])
    assert failed.value.mirrors[0].state == DOWN
    assert "store notes: mirror" in str(failed.value)


_ADVICE = ("fatal: Could not read from remote repository.\n\nPlease make sure you have the "
           "correct access rights\nand the repository exists.\n")


@pytest.mark.parametrize(("stderr", "first", "missing"), [
    ("fatal: detected dubious ownership in repository at '/r.git'\nTo add an exception "
     "for this directory, call:\n\n\tgit config --global --add safe.directory /r.git\n"
     + _ADVICE, "detected dubious ownership in repository at '/r.git'", "is not owned by"),
    ("error: remote unpack failed: unable to create temporary object directory\n"
     "error: failed to push some refs to '/r.git'\n",
     "remote unpack failed: unable to create temporary object directory", "may not write"),
    ("git@example.org: Permission denied (publickey).\n" + _ADVICE,
     "git@example.org: Permission denied (publickey).", "has no access"),
    ("fatal: not a git repository: '/r.git'\n", "not a git repository: '/r.git'",
     "no repository"),
    ("error: unable to create '/r.git/refs/x': Read-only file system\n",
     "unable to create '/r.git/refs/x': Read-only file system", "read-only"),
])
def test_a_refusal_of_access_says_what_git_said_first_and_whose_access(
        stderr: str, first: str, missing: str) -> None:
    said = access_refusal("ssh://example.org/r.git", GitRun(128, "", stderr))
    assert said is not None and said.startswith(first + ": "), said
    assert missing in said and "the daemon's user" in said and "(uid 0)" in said


@pytest.mark.parametrize("stderr", [
    "fatal: unable to connect to 127.0.0.1:\n127.0.0.1[0: 127.0.0.1]: errno=Connection "
    "refused\n",
    "ssh: Could not resolve hostname example.org: Name or service not known\n" + _ADVICE,
    "fatal: '/nowhere/r.git' does not appear to be a git repository\n" + _ADVICE,
    "\ntimed out after 600 s",
])
def test_an_outage_is_no_refusal(stderr: str) -> None:
    assert access_refusal("/nowhere/r.git", GitRun(128, "", stderr)) is None
    assert "Please make sure" not in GitRun(128, "", stderr).said()


def test_a_local_path_that_is_no_repository_is_refused(tmp_path: Path) -> None:
    said = f"fatal: '{tmp_path}' does not appear to be a git repository\n" + _ADVICE
    refusal = access_refusal(f"file://{tmp_path}", GitRun(128, "", said))
    assert refusal is not None and refusal.startswith(f"'{tmp_path}' does not appear")


def test_a_refused_mirror_is_tried_again_after_minutes_not_at_each_commit(
        tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()  # a directory, no repository
    mirror, repo = store_mirror(tmp_path, f"file://{tmp_path / 'plain'}")
    commit(repo, "a.md")
    mirror.push(explicit=False)
    status = mirror.status()[0]
    assert status.state == REFUSED and status.retry_at is not None
    assert status.last_attempt is not None and status.last_error is not None
    assert status.retry_at - status.last_attempt >= ACCESS_RETRY_FIRST * 0.9
    commit(repo, "b.md")  # main moved: still not due
    mirror.push(explicit=False)
    assert mirror.status()[0].last_attempt == status.last_attempt
    mirror.push(explicit=True)  # asked for: tried, later still
    again = mirror.status()[0]
    assert again.state == REFUSED and again.last_attempt != status.last_attempt
    assert again.retry_at is not None and again.last_attempt is not None
    assert again.retry_at - again.last_attempt >= 2 * ACCESS_RETRY_FIRST * 0.9
