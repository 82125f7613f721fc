"""Reading a store's history in tests: pygit2 for bulk checks, the git CLI where the
point is that plain git agrees."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import blake3
import pygit2

from memfs.store.fs import backing
from tests.support import as_euid, daemon_ids, run_as

# The repositories are the daemon's user's (memfs): plain git reads them as that user,
# as docs/reference/history.md says; libgit2 here reads them as root, once told that is safe.
pygit2.option(pygit2.enums.Option.SET_OWNER_VALIDATION, False)


def repo_path(root: Path, store: str) -> Path:
    return root / "state" / "history" / f"{store}.git"


def commits(root: Path, store: str) -> list[pygit2.Commit]:
    """The commits of ``main``, newest first (first parents)."""
    repo = pygit2.Repository(str(repo_path(root, store)))
    ref = repo.references.get("refs/heads/main")
    if ref is None:
        return []
    walker = repo.walk(ref.target)
    walker.simplify_first_parent()
    return list(walker)


def tree_files(commit: pygit2.Commit) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    stack: list[tuple[str, pygit2.Tree]] = [("", commit.tree)]
    while stack:
        base, tree = stack.pop()
        for entry in tree:
            obj = tree[entry.name]
            if isinstance(obj, pygit2.Tree):
                stack.append((f"{base}{entry.name}/", obj))
            else:
                assert isinstance(obj, pygit2.Blob)
                found[f"{base}{entry.name}"] = obj.data
    return found


def head_files(root: Path, store: str) -> dict[str, bytes]:
    """The files of ``main``'s tree ({} before the first commit)."""
    history = commits(root, store)
    return tree_files(history[0]) if history else {}


def store_files(root: Path, store: str) -> dict[str, bytes]:
    """What agents see of a store: the files memfs keeps, byte for byte (looked at as
    the daemon's uid: memfs keeps the files its own uid owns)."""
    top = root / "stores" / store
    with as_euid(daemon_ids()[0]):
        fd = os.open(top, backing.DIR_FLAGS)
        try:
            return {e.rel: (top / e.rel).read_bytes() for e in backing.walk_files(fd)}
        finally:
            os.close(fd)


def trailers(commit: pygit2.Commit) -> dict[str, str]:
    return {key: value.strip() for key, sep, value in
            (line.partition(": ") for line in commit.message.splitlines()) if sep}


def introduced(commit: pygit2.Commit) -> dict[str, str]:
    """rel -> blake3 of every file this commit added or changed."""
    before = tree_files(commit.parents[0]) if commit.parents else {}
    return {rel: blake3.blake3(data).hexdigest()
            for rel, data in tree_files(commit).items() if before.get(rel) != data}


def git(root: Path, store: str, *args: str) -> str:
    """Plain git on the store's repository, as its owner; its output. Asked again (up
    to three times in all) when a pack git listed was gone when it opened it: a live
    daemon removes the packs it merged 10 s after the merge; a pack that stays
    unreadable fails each time."""
    for _attempt in range(3):
        done = _git_as_owner(root, store, args)
        if done.returncode == 0 or b"index not opened" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def _git_as_owner(root: Path, store: str,
                  args: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    # as the repository's owner (a daemon's user, or root for a history opened by the
    # test itself): git gc run as root would leave root's files in a daemon's repository
    repo = repo_path(root, store)
    return run_as(repo.stat().st_uid, ["git", "--git-dir", str(repo), *args])


def assert_valid_git(root: Path, store: str) -> None:
    """`git fsck --strict` is clean and `git gc` works on the store's repository
    (invariant 9); a failure shows what git said."""
    for args in (["fsck", "--strict"], ["gc", "--quiet"]):
        done = _git_as_owner(root, store, args)
        said = (done.stderr + done.stdout).decode()
        assert done.returncode == 0, f"git {' '.join(args)}: {said}"


def loose_files(root: Path, store: str) -> list[Path]:
    """Every file in the fan-out directories (objects/ab/...): loose objects, and
    whatever else a writer left there; a directory a running daemon's packing removes
    meanwhile holds none."""
    objects = repo_path(root, store) / "objects"
    found = []
    for directory in objects.iterdir():
        if len(directory.name) == 2 and directory.is_dir():
            with contextlib.suppress(FileNotFoundError):
                found += list(directory.iterdir())
    return found


def pack_ids(root: Path, store: str) -> list[list[str]]:
    """The object ids of each pack of the store's repository (git show-index); a pack
    a running daemon removes meanwhile (merged) is left out."""
    found = []
    for index in sorted((repo_path(root, store) / "objects" / "pack").glob("*.idx")):
        try:
            handle = index.open("rb")
        except FileNotFoundError:
            continue
        with handle:
            listing = subprocess.run(["git", "show-index"], stdin=handle, capture_output=True,
                                     text=True, check=True).stdout
        found.append([line.split()[1] for line in listing.splitlines()])
    return found
