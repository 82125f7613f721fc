"""One mistake, one answer, in process: a store the agent does not have (whether there
is one or not) and a path that does not exist are NotFound, whatever reads, lists,
writes or logs it, with the names the agent may have meant (memfs/store/read/near.py),
drawn only from what it can see: its own stores, and the folders and files memfs
shows in the deepest folder of the path that exists."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.config import parse_config
from memfs.store.engine import Engine
from memfs.store.errors import NotFound, PermissionDenied
from memfs.store.fs.paths import MemPath, parse_path
from memfs.store.read.near import closest, no_path, no_store
from tests.support import public_tmpdir, standard_config


def test_the_messages() -> None:
    assert str(no_store("nots", ["notes", "ops"])) == \
        'no store named "nots" (did you mean "notes"?)'
    assert no_store("nots", ["notes"]).near == ["notes"]
    assert str(no_store("zzz", ["notes"])) == 'no store named "zzz"'
    missing = no_path(MemPath("notes", ("a", "tow.md")), 1, ["two.md", "zebra"])
    assert str(missing) == 'notes/a/tow.md does not exist (did you mean "notes/a/two.md"?)'
    assert missing.near == ["notes/a/two.md"]
    folder = no_path(MemPath("notes", ("b", "c", "d.md")), 0, ["a", "bb"])
    assert str(folder) == ('notes/b/c/d.md does not exist (no folder "notes/b"; did you mean '
                           '"notes/bb"?)')
    assert len(closest("note", [f"note{n}" for n in range(10)])) == 3  # a few, not all
    assert str(no_store("cafe", ["café"])) == 'no store named "cafe" (did you mean "café"?)'
    assert str(no_store("x\u202e", [])) == 'no store named "x\\u202e"'  # escaped, never shown


@pytest.fixture
def engine() -> Iterator[Engine]:
    made = Engine.of(parse_config(standard_config(public_tmpdir())))
    try:
        yield made
    finally:
        made.close()


def store_dir(engine: Engine, store: str) -> Path:
    return engine.root / "stores" / store


def test_a_store_the_agent_does_not_have_is_not_found(engine: Engine) -> None:
    engine.write("alice", parse_path("notes/x.md"), b"x\n")
    for store in ("secret", "secrt", "nots"):  # alice has notes and ops, not secret
        with pytest.raises(NotFound) as caught:
            engine.read_bytes("alice", parse_path(f"{store}/x.md"))
        assert "secret" not in caught.value.near  # never revealed
        with pytest.raises(NotFound):
            engine.write("alice", parse_path(f"{store}/x.md"), b"x\n")
        with pytest.raises(NotFound):
            engine.list("alice", [f"{store}/**"])
        with pytest.raises(NotFound):
            engine.history.log("alice", parse_path(store, allow_store_only=True))
    with pytest.raises(NotFound) as caught:
        engine.read_bytes("alice", parse_path("nots/x.md"))
    assert caught.value.near == ["notes"]
    with pytest.raises(PermissionDenied, match="read-only"):  # a store it has, read-only
        engine.write("carol", parse_path("notes/x.md"), b"carol\n", force=True)


def test_a_missing_path_suggests_only_what_memfs_shows(engine: Engine) -> None:
    engine.write("alice", parse_path("notes/a/two.md"), b"2\n")
    engine.write("alice", parse_path("notes/a/deep/three.md"), b"3\n")
    folder = store_dir(engine, "notes") / "a"
    os.symlink("/etc/passwd", folder / "tow.link")  # planted: memfs never shows these
    (engine.root / "elsewhere").write_bytes(b"not memfs's\n")
    os.link(engine.root / "elsewhere", folder / "tow.hard")
    os.mkfifo(folder / "tow.fifo")
    with pytest.raises(NotFound) as caught:
        engine.read_bytes("alice", parse_path("notes/a/tow.md"))
    assert caught.value.near == ["notes/a/two.md"]  # not tow.link, tow.hard, tow.fifo
    assert str(caught.value).startswith("notes/a/tow.md does not exist")
    with pytest.raises(NotFound) as caught:
        engine.list("alice", ["notes/a/deap/**"])
    assert caught.value.near == ["notes/a/deep"]
    with pytest.raises(NotFound) as caught:
        engine.info("alice", parse_path("notes/aa/two.md"))
    assert 'no folder "notes/aa"' in str(caught.value) and caught.value.near == ["notes/a"]
    with pytest.raises(NotFound, match=r"notes/a/tow\.md does not exist"):
        engine.delete("alice", parse_path("notes/a/tow.md"))
    with pytest.raises(NotFound, match=r"notes/a/tow\.md does not exist"):
        engine.history.log("alice", parse_path("notes/a/tow.md"))
    # what exists is found, whatever it is; a wildcard that matches nothing is no error
    assert engine.list("alice", ["notes/a/two.md"]) == ["notes/a/two.md"]
    assert engine.list("alice", ["notes/a"]) == ["notes/a/deep/three.md", "notes/a/two.md"]
    assert engine.list("alice", ["notes/a/*.csv"]) == []
    engine.require("alice", parse_path("notes/a/tow.link"))  # there, though hidden
    engine.delete("alice", parse_path("notes/a/two.md"))
    assert engine.history.log("alice", parse_path("notes/a/two.md"))  # deleted, in history
    assert engine.history.log("alice", parse_path("notes/a/two.md"), author="bob") == []
    assert engine.history.log("alice", parse_path("notes/a/two.md"), author="alice")


def test_a_glob_that_climbs_out_is_refused(engine: Engine) -> None:
    from memfs.store.errors import InvalidInput

    with pytest.raises(InvalidInput):
        engine.list("alice", ["notes/../ops/**"])
