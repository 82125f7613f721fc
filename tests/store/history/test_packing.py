"""Packing a store's history: the number of packs stays logarithmic in the objects
(merged as `git repack --geometric=2` chooses, memfs/store/history/packs.py), a merge holds
little memory, readers and commits go on while packs merge, and plain git reads and
checks every pack."""

from __future__ import annotations

import itertools
import math
import os
import random
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from memfs.store.history import maintenance, packs
from memfs.store.history import repo as history_module
from memfs.store.history.repo import Change
from memfs.store.history.store_history import StoreHistory
from tests.store.history.conftest import history_config
from tests.store.history.gitcheck import (
    assert_valid_git,
    commits,
    loose_files,
    pack_ids,
    repo_path,
    store_files,
    tree_files,
)
from tests.support import Daemon, public_tmpdir, scaled

SMALL = 16  # PACK_AFTER in these tests: many packs from few commits


@pytest.fixture
def small_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small packs, and the packs a merge replaced removed by the next `maintain`
    (as the daemon calls it), with no grace (no reader here lags behind a merge)."""
    monkeypatch.setattr(maintenance, "PACK_AFTER", SMALL)
    monkeypatch.setattr(maintenance, "MERGE_GRACE", 0.0)


def maintain(history: StoreHistory) -> None:
    """What the daemon's maintenance does with a history each second."""
    history.pack()
    history.retire()


def bound(objects: int) -> int:
    """The most packs ``objects`` objects may take: each pack holds at least twice the
    next smaller, so n packs hold at least 2^n - 1 objects."""
    return int(math.log2(objects)) + 1


def commit_many(history: StoreHistory, count: int, seed: int = 0) -> dict[str, bytes]:
    """``count`` commits, each of one file of its own content; commit id -> content.
    Packs whenever the history asks for it (as the daemon's maintenance does)."""
    made = {}
    for n in range(count):
        data = b"commit %d of run %d\n" % (n, seed) * (n % 40 + 1)
        rel = f"d{n % 5}/f{n % 11}.md"
        made[history.commit([Change(rel, history.blob(data))], author="alice",
                            email="alice@memfs.invalid", message=f"write {rel}\n")] = data
        if history.needs_pack():
            maintain(history)
    return made


def test_rollup_keeps_each_pack_at_least_twice_the_next_smaller() -> None:
    """Packs of SMALL objects added one by one and rolled up as `rollup` says: after
    each, the packs progress geometrically and there are at most log2(N/SMALL) + 1."""
    counts: list[int] = []
    for _ in range(1000):
        counts.append(SMALL)
        found = [packs.Pack(Path(f"pack-{n}.idx"), c) for n, c in enumerate(counts)]
        chosen = packs.rollup(found)
        assert len(chosen) != 1
        merged = sum(pack.count for pack in chosen)
        counts = sorted([pack.count for pack in found if pack not in chosen]
                        + ([merged] if chosen else []))
        assert all(big >= packs.FACTOR * small for small, big in itertools.pairwise(counts))
        assert len(counts) <= bound(sum(counts) // SMALL)  # in units of SMALL
    assert packs.rollup([packs.Pack(Path("a.idx"), 10), packs.Pack(Path("b.idx"), 100)]) == []


def test_packs_stay_few_and_git_reads_every_one(tmp_path: Path, small_packs: None) -> None:
    """Without merging, 800 commits would be ~200 packs; with it, the count stays
    within the bound after every packing, no object is in two packs, and git's own
    checks (verify-pack, fsck --strict, gc) pass."""
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    made: dict[str, bytes] = {}
    for round_ in range(8):
        made |= commit_many(history, 100, seed=round_)
        maintain(history)
        found = pack_ids(tmp_path, "notes")
        objects = sum(len(ids) for ids in found)
        assert len(found) <= bound(objects), [len(ids) for ids in found]
    packed = [oid for ids in pack_ids(tmp_path, "notes") for oid in ids]
    assert len(packed) == len(set(packed)) > 3 * 800
    for index in (repo_path(tmp_path, "notes") / "objects" / "pack").glob("*.idx"):
        subprocess.run(["git", "verify-pack", str(index)], check=True, capture_output=True)
    repo = pygit2.Repository(str(repo_path(tmp_path, "notes")))
    for oid, data in made.items():
        commit = repo[oid]
        assert isinstance(commit, pygit2.Commit)
        rel = commit.message.split(" ", 1)[1].strip()
        assert commit.tree[rel].data == data
    assert_valid_git(tmp_path, "notes")


def test_a_merge_holds_little_memory(tmp_path: Path) -> None:
    """Merging copies the packs' bytes through a buffer of CHUNK bytes and merges their
    indexes as streams: Python holds far less than the packs (libgit2's pack builder
    held 27 MB for a pack of 100,000 blobs), where keeping an index in memory would
    take more than the bound."""
    repo = pygit2.init_repository(str(tmp_path / "notes.git"), bare=True)
    directory = tmp_path / "notes.git" / "objects" / "pack"
    for batch in range(4):
        builder = pygit2.PackBuilder(repo)
        for n in range(10_000):
            builder.add(repo.create_blob(os.urandom(100) + b"%d %d" % (batch, n)))
        builder.write(str(directory))
    found = packs.listed(directory)
    tracemalloc.start()
    try:
        merged = packs.merge(found, tmp_path / "merging")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert packs.finish(tmp_path / "merging", directory)  # the merged packs go
    assert [pack.count for pack in packs.listed(directory)] == [40_000]
    assert peak < packs.CHUNK + 256 * 1024, peak
    assert merged.with_suffix(".pack").stat().st_size > 4 * packs.CHUNK
    subprocess.run(["git", "verify-pack", str(merged)], check=True, capture_output=True)


@pytest.fixture
def libgit2_uncached() -> Iterator[None]:
    """libgit2 without its object cache and with one pack file open at a time: every
    read goes to the packs, and a pack not in use is closed (a removed one cannot be
    opened again)."""
    option = pygit2.enums.Option
    limit = pygit2.option(option.GET_MWINDOW_FILE_LIMIT)
    pygit2.option(option.SET_MWINDOW_FILE_LIMIT, 1)
    pygit2.option(option.ENABLE_CACHING, False)
    try:
        yield
    finally:
        pygit2.option(option.SET_MWINDOW_FILE_LIMIT, limit)
        pygit2.option(option.ENABLE_CACHING, True)


def test_reads_and_commits_go_on_while_packs_merge(tmp_path: Path, small_packs: None,
                                                  libgit2_uncached: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """While one thread commits and another packs and merges, readers read old and
    new commits through StoreHistory: its readers reopen after a merge, and the packs
    a merge replaced stay for MERGE_GRACE, so a reader that knew them before the merge
    still finds them (removed at once, a reader that had listed them failed now and
    then with "invalid packfile": libgit2 opens a pack it knows of when it first
    needs it). The grace is short so that replaced packs are removed during the run
    (counted), yet longer than a reader thread stalls on a loaded machine: 0.2 s was
    not, once, on 3 test workers sharing 2 cores."""
    monkeypatch.setattr(maintenance, "MERGE_GRACE", scaled(1.0))
    removals = [0]
    finish = packs.finish

    def counted_finish(record: Path, directory: Path, *, grace: float = 0.0) -> bool:
        removed = finish(record, directory, grace=grace)
        removals[0] += removed
        return removed

    monkeypatch.setattr(packs, "finish", counted_finish)
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    made: dict[str, bytes] = {}
    done = threading.Event()
    errors: list[BaseException] = []
    reads = [0, 0, 0]
    packer_turn, committer_turn = threading.Semaphore(0), threading.Semaphore(0)

    def committer() -> None:
        try:
            for round_ in range(30):  # the packer runs between rounds
                made.update(commit_many(history, 10, seed=round_))
                packer_turn.release()
                committer_turn.acquire()
        finally:
            done.set()
            packer_turn.release()

    def packer() -> None:
        while True:
            packer_turn.acquire()
            if done.is_set():
                return
            maintain(history)
            committer_turn.release()

    def reader(index: int) -> None:
        rng = random.Random(index)
        while not done.is_set():
            if not made:
                time.sleep(0.001)
                continue
            oid, data = rng.choice(list(made.items()))
            try:
                commit = history.resolve(oid)
                history.log(limit=5)
                rel = commit.message.split(" ", 1)[1].strip()
                assert commit.tree[rel].data == data
                if index == 2:  # the versions of a file, newest first
                    assert next(history.versions(rel))[1] is not None
            except BaseException as error:  # collected: the test fails with them
                errors.append(error)
                return
            reads[index] += 1

    threads = [threading.Thread(target=committer), threading.Thread(target=packer),
               *(threading.Thread(target=reader, args=(n,)) for n in range(3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(scaled(300))
    assert not errors, errors[:3]
    assert all(reads), reads
    assert history._generation >= 10  # packs were merged that often
    assert removals[0] >= 2, removals  # and the replaced ones removed under the readers
    assert len(made) == 300
    assert_valid_git(tmp_path, "notes")


def test_packs_an_older_daemon_left_are_merged(small_packs: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Older daemons never merged packs (13 after 8 load runs, one more per ~4,000
    objects): the daemon merges them at its first maintenance."""
    config = history_config(public_tmpdir())
    root = Path(str(config["root"]))
    with monkeypatch.context() as older:  # packs as an older daemon made them
        older.setattr(packs, "rollup", lambda found: [])
        history = StoreHistory(repo_path(root, "notes"), "notes")
        commit_many(history, 100)
        maintain(history)
    (root / "stores" / "notes" / "d0").mkdir(parents=True)
    for rel, data in tree_files(commits(root, "notes")[0]).items():
        (root / "stores" / "notes" / rel).parent.mkdir(exist_ok=True)
        (root / "stores" / "notes" / rel).write_bytes(data)
    before = len(pack_ids(root, "notes"))
    assert before > 20
    with Daemon(config):
        deadline = time.monotonic() + scaled(60)
        while len(pack_ids(root, "notes")) >= before or loose_files(root, "notes"):
            assert time.monotonic() < deadline, "packs not merged after 60 s"
            time.sleep(0.1)
    found = pack_ids(root, "notes")
    assert len(found) <= 2, [len(ids) for ids in found]  # the old ones merged in one
    assert len(commits(root, "notes")) == 100  # nothing to recover: the files are main's
    assert tree_files(commits(root, "notes")[0]) == store_files(root, "notes")
    assert_valid_git(root, "notes")


def test_packing_goes_on_after_an_object_it_cannot_read(
        tmp_path: Path, small_packs: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loose objects are checked at the first packing (what earlier daemons left), not
    each time after; one that cannot be read later (here: emptied behind the daemon's
    back) fails that packing, and the next one checks every object, removes it and
    packs the rest."""
    monkeypatch.setattr(maintenance, "PACK_RETRY", 0.0)
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    commit_many(history, 10)
    maintain(history)
    commit_many(history, 10, seed=1)
    victim = max(loose_files(tmp_path, "notes"), key=lambda path: path.stat().st_size)
    victim.write_bytes(b"")
    assert history.pack() == 0  # failed (logged), to be tried again
    assert history.needs_pack()
    assert history.pack() > 0
    assert not loose_files(tmp_path, "notes")
    git_ok = subprocess.run(["git", "--git-dir", str(history.path), "count-objects", "-v"],
                            capture_output=True, text=True, check=True).stdout
    assert "count: 0" in git_ok


def test_what_libgit2_keeps_of_the_history_is_bounded() -> None:
    """The limits docs/design/crash-safety.md gives, as the daemon sets them when it
    loads the history
    (libgit2's defaults: a 256 MiB object cache, 8 GiB of packs mapped, no limit on
    open pack files): a soak's RSS then levels off (scripts/bench_soak.py)."""
    option = pygit2.enums.Option
    assert pygit2.option(option.GET_CACHED_MEMORY)[1] == 16 << 20
    assert pygit2.option(option.GET_MWINDOW_MAPPED_LIMIT) == 64 << 20
    assert pygit2.option(option.GET_MWINDOW_FILE_LIMIT) == 128


def verify_packs(repo: Path) -> None:
    """`git verify-pack` checks each pack and its index whole (an object twice in one
    pack fails it, which `git fsck` lets pass)."""
    for index in (repo / "objects" / "pack").glob("*.idx"):
        done = subprocess.run(["git", "verify-pack", str(index)], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr + done.stdout


def test_a_batch_is_one_pack_that_git_reads(tmp_path: Path) -> None:
    """A batch's commits are written as one pack (gitobjects.write_pack), nothing
    loose: git reads every commit, tree and blob, and checks the pack and index."""
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    big = os.urandom(200_000)
    planned = [history_module.Planned([("a/one.md", b"one\n")], "alice", "alice@x.invalid",
                                      "write notes/a/one.md\n"),
               history_module.Planned([("big.bin", big)], "bob", "bob@x.invalid",
                                      "write notes/big.bin\n"),
               history_module.Planned([("a/one.md", None)], "alice", "alice@x.invalid",
                                      "delete notes/a/one.md\n")]
    ids = history.prepare_batch(planned, parent=None)
    assert loose_files(tmp_path, "notes") == []
    assert len(pack_ids(tmp_path, "notes")) == 1
    history.advance(ids[-1])
    made = commits(tmp_path, "notes")
    assert [str(c.id) for c in made] == ids[::-1]
    assert [c.author.name for c in made] == ["alice", "bob", "alice"]
    assert tree_files(made[1]) == {"a/one.md": b"one\n", "big.bin": big}
    assert tree_files(made[0]) == {"big.bin": big}
    verify_packs(repo_path(tmp_path, "notes"))
    assert_valid_git(tmp_path, "notes")


def test_a_merge_keeps_each_object_once(tmp_path: Path) -> None:
    """Batches may repeat objects some pack holds (the same bytes written again, and
    then the same trees): the merged pack holds each object once, also where the packs
    hold deltas (libgit2's packs of loose objects: a delta's base is never left out,
    nor an entry a delta reaches across), and git checks every pack and reads every
    version."""
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    base = os.urandom(30_000)
    versions = [base + b"edit %d\n" % n for n in range(6)]  # similar: libgit2 deltifies
    for n, data in enumerate(versions[:3]):  # loose, then packed with deltas
        history.commit([Change("doc.md", history.blob(data))], author="alice",
                       email="alice@x.invalid", message=f"write notes/doc.md {n}\n")
    history.pack()
    (deltas,) = (repo_path(tmp_path, "notes") / "objects" / "pack").glob("*.idx")
    shown = subprocess.run(["git", "verify-pack", "-v", str(deltas)], capture_output=True,
                           text=True, check=True).stdout
    assert "chain length = 1" in shown  # the pack holds deltas
    head = history.head_id()
    # Each batch rewrites earlier bytes: its blobs (and trees) are in other packs too.
    for data in [versions[0], versions[3], versions[1], versions[3], versions[2]]:
        planned = [history_module.Planned([("doc.md", data)], "bob", "bob@x.invalid",
                                          "write notes/doc.md\n")]
        head = history.prepare_batch(planned, parent=head)[-1]
        history.advance(head)
    listed = packs.listed(repo_path(tmp_path, "notes") / "objects" / "pack")
    assert len(listed) == 6
    ids = [oid for found in pack_ids(tmp_path, "notes") for oid in found]
    assert len(ids) > len(set(ids))  # objects in several packs
    packs.merge(listed, repo_path(tmp_path, "notes") / maintenance.MERGE_RECORD)
    packs.finish(repo_path(tmp_path, "notes") / maintenance.MERGE_RECORD,
                 listed[0].index.parent)
    merged = pack_ids(tmp_path, "notes")
    assert len(merged) == 1 and len(merged[0]) == len(set(ids))
    verify_packs(repo_path(tmp_path, "notes"))
    assert_valid_git(tmp_path, "notes")
    contents = [tree_files(c)["doc.md"] for c in commits(tmp_path, "notes")]
    assert contents == [versions[n] for n in (2, 3, 1, 3, 0, 2, 1, 0)]


def test_the_packs_of_batches_are_merged_once_many(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch writes a small pack; once PACKS_BEFORE_MERGE were written the
    history asks to be packed, and the maintenance merges them."""
    monkeypatch.setattr(maintenance, "MERGE_GRACE", 0.0)  # no reader lags behind here
    history = StoreHistory(repo_path(tmp_path, "notes"), "notes")
    maintain(history)  # the first maintenance (start-up) is done
    head = None
    for n in range(maintenance.PACKS_BEFORE_MERGE + 1):
        assert not history.needs_pack(), n
        planned = [history_module.Planned([(f"f{n % 7}.md", b"batch %d\n" % n)], "alice",
                                          "alice@x.invalid", "write\n")]
        head = history.prepare_batch(planned, parent=head)[-1]
        history.advance(head)
    assert history.needs_pack()
    assert len(pack_ids(tmp_path, "notes")) == maintenance.PACKS_BEFORE_MERGE + 1
    maintain(history)
    assert len(pack_ids(tmp_path, "notes")) <= 2
    assert len(commits(tmp_path, "notes")) == maintenance.PACKS_BEFORE_MERGE + 1
    assert_valid_git(tmp_path, "notes")
