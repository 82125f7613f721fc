"""Recall's index, daemon-free on a real tantivy index (memfs/recall/index.py): puts,
removes and searches, each store's files apart; and its guard against a file truncated
under it (reading a truncated memory-mapped page would end the process), which must not
mistake a file tantivy replaced (meta.json after a merge, a new inode, maybe shorter)
for one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memfs.recall.index import IndexFailed, RecallIndex
from memfs.recall.text import fields_of, query_terms
from memfs.store.paths import MemPath


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
