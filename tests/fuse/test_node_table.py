"""The mount's inode table: what one path met costs in memory, and the bounded memo of
built attributes (memfs/fuse/nodes.py). The daemon keeps a node for every path the
kernel was told about (``ls -R`` of a 100,000-file store: 100,000 nodes), so a
node's size is the daemon's size at scale."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from memfs.fuse import nodes as nodes_module
from memfs.fuse.nodes import NodeTable, _ident


def bare_table(memo: int = nodes_module.ATTRS_MEMO) -> NodeTable:
    """The table alone, as memfs.fuse.view.MemoryView builds it (no store is opened)."""
    return NodeTable(lambda store: -1, memo=memo)


def test_a_listed_file_costs_under_330_bytes(tmp_path: Path) -> None:
    """10,000 files listed (node, indexes and attributes built, as readdir does), past
    a small memo of attributes (the real one holds ATTRS_MEMO: ~2 MB). Before the
    memo was bounded, and the per-node MemPath, empty dict and index by path dropped,
    this was ~1,230 bytes a file (306 MB RSS at 100,000 files in scripts/bench
    --scale=big); ~390 before the name's bytes and the children's key tuples went."""
    (tmp_path / "f").write_text("x\n")
    st = os.stat(tmp_path / "f")
    table = bare_table(memo=16)
    store = table.child(table.root, "notes", True)
    folder = table.child(store, "d0001", True)
    names = [f"f{n:05d}.md" for n in range(10_000)]
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for name in names:
            table.attrs(table.child(folder, name, False), st)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_file = (after - before) / len(names)
    assert per_file < 330, f"{per_file:.0f} bytes a file"  # 283 now


def test_an_opened_file_keeps_under_100_bytes_more(tmp_path: Path) -> None:
    """An open makes its version the owner of the file's page cache (memfs/fuse/
    cache.py), kept after the release: its identity was a tuple of four ints, ~190
    bytes a file (13 MB more after `rg` through the mount opened 100,000 files)."""
    path = tmp_path / "f"
    path.write_text("x\n")
    table = bare_table()
    folder = table.child(table.child(table.root, "notes", True), "d", True)
    listed = [table.child(folder, f"f{n:05d}.md", False) for n in range(10_000)]
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for node in listed:
            node.owner = _ident(os.stat(path))  # as _opened sets it, from a fresh stat
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_file = (after - before) / len(listed)
    assert per_file < 100, f"{per_file:.0f} bytes a file"
    assert len({node.owner for node in listed}) == 1  # one version, one identity


def test_the_attributes_memo_is_bounded_and_rebuilds_what_it_forgot(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("one\n")
    (tmp_path / "b").write_text("three\n")
    table = bare_table(memo=2)
    store = table.child(table.root, "notes", True)
    files = [table.child(store, f"f{n}", False) for n in range(5)]
    first = [table.attrs(node, os.stat(tmp_path / "a")) for node in files]
    assert len(table._attrs_memo) == 2
    assert table.attrs(files[-1], os.stat(tmp_path / "a")) is first[-1]  # remembered
    again = table.attrs(files[0], os.stat(tmp_path / "a"))  # forgotten: built again
    assert again is not first[0]
    assert (again.st_ino, again.st_size, again.st_mtime_ns) == \
        (first[0].st_ino, first[0].st_size, first[0].st_mtime_ns)
    changed = table.attrs(files[-1], os.stat(tmp_path / "b"))  # another version
    assert changed.st_size == 6 and changed.st_ino == files[-1].ino
    assert files[-1].last_size == 6


@pytest.mark.parametrize("is_dir", [True, False])
def test_only_directories_carry_a_children_index(is_dir: bool) -> None:
    table = bare_table()
    node = table.child(table.child(table.root, "notes", True), "x", is_dir)
    assert (node.files is not None) == (node.dirs is not None) == is_dir
    assert node.name == b"x"
    assert node.mem_path().rel == "x" and node.mem_path().store == "notes"


def test_find_reaches_every_node_made_and_nothing_else() -> None:
    table = bare_table()
    store = table.child(table.root, "notes", True)
    folder = table.child(store, "a", True)
    file = table.child(folder, "b.md", False)
    same_name_dir = table.child(folder, "b.md", True)  # a name that was both, over time
    assert table.find("notes", (), True) is store
    assert table.find("notes", ("a",), True) is folder
    assert table.find("notes", ("a", "b.md"), False) is file
    assert table.find("notes", ("a", "b.md"), True) is same_name_dir is not file
    assert table.find("notes", ("a", "c.md"), False) is None
    assert table.find("notes", ("a", "b.md", "x"), False) is None  # below a file
    assert table.find("ops", ("a",), True) is None
    assert table.child(table.root, "notes", False) is store  # the root holds stores


def _stat(dev: int = 2049, ino: int = 12, mtime_ns: int = 1_700_000_000_123_456_789,
          size: int = 4096) -> os.stat_result:
    fields = [0o100444, ino, dev, 1, 0, 0, size, 0, mtime_ns // 10**9, 0]
    return os.stat_result(fields, {"st_mtime_ns": mtime_ns})


@pytest.mark.parametrize("changed", [
    {"dev": 2050}, {"ino": 13}, {"mtime_ns": 1_700_000_000_123_456_790}, {"size": 4097},
    {"ino": 12 + (1 << 40)}, {"size": 0}, {"mtime_ns": -1}, {"dev": (1 << 64) - 1},
    {"ino": (1 << 64) - 1}, {"size": (1 << 63) - 1},
])
def test_a_version_identity_tells_every_field_apart(changed: dict[str, int]) -> None:
    """The page cache's owner is one int packing (dev, ino, mtime_ns, size) in 64 bits
    each: a change in any one field, at any of its bits, is another version."""
    assert _ident(_stat(**changed)) != _ident(_stat())
    assert _ident(_stat(**changed)) == _ident(_stat(**changed))
