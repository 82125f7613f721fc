"""Fast checks of the tool layer's text, without a daemon: paging, long lines, notes,
conflict wording, search results, reconnecting."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from memfs.control.client import ConflictError, ConnectionFailed
from memfs.control.client.client import SocketTransport
from memfs.control.mcp import storage as t


def read_result(text: str, total: int, **extra: Any) -> dict[str, Any]:
    return {"path": "notes/a.md", "digest": "d", "size": len(text), "text": text,
            "total_lines": total, "changed_since_last_read": False, "last_writer": "bob",
            "last_written_at": 0.0, **extra}


def test_read_numbers_lines_like_cat_n() -> None:
    out = t.format_read("notes/a.md", 1, read_result("a\n\tb\n\nlast", 4)).text
    assert out.splitlines() == ["     1\ta", "     2\t\tb", "     3\t", "     4\tlast"]


def test_read_hint_and_end_of_file() -> None:
    first = t.format_read("notes/a.md", 1, read_result("x\n" * 10, 25))
    assert first.text.endswith('continue with storage_read(path="notes/a.md", offset=11).]')
    assert first.meta["next_offset"] == 11
    last = t.format_read("notes/a.md", 21, read_result("x\n" * 5, 25))
    assert last.text.splitlines()[0] == "    21\tx"
    assert last.text.endswith("[Lines 21-25 of 25: end of file.]")
    big = t.format_read("notes/a.md", 999_999, read_result("x\n", 1_000_000))
    assert big.text.splitlines()[0] == "999999\tx"


def test_read_changed_note_empty_past_end_binary() -> None:
    changed = t.format_read("notes/a.md", 1, read_result(
        "x\n", 1, changed_since_last_read=True, last_written_at=86400.0))
    assert changed.text.splitlines()[0] == (
        '[Note: "notes/a.md" changed since you last read it; last written by "bob" at '
        "1970-01-02 00:00:00 UTC. Below is the current version.]")
    assert t.format_read("notes/a.md", 1, read_result("", 0)).text == '("notes/a.md" is empty)'
    assert "past the end" in t.format_read("notes/a.md", 9, read_result("", 3)).text
    assert "binary" in t.format_read("notes/a.md", 1, read_result("a\x00b\n", 1)).text


def test_read_caps_long_lines_and_page_size() -> None:
    long_line = "y" * (t.MAX_LINE_CHARS + 50)
    out = t.format_read("notes/a.md", 1, read_result(long_line + "\n", 1)).text
    assert "[50 more characters on this line]" in out
    many = "z" * 1000 + "\n"
    page = t.format_read("notes/a.md", 1, read_result(many * 500, 500))
    assert len(page.text) < t.MAX_OUTPUT_CHARS + 500
    shown = page.meta["next_offset"] - 1
    assert 50 < shown < 500
    assert f"offset={shown + 1})" in page.text


def test_search_results() -> None:
    assert t.format_search({"output": "", "exit_code": 1, "truncated": False,
                            "stderr": ""}).text == "No matches."
    hit = t.format_search({"output": "notes/a.md:3:x\n", "exit_code": 0, "truncated": True,
                           "stderr": ""})
    assert hit.text.startswith("notes/a.md:3:x\n[Output truncated")
    failed = t.format_search({"output": "", "exit_code": 2, "truncated": False,
                              "stderr": "regex parse error"})
    assert failed.is_error and "regex parse error" in failed.text
    partial = t.format_search({"output": "notes/a.md:1:x\n", "exit_code": 2,
                               "truncated": False, "stderr": "permission"})
    assert not partial.is_error and "problems" in partial.text
    assert partial.structured == {"output": "notes/a.md:1:x\n", "exit_code": 2,
                                  "truncated": False}


def match(path: str, line: int, text: str) -> dict[str, Any]:
    return {"path": path, "line": line, "text": text, "submatches": [], "before": [],
            "after": []}


def test_search_matches_print_as_rg_and_are_cut_with_the_text() -> None:
    """Structured matches: the text is rg's layout, and the structured content holds
    the matches the text shows, whole, within MAX_OUTPUT_CHARS."""
    found = [match("notes/a.md", 3, "x"), {**match("notes/b.md", 9, "y"),
                                            "before": [{"line": 8, "text": "w"}]}]
    outcome = t.format_search({"matches": found, "exit_code": 0, "truncated": False,
                               "stderr": ""}, context=True)
    assert outcome.text == "notes/a.md:3:x\n--\nnotes/b.md-8-w\nnotes/b.md:9:y"
    assert outcome.structured == {"matches": found, "exit_code": 0, "truncated": False}
    many = [match("notes/a.md", n, "z" * 1000) for n in range(1, 201)]
    cut = t.format_search({"matches": many, "exit_code": 0, "truncated": False,
                           "stderr": ""})
    assert cut.structured is not None and cut.structured["truncated"]
    shown = cut.structured["matches"]
    assert 0 < len(shown) < len(many) and shown == many[:len(shown)]
    assert cut.text.count("\n") == len(shown)  # the lines shown, then the note
    assert "[Output truncated" in cut.text.splitlines()[-1]
    none = t.format_search({"matches": [], "exit_code": 1, "truncated": False, "stderr": ""})
    assert none.text == "No matches."


def conflict(**details: Any) -> ConflictError:
    base = {"path": "notes/a.md", "current_digest": "c", "seen_digest": "s",
            "last_writer": "bob", "last_written_at": 0.0}
    return ConflictError("conflict", {**base, **details})


def test_conflict_wording() -> None:
    changed = t.conflict_outcome(conflict(), "notes/a.md", "write")
    assert changed.is_error
    assert changed.text.startswith('CONFLICT: your write was NOT applied: "notes/a.md" was '
                                   'changed by "bob" at 1970-01-01 00:00:00 UTC')
    assert "storage_read" in changed.text and "force=true" in changed.text
    unseen = t.conflict_outcome(conflict(seen_digest=None), None, "upload").text
    assert "you have not read it yet" in unseen and "storage_download" in unseen
    deleted = t.conflict_outcome(conflict(current_digest=None, last_writer=None), None,
                                 "write").text
    assert "was deleted" in deleted
    taken = t.conflict_outcome(ConflictError("notes/a.md/x cannot be made: 'a.md' is a "
                                             "file, not a folder"), None, "write")
    assert taken.is_error and taken.text == (
        "CONFLICT: your write was NOT applied: notes/a.md/x cannot be made: 'a.md' is a "
        "file, not a folder.")


class FakeClient:
    def __init__(self, fail: int) -> None:
        self.fail = fail
        self._sock, self.peer = socket.socketpair()
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self._sock.close()
        self.peer.close()

    peer_closed = SocketTransport.peer_closed  # the real check, on this socketpair


def test_connection_reopens_a_closed_socket_and_retries_reads() -> None:
    made: list[FakeClient] = []

    def factory(path: str, agent: str | None) -> Any:
        made.append(FakeClient(0))
        return made[-1]

    conn = t.Connection("/nowhere", None, factory=factory)
    assert conn.run(lambda c: 1, idempotent=False) == 1
    made[0].peer.close()  # the daemon went away between calls
    assert conn.run(lambda c: 2, idempotent=False) == 2
    assert len(made) == 2 and made[0].closed

    def broken(client: Any) -> int:
        if client is made[1]:
            raise ConnectionFailed("gone")
        return 3

    assert conn.run(broken, idempotent=True) == 3  # retried on a fresh connection
    assert len(made) == 3

    def broken_write(client: Any) -> int:
        raise ConnectionFailed("gone")

    with pytest.raises(ConnectionFailed):
        conn.run(broken_write, idempotent=False)  # a write is never retried
    assert len(made) == 3
    conn.close()
