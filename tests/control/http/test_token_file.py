"""The token file (memfs/tokens.py) on its own: hashes only, constant-time checks,
revocation and expiry, atomic 0600 writes, last use written only by a flush, and a
malformed file that is refused rather than overwritten."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from memfs.errors import MemfsError
from memfs.store.errors import InvalidInput, NotFound
from memfs.tokens import Tokens


@pytest.fixture
def tokens(tmp_path: Path) -> Tokens:
    return Tokens(tmp_path)


def test_create_verify_and_hash_only(tokens: Tokens, tmp_path: Path) -> None:
    token, record = tokens.create("alice", "laptop")
    assert token.startswith(f"memfs_{record.id}_") and len(token) > 50
    assert tokens.verify(token) == record
    text = (tmp_path / "tokens.json").read_text()
    assert token not in text and token.split("_", 2)[2] not in text
    assert record.hash in text
    assert stat.S_IMODE((tmp_path / "tokens.json").stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    second, _ = tokens.create("alice")
    assert second != token and tokens.verify(second) is not None


@pytest.mark.parametrize("mangle", [
    lambda t: t[:-1] + ("a" if t[-1] != "a" else "b"), lambda t: t + "x", lambda t: t[:-5],
    lambda t: t.upper(), lambda t: "memfs_" + "0" * 12 + t[18:], lambda t: "",
    lambda t: t.replace("memfs_", "mfs_"),
])
def test_wrong_tokens_are_refused(tokens: Tokens, mangle) -> None:  # type: ignore[no-untyped-def]
    token, _ = tokens.create("alice")
    assert tokens.verify(mangle(token)) is None


def test_revoke_and_expiry(tokens: Tokens) -> None:
    token, _ = tokens.create("bob", expires_days=1, now=1000.0)
    assert tokens.verify(token, now=1000.0 + 86399) is not None
    assert tokens.verify(token, now=1000.0 + 86400) is None
    assert [r.state(1000.0 + 86400) for r in tokens.list()] == ["expired"]
    other, other_record = tokens.create("bob")
    revoked = tokens.revoke(other_record.id)
    assert revoked.revoked is not None and tokens.verify(other) is None
    assert tokens.revoke(other_record.id).revoked == revoked.revoked  # idempotent
    with pytest.raises(NotFound):
        tokens.revoke("0123456789ab")


def test_another_instance_sees_changes(tmp_path: Path) -> None:
    """Two daemons on one root: each has its own Tokens on the same file."""
    first, second = Tokens(tmp_path), Tokens(tmp_path)
    token, record = first.create("alice")
    assert second.verify(token) is not None
    first.revoke(record.id)
    assert second.verify(token) is None


def test_last_use_is_written_only_by_flush(tokens: Tokens, tmp_path: Path) -> None:
    token, _ = tokens.create("alice")
    before = os.stat(tmp_path / "tokens.json").st_mtime_ns
    for _ in range(50):
        assert tokens.verify(token, now=5000.0) is not None
    assert os.stat(tmp_path / "tokens.json").st_mtime_ns == before
    assert tokens.list()[0].last_used == 5000.0  # known in memory
    assert tokens.flush_usage() == 1
    on_disk = json.loads((tmp_path / "tokens.json").read_text())["tokens"][0]
    assert on_disk["last_used"] == 5000.0
    assert tokens.flush_usage() == 0  # nothing new: no write


def test_bad_labels_and_expiry(tokens: Tokens) -> None:
    for label in ("two\nlines", "x" * 201):
        with pytest.raises(InvalidInput):
            tokens.create("alice", label)
    for days in (0, -1, 10_000):
        with pytest.raises(InvalidInput):
            tokens.create("alice", expires_days=days)
    assert tokens.list() == []


def test_malformed_file_is_refused_not_overwritten(tokens: Tokens, tmp_path: Path) -> None:
    (tmp_path / "tokens.json").write_text("{not json")
    assert tokens.verify("memfs_0123456789ab_x") is None
    with pytest.raises(MemfsError, match="malformed"):
        tokens.create("alice")
    assert (tmp_path / "tokens.json").read_text() == "{not json"
