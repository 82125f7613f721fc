"""Starting a store again from its mirror: a lost host recovered from its backup.

At start (memfs/daemon/serve.py calls `restore_from_mirrors` before the engine opens
the stores), a store with a ``mirror`` whose history does not exist yet and whose
folder holds no file is filled from the first of its mirrors that holds a ``main``:
its history is fetched into the store's repository (``git fetch``, every object
checked), then every file of that ``main`` is written into the store, durably and with
its version record (the digest, and the author and time of the commit that last
changed it), and only then does the store's ``main`` point at it. So after any crash
the store is either still empty with no ``main`` (the next start restores it again,
from the objects already fetched: ``refs/memfs/restoring`` marks a restore under way)
or whole, with the history it had on the lost host.

A store whose mirrors cannot be reached starts empty, with an error in the log: its
first commits then make a history that the mirror's does not contain, and a push of
it, never forced, is refused (``diverged``): the backup is never overwritten.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pygit2

from memfs.config import Config
from memfs.errors import MemfsError
from memfs.store import crashpoints
from memfs.store.errors import InvalidInput
from memfs.store.fs import backing, statefile
from memfs.store.fs.paths import parse_path
from memfs.store.fs.syscalls import syncfs
from memfs.store.history.gitcli import GitRunner
from memfs.store.history.mirror import REF, StoreMirror, shown
from memfs.store.history.repo import named_path
from memfs.store.history.store_history import StoreHistory
from memfs.store.read.versions import digest_bytes, stamp

log = logging.getLogger("memfs.mirror")

RESTORING = "refs/memfs/restoring"  # the mirror's main while a restore is under way
FETCH_TIMEOUT = 3600.0
LS_REMOTE_TIMEOUT = 60.0
_FILE_MODES = (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE)


class RestoreError(MemfsError):
    """A store's files could not be written from its mirror (the next start tries
    again)."""


@dataclass(frozen=True)
class Restored:
    """A store filled from a mirror: its main, and the files written."""

    store: str
    url: str | None  # None: a restore cut short, finished from the objects fetched then
    commit: str
    files: int


def restore_from_mirrors(config: Config, runner: GitRunner | None = None) -> list[Restored]:
    """Restore every store that has a mirror, no history and no file (see above).
    Returns what was restored. Raises RestoreError (a file cannot be written)."""
    runner = runner or GitRunner()
    done = []
    for name, spec in config.stores.items():
        if spec.mirrors and spec.history:
            restored = restore_store(config.root, name, spec.mirrors, runner)
            if restored is not None:
                done.append(restored)
    return done


def restore_store(root: Path, store: str, urls: tuple[str, ...],
                  runner: GitRunner) -> Restored | None:
    """Restore ``store`` from the first of ``urls`` that holds a main, if the store has
    no history and no file, or finish a restore a crash cut short; None when there is
    nothing to do or no mirror could give it. Holds the store's lock file meanwhile
    (other daemons on the root wait, then find it done)."""
    state = root / "state"
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    repository = state / "history" / f"{store}.git"
    folder = root / "stores" / store
    with statefile.locked(state / "locks" / f"{store}.lock"):
        begun = _restoring(repository)
        if begun is False:
            return None  # a history of its own (or one recovery will look at)
        if begun is None and _holds_files(folder):
            return None  # files are the truth: recovery records them
        history = StoreHistory(repository, store)  # made when missing, as the engine would
        url = None
        if begun is None:
            url = _fetch(repository, urls, store, runner)
            if url is None:
                return None
        repo = pygit2.Repository(str(repository))
        commit = repo.references[RESTORING].peel(pygit2.Commit)
        files = _write_files(repo, commit, store, folder, state / "restoring" / store)
        _sync(state)
        history.reset_to(str(commit.id))  # from here on the store has its history
        repo.references.delete(RESTORING)
        _sync(state)
        if url is not None:
            StoreMirror(store, urls, repository, state / "mirrors", runner
                        ).note_remote_head(url, str(commit.id))
        log.warning("store %s: restored from mirror %s: %d files, main at %s", store,
                    shown(url) if url else "(fetched before a restart)", files,
                    str(commit.id)[:7])
        return Restored(store, url, str(commit.id), files)


def _restoring(repository: Path) -> bool | None:
    """None: no history yet (no main, no restore under way); True: a restore under way;
    False: the store has a main, or a repository that cannot be read (recovery's)."""
    if not repository.exists():
        return None
    try:
        repo = pygit2.Repository(str(repository))
        refs = repo.references
        if refs.get(REF) is not None:
            if refs.get(RESTORING) is not None:
                refs.delete(RESTORING)  # finished, and killed before it said so
            return False
        return True if refs.get(RESTORING) is not None else None
    except (pygit2.GitError, KeyError, ValueError):
        return False


def _holds_files(folder: Path) -> bool:
    if not folder.exists():
        return False
    fd = os.open(folder, backing.DIR_FLAGS)
    try:
        return next(iter(backing.walk_files(fd)), None) is not None
    finally:
        os.close(fd)


def _fetch(repository: Path, urls: tuple[str, ...], store: str,
           runner: GitRunner) -> str | None:
    """Fetch the main of the first mirror that has one as RESTORING; its URL, or None
    (logged: none can be reached, or none holds a history yet)."""
    failures = []
    for url in urls:
        listed = runner.run(["ls-remote", "--", url, REF], git_dir=repository,
                            timeout=LS_REMOTE_TIMEOUT)
        if not listed.ok:
            failures.append(f"{shown(url)}: {listed.said()}")
            continue
        if not any(line.endswith(f"\t{REF}") for line in listed.stdout.splitlines()):
            continue  # an empty mirror: nothing to restore from it
        fetched = runner.run(["fetch", "--no-tags", "--no-write-fetch-head", "--quiet",
                              "--", url, f"+{REF}:{RESTORING}"], git_dir=repository,
                             timeout=FETCH_TIMEOUT)
        if fetched.ok:
            return url
        failures.append(f"{shown(url)}: {fetched.said()}")
    if failures:
        log.error("store %s has no files and no history, and its mirror could not be "
                  "reached (%s): it starts EMPTY. Its backup is never overwritten (a push "
                  "that is not a fast-forward is refused). To restore it once the mirror "
                  "is back: stop memfs, remove ROOT/state/history/%s.git and the store's "
                  "files, and start it again", store, "; ".join(failures), store)
    else:
        log.info("store %s: its mirrors hold no history yet: it starts empty", store)
    return None


def _write_files(repo: pygit2.Repository, commit: pygit2.Commit, store: str, folder: Path,
                 scratch: Path) -> int:
    """Write every file of ``commit``'s tree into ``folder``, each staged in ``scratch``
    with its version record, fsynced, then renamed into place; returns how many.
    Raises RestoreError."""
    files = _tree_files(repo, commit.tree, store)
    writers = _last_changes(repo, commit, store, set(files))
    folder.parent.mkdir(mode=backing.DIR_MODE, exist_ok=True)
    folder.mkdir(mode=backing.DIR_MODE, exist_ok=True)
    shutil.rmtree(scratch, ignore_errors=True)  # what a restore cut short left
    scratch.mkdir(mode=0o700, parents=True)
    store_fd = os.open(folder, backing.DIR_FLAGS)
    scratch_fd = os.open(scratch, backing.DIR_FLAGS)
    try:
        for rel, oid in sorted(files.items()):
            blob = repo[oid]
            assert isinstance(blob, pygit2.Blob)
            author, at = writers.get(rel, ("memfs", float(commit.commit_time)))
            try:
                _write_file(store_fd, scratch_fd, tuple(rel.split("/")), blob.data, author,
                            at, str(oid))
            except (OSError, InvalidInput) as error:
                raise RestoreError(f"restoring store {store}: cannot write {rel}: "
                                   f"{error}") from error
            crashpoints.reached("restore.file")
    finally:
        os.close(scratch_fd)
        os.close(store_fd)
        shutil.rmtree(scratch, ignore_errors=True)
    return len(files)


def _write_file(store_fd: int, scratch_fd: int, parts: tuple[str, ...], data: bytes,
                author: str, at: float, git: str) -> None:
    name = git  # unique in the scratch folder: one file per blob at a time
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                 backing.FILE_MODE, dir_fd=scratch_fd)
    try:
        os.fchmod(fd, backing.FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        stamp(fd, digest_bytes(data), author, at, git)
        os.fsync(fd)
    finally:
        os.close(fd)
    parent = backing.walk_parent(store_fd, parts, create=True)
    try:
        os.rename(name, parts[-1], src_dir_fd=scratch_fd, dst_dir_fd=parent)
        os.fsync(parent)
    finally:
        os.close(parent)


def _tree_files(repo: pygit2.Repository, tree: pygit2.Tree, store: str) -> dict[str, pygit2.Oid]:
    """rel -> blob id of each file of ``tree`` memfs keeps; anything else (a symlink, a
    submodule, a name memfs refuses) is left out, with a warning."""
    found: dict[str, pygit2.Oid] = {}
    stack: list[tuple[str, pygit2.Tree]] = [("", tree)]
    while stack:
        base, current = stack.pop()
        for entry in current:
            rel = f"{base}{entry.name}"
            if entry.filemode == pygit2.enums.FileMode.TREE:
                sub = repo[entry.id]
                assert isinstance(sub, pygit2.Tree)
                stack.append((rel + "/", sub))
                continue
            try:
                parse_path(f"{store}/{rel}")
            except InvalidInput as error:
                log.warning("store %s: %r of the mirror is not restored: %s", store, rel, error)
                continue
            if entry.filemode not in _FILE_MODES:
                log.warning("store %s: %r of the mirror is not a plain file: not restored",
                            store, rel)
                continue
            found[rel] = entry.id
    return found


def _last_changes(repo: pygit2.Repository, head: pygit2.Commit, store: str,
                  wanted: set[str]) -> dict[str, tuple[str, float]]:
    """rel -> (author, time) of the commit that last changed each of ``wanted``: the
    version record a file would have had on the lost host. Walks back from ``head``
    until each is found (a one-path commit says its path in its message)."""
    found: dict[str, tuple[str, float]] = {}
    pending = set(wanted)
    walker = repo.walk(head.id, pygit2.enums.SortMode.NONE)
    walker.simplify_first_parent()
    for commit in walker:
        if not pending:
            break
        who = (commit.author.name, float(commit.commit_time))
        parent = commit.parents[0] if commit.parents else None
        named = named_path(commit.message, store)
        if parent is None:
            changed = set(pending)
        elif named is not None:
            changed = {named} & pending
        else:
            diff = parent.tree.diff_to_tree(commit.tree)
            changed = {delta.new_file.path for delta in diff.deltas} & pending
        for rel in changed:
            found[rel] = who
        pending -= changed
    return found


def _sync(state: Path) -> None:
    """Make what was written durable: one syncfs of the root's file system."""
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError):
            syncfs(fd)
    finally:
        os.close(fd)
