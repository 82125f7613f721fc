"""Recall's index, daemon-free on a real tantivy index (memfs/recall/index.py): puts,
removes and searches, each store's files apart; and its guard against a file truncated
under it (reading a truncated memory-mapped page would end the process), which must not
mistake a file tantivy replaced (meta.json after a merge, a new inode, maybe shorter)
for one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from memfs.recall.embed import quantize
from memfs.recall.index import IndexFailed, RecallIndex
from memfs.recall.text import fields_of, query_terms
from memfs.store.fs.paths import MemPath


def filled(directory: Path, count: int = 3) -> RecallIndex:
    index = RecallIndex(directory)
    for store in ("notes", "ops"):
        for n in range(count):
            path = MemPath(store, ("dir", f"{n}.md"))
            index.put(path, 10, n, fields_of(path.rel, f"# Retry queue {n}\n".encode()))
            index.commit()
    return index


def test_put_remove_search_and_reopen(tmp_path: Path) -> None:
    index = filled(tmp_path / "i")
    assert sorted(str(m.path) for m in index.search(query_terms("retry queues"), ["ops"],
                                                    10)) == \
        ["ops/dir/0.md", "ops/dir/1.md", "ops/dir/2.md"]
    assert len(index.search(query_terms("retry"), ["notes", "ops"], 10)) == 6
    assert index.search(query_terms("retry"), [], 10) == []
    index.remove(MemPath("notes", ("dir", "1.md")))
    index.commit()
    assert index.known("notes") == {"dir/0.md": (10, 0), "dir/2.md": (10, 2)}
    index.close()
    again = RecallIndex(tmp_path / "i")
    assert again.count() == 5 and again.size_bytes() > 0


def test_a_replaced_file_is_not_a_truncated_one(tmp_path: Path) -> None:
    index = filled(tmp_path / "i")
    meta = tmp_path / "i" / "meta.json"
    shorter = tmp_path / "i" / "meta.json.new"
    shorter.write_bytes(meta.read_bytes()[:10])
    os.rename(shorter, meta)  # as tantivy replaces it: atomically, a new inode
    index.check()
    segment = next(p for p in (tmp_path / "i").iterdir() if p.suffix == ".idx")
    os.truncate(segment, 0)
    with pytest.raises(IndexFailed, match="truncated"):
        index.check()
    with pytest.raises(IndexFailed):
        index.search(query_terms("retry"), ["notes"], 10)


def test_a_file_read_whole_is_never_taken_for_a_truncated_one(tmp_path: Path) -> None:
    """tantivy rewrites .managed.json and meta.json under a new name it renames over the
    old: the new file may take an inode number freed earlier and be shorter than the
    file that had it then (seen: a 100,000-file index rebuilt for it). Only the files it
    memory-maps count."""
    index = filled(tmp_path / "i")
    for name in (".managed.json", "meta.json"):
        path = tmp_path / "i" / name
        inode, size = os.stat(path).st_ino, os.stat(path).st_size  # as at the commit
        path.write_bytes(path.read_bytes()[:size // 2])  # the same inode, shorter
        assert os.stat(path).st_ino == inode
    index.check()
    segment = next(p for p in (tmp_path / "i").iterdir() if p.suffix == ".term")
    os.truncate(segment, 1)
    with pytest.raises(IndexFailed, match="truncated"):
        index.check()


@pytest.mark.parametrize("garbage", [b"", b"\x00" * 100, b"not an index"])
def test_what_cannot_be_opened_is_refused(tmp_path: Path, garbage: bytes) -> None:
    filled(tmp_path / "i").close()
    for path in (tmp_path / "i").iterdir():
        if path.name != "memfs-format":
            path.write_bytes(garbage)
    with pytest.raises(IndexFailed):
        RecallIndex(tmp_path / "i")
    (tmp_path / "i" / "memfs-format").write_text("memfs-recall-1")
    with pytest.raises(IndexFailed, match="another format"):
        RecallIndex(tmp_path / "i")


def test_vectors_follow_puts_removes_and_stores(tmp_path: Path) -> None:
    """The in-memory vectors change with each commit, as the index does, are limited to
    the stores asked, score a file by its best chunk, survive a reopen, and drop the
    rows of files removed or replaced (compacted)."""
    import numpy as np

    def unit(*values: float) -> Any:
        vector = np.zeros(4, dtype=np.float32)
        vector[:len(values)] = values
        return vector / np.linalg.norm(vector)

    index = RecallIndex(tmp_path / "i", "test-model", 4)
    one, two = MemPath("notes", ("a.md",)), MemPath("ops", ("b.md",))
    index.put(one, 1, 1, fields_of("a.md", b"a"), quantize(np.stack([unit(1), unit(0, 1)])))
    index.put(two, 1, 1, fields_of("b.md", b"b"), quantize(np.stack([unit(1, 1)])))
    assert index.nearest(unit(0, 1), ["notes", "ops"], 10) == []  # not committed yet
    index.commit()
    found = index.nearest(unit(0, 1), ["notes", "ops"], 10)
    assert [str(m.path) for m in found] == ["notes/a.md", "ops/b.md"]
    # its second chunk (at 2 bits a dimension, 0.89 in 4 dimensions; the first: 0.27)
    assert found[0].score > 0.8
    assert [str(m.path) for m in index.nearest(unit(0, 1), ["ops"], 10)] == ["ops/b.md"]
    table = index.vectors
    assert table is not None
    for n in range(1500):  # replaced again and again: the old rows are compacted away
        table.put(f"ops/{n % 3}.md", "ops", False, quantize(np.stack([unit(1, 0, 0, n)])))
    assert table._used < 1100
    for n in range(3):
        table.remove(f"ops/{n}.md")
    index.put(one, 1, 2, fields_of("a.md", b"a"), quantize(np.stack([unit(0, 0, 1)])))
    index.remove(two)
    index.commit()
    assert [str(m.path) for m in index.nearest(unit(0, 0, 1), ["notes", "ops"], 10)] == \
        ["notes/a.md"]
    index.close()
    again = RecallIndex(tmp_path / "i", "test-model", 4)
    assert [str(m.path) for m in again.nearest(unit(0, 0, 1), ["notes"], 10)] == \
        ["notes/a.md"]
    again.close()
    with pytest.raises(IndexFailed, match="another format"):  # vectors of another model
        RecallIndex(tmp_path / "i", "other-model", 4)
