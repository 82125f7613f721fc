"""log, show, diff and restore through the socket and the CLI: access rules, version
checks, and clear errors for bad revisions, paths and ranges."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from memfs.control.client import (
    ConflictError,
    InvalidError,
    MemfsClientError,
    NotFoundError,
    PermissionDeniedError,
)
from tests.store.history.gitcheck import commits, store_files, tree_files
from tests.support import UID_A, UID_B, UID_C, Daemon, connect_as, memfs_as

_names = itertools.count()


def fresh(daemon: Daemon, versions: list[str]) -> tuple[str, list[str]]:
    """A new file written by alice in ``versions``; its path and the commit ids."""
    path = f"notes/r/{next(_names)}.md"
    revs = []
    with connect_as(UID_A, daemon.socket) as alice:
        for text in versions:
            revs.append(alice.write(path, text, force=True)["commit"])
    return path, revs


def test_log_of_a_file_a_store_and_everything(daemon: Daemon) -> None:
    path, revs = fresh(daemon, ["a\n", "b\n", "c\n"])
    with connect_as(UID_B, daemon.socket) as bob:
        entries = bob.log(path)
        assert [e["rev"] for e in entries] == revs[::-1]
        assert {e["author"] for e in entries} == {"alice"}
        assert entries[0]["summary"] == f"write {path}"
        assert entries[0]["forced"] is True
        assert [e["rev"] for e in bob.log(path, limit=2)] == revs[:0:-1]
        assert bob.log("notes", limit=1)[0]["rev"] == revs[-1]
        assert bob.log(path, author="bob") == []
        assert bob.log(path, since="2999-01-01") == []
        patched = bob.log(path, limit=1, patch=True)[0]["patch"]
        assert "-b\n+c\n" in patched
        everything = bob.log(limit=5)
        assert everything[0]["rev"] == revs[-1] and everything[0]["store"] == "notes"
        folder = bob.log("notes/r", limit=1)
        assert folder[0]["rev"] == revs[-1]


def test_show_and_diff(daemon: Daemon) -> None:
    path, revs = fresh(daemon, ["line 1\nline 2\n", "line 1\nline two\n"])
    with connect_as(UID_B, daemon.socket) as bob:
        assert bob.show(path, revs[0][:7])["text"] == "line 1\nline 2\n"
        assert bob.show(path, "HEAD~1")["text"] == "line 1\nline 2\n"  # store-wide HEAD
        assert bob.show(path, revs[0], offset=2, limit=1)["text"] == "line 2\n"
        data, _ = bob.show_bytes(path, revs[1])
        assert data == b"line 1\nline two\n"
        diff = bob.diff(path, f"{revs[0][:7]}..{revs[1][:7]}")["diff"]
        assert "-line 2\n+line two\n" in diff
        # default: since this agent last read it
        bob.read(path)
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write(path, "line 1\nline 3\n", force=True)
        since = bob.diff(path)
        assert "-line two\n+line 3\n" in since["diff"]
        assert since["old"].endswith("(last seen)") and since["new"] == "now"


def test_show_of_a_deleted_file(daemon: Daemon) -> None:
    path, revs = fresh(daemon, ["kept in history\n"])
    with connect_as(UID_A, daemon.socket) as alice:
        alice.delete(path, force=True)
        with pytest.raises(NotFoundError):
            alice.read(path)
        assert alice.show(path, revs[0])["text"] == "kept in history\n"
        assert alice.log(path)[0]["op"] == "delete"


def test_restore_is_a_version_checked_replace(daemon: Daemon, root: Path) -> None:
    path, revs = fresh(daemon, ["good\n", "bad edit\n"])
    with connect_as(UID_B, daemon.socket) as bob:
        with pytest.raises(ConflictError):  # bob never read it
            bob.restore(path, revs[0])
        bob.read(path)
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write(path, "newer work\n", force=True)
        with pytest.raises(ConflictError) as caught:  # changed since bob read it
            bob.restore(path, revs[0])
        assert "alice" in caught.value.message
        assert bob.read(path)["text"] == "newer work\n"
        result = bob.restore(path, revs[0])
        assert bob.read(path)["text"] == "good\n"
        head = commits(root, "notes")[0]
        assert str(head.id) == result["commit"]
        assert head.message.startswith(f"restore {path} to {revs[0][:7]}")
        assert head.author.name == "bob"
    assert tree_files(head) == store_files(root, "notes")


def test_restore_recreates_a_deleted_file(daemon: Daemon) -> None:
    path, revs = fresh(daemon, ["was here\n"])
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        bob.read(path)
        alice.delete(path, force=True)
        assert bob.restore(path, revs[0])["created"] is True
        assert alice.read(path)["text"] == "was here\n"


def test_restore_needs_write_access_and_history_needs_read(daemon: Daemon) -> None:
    path, revs = fresh(daemon, ["x\n"])
    ops_path = "ops/r.md"
    with connect_as(UID_A, daemon.socket) as alice:
        ops_rev = alice.write(ops_path, "ops\n", force=True)["commit"]
    with connect_as(UID_C, daemon.socket) as carol:  # read-only on notes, not on ops
        carol.read(path)
        with pytest.raises(PermissionDeniedError):
            carol.restore(path, revs[0])
        assert carol.log(path)  # reading history is fine
        for call in (lambda: carol.log("ops"), lambda: carol.show(ops_path, ops_rev),
                     lambda: carol.diff(ops_path, ops_rev), lambda: carol.log("secret")):
            with pytest.raises(NotFoundError):  # not her stores: they do not exist for her
                call()
        assert all(e["store"] == "notes" for e in carol.log(limit=50))


BAD = [  # call, expected error
    ({"op": "show", "rev": "nonsense"}, InvalidError),
    ({"op": "show", "rev": "HEAD^^"}, InvalidError),
    ({"op": "show", "rev": "@{-1}"}, InvalidError),
    ({"op": "show", "rev": ":/secret"}, InvalidError),
    ({"op": "show", "rev": "--output=/tmp/x"}, InvalidError),
    ({"op": "show", "rev": "main:../../etc/passwd"}, InvalidError),
    ({"op": "show", "rev": "2026-13-45"}, InvalidError),
    ({"op": "show", "rev": "deadbeef"}, NotFoundError),
    ({"op": "show", "rev": "HEAD~99999"}, NotFoundError),
    ({"op": "show", "rev": "1970-01-01"}, NotFoundError),
    ({"op": "diff", "rev": "HEAD.."}, InvalidError),
    ({"op": "diff", "rev": "..HEAD"}, InvalidError),
    ({"op": "diff", "rev": "HEAD..nonsense"}, InvalidError),
    ({"op": "restore", "rev": "zzzz"}, InvalidError),
    ({"op": "log", "since": "yesterday"}, InvalidError),
    ({"op": "show", "rev": "HEAD", "path": "notes/../secret/s"}, InvalidError),
    ({"op": "show", "rev": "HEAD", "path": "notes/never-existed.md"}, NotFoundError),
    ({"op": "show", "rev": "HEAD", "path": "notes/r"}, InvalidError),  # a folder
]


@pytest.mark.parametrize(("fields", "error"), BAD, ids=[str(f) for f, _ in BAD])
def test_bad_revisions_and_paths_are_clear_errors(daemon: Daemon, root: Path,
                                                   fields: dict[str, str],
                                                   error: type[MemfsClientError]) -> None:
    path, _ = fresh(daemon, ["target\n"])
    request = {"path": path, **fields}
    op = request.pop("op")
    if op == "log":
        request.pop("path")
    before = store_files(root, "notes"), len(commits(root, "notes"))
    with connect_as(UID_A, daemon.socket) as alice, pytest.raises(error) as caught:
        alice.call(op, **request)
    assert caught.value.message
    assert (store_files(root, "notes"), len(commits(root, "notes"))) == before


def test_cli(daemon: Daemon) -> None:
    path, revs = fresh(daemon, ["cli one\n", "cli two\n"])
    sock = daemon.socket
    done = memfs_as(UID_B, sock, "log", path)
    assert done.returncode == 0
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 2 and lines[0].startswith(revs[1][:7]) and "alice" in lines[0]
    assert f"write {path}" in lines[0]
    assert memfs_as(UID_B, sock, "show", path, "--at", revs[0][:7]).stdout == b"cli one\n"
    assert memfs_as(UID_B, sock, "cat", path, "--at", "HEAD~0").stdout == b"cli two\n"
    done = memfs_as(UID_B, sock, "diff", path, f"{revs[0][:7]}..{revs[1][:7]}")
    assert b"-cli one\n+cli two\n" in done.stdout
    assert memfs_as(UID_B, sock, "log", "-p", "-n", "1", path).stdout.count(b"+cli two") == 1
    assert memfs_as(UID_B, sock, "restore", path, revs[0]).returncode == 3  # not read
    memfs_as(UID_B, sock, "cat", path)
    done = memfs_as(UID_B, sock, "restore", path, revs[0][:7])
    assert done.returncode == 0, done.stderr
    assert memfs_as(UID_B, sock, "cat", path).stdout == b"cli one\n"
    assert memfs_as(UID_B, sock, "show", path, "--at", "nonsense").returncode == 2
    assert memfs_as(UID_B, sock, "show", path, "--at", "abcdef12").returncode == 5
    assert memfs_as(UID_C, sock, "restore", path, revs[0]).returncode == 4
    entries = json.loads(memfs_as(UID_B, sock, "--json", "log", "-n", "1", path).stdout)
    assert [(e["op"], e["author"]) for e in entries["entries"]] == [("restore", "bob")]


def test_log_pages_from_a_revision_and_bounds_times(daemon: Daemon) -> None:
    path, revs = fresh(daemon, [f"v{n}\n" for n in range(7)])
    with connect_as(UID_B, daemon.socket) as bob:
        pages, start = [], None
        while True:  # 3 a page, each page starting at the entry after the last shown
            got = bob.call("log", path=path, limit=4, **({"rev": start} if start else {}))
            pages.append([e["rev"] for e in got["entries"][:3]])
            if len(got["entries"]) < 4:
                break
            start = got["entries"][3]["rev"]
        assert [rev for page in pages for rev in page] == revs[::-1]
        assert len(pages) == 3
        # a revision names the store's history: the store's log starts there too
        store_log = bob.call("log", path="notes", rev=revs[2], limit=1)["entries"]
        assert store_log[0]["rev"] == revs[2]
        # `until` keeps what is at or before it; nothing before the epoch of these commits
        newest = bob.log(path)[0]
        assert bob.call("log", path=path, until="2000-01-01")["entries"] == []
        kept = bob.call("log", path=path, until=time_of(newest["at"] + 1))["entries"]
        assert kept[0]["rev"] == revs[-1]
        with pytest.raises(InvalidError, match="belongs to one store"):
            bob.call("log", rev=revs[0])
        with pytest.raises(InvalidError, match="bad revision"):
            bob.call("log", path=path, rev="yesterday")
        with pytest.raises(NotFoundError):
            bob.call("log", path=path, rev="0000000")
    with connect_as(UID_C, daemon.socket) as carol, pytest.raises(NotFoundError):
        carol.call("log", path="ops", rev="HEAD")  # not her store


def time_of(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_log_of_a_path_agrees_with_the_trees(daemon: Daemon, root: Path) -> None:
    """The log of a file or folder reads single-path commits (write, append, edit,
    delete, restore) from their message; it must name exactly the commits whose tree
    changed that path, also for names with spaces or " to " in them."""
    names = ["notes/agree/a.md", "notes/agree/b c.md", "notes/agree/x to y.md",
             "notes/agree/sub/d.md", "notes/agree2/e.md"]
    with connect_as(UID_A, daemon.socket) as alice:
        for round_ in range(3):
            for name in names:
                alice.write(name, f"{name} {round_}\n", force=True)
        alice.write("notes/agree/a.md", "appended\n", append=True)
        first = alice.log("notes/agree/x to y.md")[-1]["rev"]
        alice.call("restore", path="notes/agree/x to y.md", rev=first, force=True)
        alice.call("delete", path="notes/agree/b c.md", force=True)
        alice.write("notes/agree/b c.md", "again\n", force=True)
        history = commits(root, "notes")
        for rel in ["agree/a.md", "agree/b c.md", "agree/x to y.md", "agree/sub/d.md",
                    "agree/sub", "agree", "agree2", "agree/x"]:
            expected = []
            for commit in history:
                parent = commit.parents[0] if commit.parents else None
                before = tree_entry(parent, rel) if parent else None
                if tree_entry(commit, rel) != before:
                    expected.append(str(commit.id))
            if rel == "agree/x":  # never there, now or in the history: not found
                assert expected == []
                with pytest.raises(NotFoundError, match="notes/agree/x does not exist"):
                    alice.log(f"notes/{rel}")
                continue
            got = [e["rev"] for e in alice.log(f"notes/{rel}", limit=10_000)]
            assert got == expected, rel
            assert got, rel


def tree_entry(commit: object, rel: str) -> object:
    try:
        return commit.tree[rel].id  # type: ignore[attr-defined]
    except KeyError:
        return None
