"""The search op's ``format: "json"`` through the real socket and the real jailed rg:
structured matches, the same refusals and not-founds as the text, and bytes that are
not UTF-8."""

from __future__ import annotations

import pytest

from memfs.control.client import MemfsClientError
from tests.jail.tools.conftest import Memory
from tests.support import UID_A, UID_C, connect_as


def test_matches_over_the_socket(memory: Memory) -> None:
    with connect_as(UID_A, memory.socket) as alice:
        result = alice.search(["-w", "payment"], structured=True)
        text = alice.search(["-w", "payment"])
    assert result == {"matches": [{"path": "notes/bob.txt", "line": 2, "text": "payment",
                                   "submatches": [{"start": 0, "end": 7, "match": "payment"}],
                                   "before": [], "after": []}],
                      "exit_code": 0, "truncated": False, "stderr": ""}
    assert "matches" not in text and text["output"] == "notes/bob.txt:payment\n"


def test_text_that_is_not_utf8_and_offsets_in_characters(memory: Memory) -> None:
    with connect_as(UID_A, memory.socket) as alice:
        alice.write("notes/bytes/latin1.txt", b"caf\xe9 \xff na\xefve Zahlung\n")
        alice.write("notes/bytes/utf8.txt", "café \u2603 naïve Zahlung\n".encode())
        found = alice.search(["Zahlung", "notes/bytes"], structured=True)["matches"]
    by_path = {match["path"]: match for match in found}
    latin1 = by_path["notes/bytes/latin1.txt"]
    assert latin1["text"] == "caf\ufffd \ufffd na\ufffdve Zahlung"  # one U+FFFD a byte
    utf8 = by_path["notes/bytes/utf8.txt"]
    assert utf8["text"] == "café \u2603 naïve Zahlung"
    for match in (latin1, utf8):  # in utf8.txt, rg's bytes 17..24
        [span] = match["submatches"]
        assert (span["start"], span["end"], span["match"]) == (13, 20, "Zahlung")


@pytest.mark.parametrize(("uid", "fields", "code", "words"), [
    (UID_A, {"args": ["-l", "payments"], "format": "json"}, "invalid",
     "does not go with format json"),
    (UID_A, {"args": ["--json", "payments"]}, "invalid", "--json is not allowed"),
    (UID_A, {"args": ["--json", "payments"], "format": "json"}, "invalid",
     "--json is not allowed"),
    (UID_A, {"args": ["payments"], "format": "xml"}, "invalid", "format"),
    (UID_A, {"args": ["foo("], "format": "json"}, "invalid", "regex"),
    (UID_C, {"args": ["payments", "ops"], "format": "json"}, "not_found", "ops"),
    (UID_A, {"args": ["payments", "notes/nowhere.md"], "format": "json"}, "not_found",
     "nowhere"),
])
def test_refused_as_the_text_is(memory: Memory, uid: int, fields: dict[str, object],
                                code: str, words: str) -> None:
    with connect_as(uid, memory.socket) as client, pytest.raises(MemfsClientError) as caught:
        client.call("search", **fields)
    assert caught.value.code == code and words in caught.value.message, caught.value
