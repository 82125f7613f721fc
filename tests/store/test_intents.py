"""The intent file of a store's landing (memfs/store/write/intents.py): what a reader finds
after a write, a finished landing, a torn write or a long batch."""

from __future__ import annotations

import os
from pathlib import Path

from memfs.store.write.intents import FIRST_READ, IntentFile


def test_an_intent_is_unfinished_until_main_moves_or_it_is_cleared(tmp_path: Path) -> None:
    intents = IntentFile(tmp_path / "state" / "intents" / "notes", shared=False)
    assert intents.read(None) is None
    intents.write({"batch": [["a.md", None, None, [["d1", "c1"]]]]}, "h0")
    assert intents.read("h0") == {"batch": [["a.md", None, None, [["d1", "c1"]]]]}
    assert intents.read("c1") is None  # main moved on: finished
    assert intents.read("c1", any_head=True) is not None  # the history cannot be read
    intents.write({"x": 1}, None)  # without history: unfinished until cleared
    assert intents.read(None) == {"x": 1}
    intents.clear()
    assert intents.read(None) is None
    assert os.path.getsize(tmp_path / "state" / "intents" / "notes") == 0
    intents.close()


def test_a_torn_or_damaged_intent_is_none(tmp_path: Path) -> None:
    """What a power loss can leave (a part of the write, or bytes of an older one after
    a shorter header) never reads as an intent: its landing had not begun."""
    path = tmp_path / "notes"
    intents = IntentFile(path, shared=False)
    intents.write({"records": [["alice", 0, 1, "d" * 64]] * 5}, None)
    whole = path.read_bytes()
    for cut in (5, len(whole) // 2, len(whole) - 1):
        path.write_bytes(whole[:cut])
        assert intents.read(None) is None, cut
    path.write_bytes(whole.replace(b"alice", b"alicf"))
    assert intents.read(None) is None
    path.write_bytes(b"memfs-intent 12 x -\n{}")
    assert intents.read(None) is None
    intents.close()


def test_a_long_intent_is_read_whole(tmp_path: Path) -> None:
    """A batch of many changes names them all: longer than the first read."""
    intents = IntentFile(tmp_path / "notes", shared=False)
    intent = {"records": [["agent", n, 1, f"{n:064x}"] for n in range(200)]}
    intents.write(intent, "h")
    assert os.path.getsize(tmp_path / "notes") > 2 * FIRST_READ
    assert intents.read("h") == intent
    intents.write({"short": True}, "h")  # shorter than what it overwrites
    assert intents.read("h") == {"short": True}
    intents.close()
