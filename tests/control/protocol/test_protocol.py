"""The wire protocol without a socket: decoding, validation, encoding."""

from __future__ import annotations

import json

import pytest

from memfs.control import protocol as p
from memfs.control.client import encode_request
from memfs.control.ops import storage as s
from memfs.control.ops.registry import decode_request


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b"not json", "not valid JSON"),
        (b"\xff\xfe{}", "not valid UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"op": "explode"}', "unknown op 'explode'"),
        (b'{"id": 1}', "unknown op None"),
        (b'{"op": "read"}', "path is required"),
        (b'{"op": "read", "path": 5}', "path must be text, not a number"),
        (b'{"op": "read", "path": "a/b", "offset": 0}', "offset"),
        (b'{"op": "read", "path": "a/b", "surprise": 1}', 'unknown field "surprise"'),
        (b'{"op": "write", "path": "a/b"}', "exactly one of content"),
        (b'{"op": "write", "path": "a/b", "content": "x", "sed": ["p"]}', "exactly one of"),
        (b'{"op": "write", "path": "a/b", "sed": ["p"], "append": true}', "append cannot"),
        (b'{"op": "write", "path": "a/b", "content": "x", "force": "yes"}', "force"),
        (b'{"op": "search", "args": []}', "args"),
        (b'{"op": "list", "patterns": "x"}', "patterns"),
        (b'{"op": "delete", "path": "a/b", "as_agent": 7}', "as_agent"),
    ],
)
def test_bad_requests_name_the_problem(line: bytes, fragment: str) -> None:
    with pytest.raises(p.ProtocolError) as caught:
        decode_request(line)
    assert caught.value.code == "invalid"
    assert fragment in caught.value.message


def test_error_keeps_request_id() -> None:
    with pytest.raises(p.ProtocolError) as caught:
        decode_request(b'{"op": "read", "id": 42}')
    assert caught.value.request_id == 42


def test_deeply_nested_json_is_an_error_not_a_crash() -> None:
    with pytest.raises(p.ProtocolError):
        decode_request(b"[" * 100000 + b"]" * 100000)


@pytest.mark.parametrize(
    ("op", "fields", "model"),
    [
        ("list", {"patterns": ["notes/**/*.md"]}, s.ListRequest),
        ("read", {"path": "notes/a.md", "offset": 3, "limit": 2}, s.ReadRequest),
        ("read", {"path": "notes/a.md", "encoding": "base64"}, s.ReadRequest),
        ("write", {"path": "n/a", "content": "hé", "append": True, "force": False}, s.WriteRequest),
        ("write", {"path": "n/a", "content_b64": "AAE=", "append": False, "force": True},
         s.WriteRequest),
        ("write", {"path": "n/a", "sed": ["s/a/b/"], "force": False}, s.WriteRequest),
        ("delete", {"path": "n/a", "force": True}, s.DeleteRequest),
        ("stat", {"path": "n/a"}, s.StatRequest),
        ("search", {"args": ["-i", "x"]}, s.SearchRequest),
        ("whoami", {}, s.WhoamiRequest),
    ],
)
def test_client_requests_validate_against_the_models(
    op: str, fields: dict[str, object], model: type
) -> None:
    request = decode_request(encode_request(op, 7, "bob", **fields))
    assert isinstance(request, model)
    assert request.id == 7
    assert request.as_agent == "bob"


def test_base64_content_round_trips_and_bad_base64_is_invalid() -> None:
    request = decode_request(encode_request("write", 1, None, path="n/a", content_b64="AP8="))
    assert isinstance(request, s.WriteRequest)
    assert request.data() == b"\x00\xff"
    bad = decode_request(encode_request("write", 1, None, path="n/a", content_b64="!!"))
    assert isinstance(bad, s.WriteRequest)
    with pytest.raises(p.ProtocolError):
        bad.data()


def test_replies_are_single_json_lines() -> None:
    ok = p.encode_ok(3, {"text": "a\nb"})
    assert ok.endswith(b"\n") and ok.count(b"\n") == 1
    assert json.loads(ok) == {"id": 3, "ok": True, "result": {"text": "a\nb"}}
    err = json.loads(p.encode_error(None, "conflict", "stale", {"current_digest": "x"}))
    assert err["error"] == {"code": "conflict", "message": "stale",
                            "details": {"current_digest": "x"}}


# -- issue 12: lines that used to escape the decoder or break the reply encoder --------


@pytest.mark.parametrize(
    "line",
    [
        # 5,000 digits: past Python's int-parsing limit (a plain ValueError before)
        b'{"op": "whoami", "id": ' + b"9" * 5000 + b"}",
        b'{"op": "read", "path": "notes/a", "offset": ' + b"9" * 5000 + b"}",
        b'{"op": "read", "path": "notes/a", "limit": -' + b"1" * 5000 + b"}",
        b'{"op": "read", "path": ' + b"7" * 5000 + b"}",
        b'{"op": "whoami", "x": [' + b"1" * 5000 + b"]}",
        b'{"op": "read", "path": "notes/a", "offset": 123456789012345678901}',  # 21 digits
        b'{"op": "whoami", "id": 1.' + b"5" * 5000 + b"}",
        b'{"op": "read", "path": "notes/a", "offset": NaN}',
        b'{"op": "read", "path": "notes/a", "offset": -Infinity}',
    ],
)
def test_absurd_numbers_are_invalid_not_a_crash(line: bytes) -> None:
    with pytest.raises(p.ProtocolError) as caught:
        decode_request(line)
    assert caught.value.code == "invalid"
    assert caught.value.request_id is None


@pytest.mark.parametrize(
    "line",
    [
        rb'{"op": "whoami", "id": "\ud800"}',  # the id is echoed back: it could not be
        rb'{"op": "nope", "id": "\udcff"}',  # ... and the error reply failed the same way
        rb'{"op": "write", "path": "notes/a", "content": "x\ud800y"}',  # was `internal`
        rb'{"op": "write", "path": "notes/a", "content": "\udc80"}',
        rb'{"op": "search", "args": ["\udfff"]}',
        rb'{"op": "whoami", "\ud83d": 1}',  # a key
        rb'{"op": "list", "patterns": [["\ude00"]]}',
        rb'{"op": "read", "path": "notes/\ud800"}',
    ],
)
def test_lone_surrogates_are_invalid_at_decode(line: bytes) -> None:
    with pytest.raises(p.ProtocolError) as caught:
        decode_request(line)
    assert caught.value.code == "invalid"
    assert "surrogate" in caught.value.message
    reply = p.encode_error(caught.value.request_id, "invalid", caught.value.message)
    assert json.loads(reply)["ok"] is False  # and the reply can always be encoded


def test_a_surrogate_pair_is_fine() -> None:
    request = decode_request(rb'{"op": "write", "path": "notes/a", "content": "\ud83d\ude00"}')
    assert isinstance(request, s.WriteRequest)
    assert request.data() == "\U0001f600".encode()


def test_nesting_is_bounded() -> None:
    deep = b'{"op": "whoami", "x": ' + b"[" * 40 + b"]" * 40 + b"}"
    with pytest.raises(p.ProtocolError, match="nests deeper"):
        decode_request(deep)
    shallow = b'{"op": "list", "patterns": ' + b"[" * 3 + b"]" * 3 + b"}"
    with pytest.raises(p.ProtocolError, match="patterns"):
        decode_request(shallow)  # within the bound: an ordinary validation error


@pytest.mark.parametrize("bad_id", [True, "x" * 257, 1.5, [1], {"a": 1}])
def test_only_valid_ids_are_echoed(bad_id: object) -> None:
    line = json.dumps({"op": "whoami", "id": bad_id}).encode()
    with pytest.raises(p.ProtocolError) as caught:
        decode_request(line)
    assert caught.value.request_id is None


def test_an_unencodable_reply_raises_encode_error_and_the_fallback_never_fails() -> None:
    with pytest.raises(p.EncodeError):
        p.encode_ok(1, {"text": "\ud800"})
    with pytest.raises(p.EncodeError):
        p.encode_ok(1, {"value": float("nan")})
    with pytest.raises(p.EncodeError):
        p.encode_error(1, "no_such_code", "x")
    for request_id in (7, "abc", None, "\ud800", "x" * 10_000):
        reply = json.loads(p.fallback_line(request_id))  # type: ignore[arg-type]
        assert reply["ok"] is False
        assert reply["error"]["code"] == "internal"
        assert reply["id"] in (request_id, None)
