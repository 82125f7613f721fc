"""The engine's parts, in process and without a daemon: ``engine.unrecorded`` (the
web view's reads, memfs/store/read/unrecorded.py) records nothing, not even an absence,
and checks read access; ``engine.history`` (memfs/store/history/view.py) reads the
store's own history, "since I last read it" included, and a restore goes through it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memfs.config import parse_config
from memfs.store.engine import Engine
from memfs.store.errors import NotFound
from memfs.store.fs.paths import parse_path
from tests.support import public_tmpdir, standard_config


@pytest.fixture
def engine() -> Iterator[Engine]:
    made = Engine.of(parse_config(standard_config(public_tmpdir())))
    try:
        yield made
    finally:
        made.close()


def test_unrecorded_reads_record_nothing_and_check_access(engine: Engine) -> None:
    path, missing = parse_path("notes/look/a.md"), parse_path("notes/look/missing.md")
    written = engine.write("alice", path, b"first line\nsecond line\n")
    page, info = engine.unrecorded.page("bob", path, 2, 5, max_bytes=6)
    assert (page.data, page.lines, page.total_lines, page.cut) == (b"second", 1, 2, True)
    assert info.digest == written.digest and info.size == 23
    assert info.last_writer == "alice" and info.seen is None  # bob never read it
    assert [e.rel for e in engine.unrecorded.files("bob", "notes")] == ["look/a.md"]
    found = engine.unrecorded.versions_of("bob", [path, missing])
    assert list(found) == [path] and found[path].digest == written.digest
    with pytest.raises(NotFound):
        engine.unrecorded.page("bob", missing, 1, 5, max_bytes=6)
    assert engine.seen.get("bob", path) is None and engine.seen.get("bob", missing) is None
    with pytest.raises(NotFound):  # not carol's: it does not exist for her
        engine.unrecorded.files("carol", "ops")
    with pytest.raises(NotFound):
        engine.unrecorded.versions_of("carol", [parse_path("ops/x.md")])


def test_history_reads_log_versions_and_diffs_for_an_agent(engine: Engine) -> None:
    path = parse_path("notes/story.md")
    first = engine.write("alice", path, b"one\n")
    engine.read_bytes("bob", path)  # bob has seen "one"
    second = engine.write("alice", path, b"one\ntwo\n")
    entries = engine.history.log("bob", path)
    assert [entry.rev for _store, entry in entries] == [second.commit, first.commit]
    assert engine.history.version_at("bob", path, "HEAD~1") == (first.commit, b"one\n")
    since = engine.history.diff("bob", path)  # what changed since bob read it
    assert since.new == "now" and "+two" in since.text
    assert [s for s, _entry in engine.history.log("bob", None, limit=50)] == ["notes", "notes"]
    with pytest.raises(NotFound):
        engine.history.log("carol", parse_path("ops", allow_store_only=True))
    restored = engine.restore("alice", path, "HEAD~1")  # the old version, through history
    assert restored.digest == first.digest and restored.previous == second.digest
