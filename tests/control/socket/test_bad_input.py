"""Bad input over the real socket: a clear error code, nothing changed, daemon up."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator

import pytest

from memfs.control.client import TooLargeError
from tests.support import UID_A, Daemon, as_euid, connect_as, public_tmpdir, standard_config

MAX_FILE = 64 * 1024


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(standard_config(public_tmpdir(), max_file_size=MAX_FILE)) as running:
        with connect_as(UID_A, running.socket) as alice:
            alice.write("notes/keep.md", "precious\n")
        yield running


def raw_exchange(daemon: Daemon, payload: bytes) -> list[dict[str, object]]:
    with as_euid(UID_A):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(daemon.socket))
    with sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return [json.loads(line) for line in data.splitlines()]


def assert_unchanged(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        assert alice.list("notes/**") == ["notes/keep.md"]
        assert alice.read("notes/keep.md")["text"] == "precious\n"


@pytest.mark.parametrize(
    ("payload", "code", "fragment"),
    [
        (b"{oops\n", "invalid", "not valid JSON"),
        (b'{"op": "format_disk"}\n', "invalid", "unknown op"),
        (b'{"op": "write", "path": 7, "content": "x"}\n', "invalid", "path"),
        (b'{"op": "write", "path": "notes/keep.md", "content": 5}\n', "invalid", "content"),
        (b'{"op": "read", "path": "notes/keep.md", "limit": -1}\n', "invalid", "limit"),
        (b'\xff\xfe\xfd\n', "invalid", "UTF-8"),
        (b'{"op": "write", "path": "notes/../ops/x", "content": "x", "force": true}\n',
         "invalid", "'..'"),
        (b'{"op": "write", "path": "/etc/passwd", "content": "x", "force": true}\n',
         "invalid", "absolute"),
        (b'{"op": "write", "path": "notes/a\\u0000b", "content": "x"}\n', "invalid", "NUL"),
        (b'{"op": "write", "path": "notes/a\\nb", "content": "x"}\n', "invalid", "control"),
        (b'{"op": "write", "path": "notes/a\\udcffb", "content": "x"}\n', "invalid", ""),
        (b'{"op": "write", "path": "notes/keep.md/x", "content": "x", "force": true}\n',
         "conflict", "is a file, not a folder"),
        (b'{"op": "write", "path": "notes/' + b"d/" * 80 + b'x", "content": "x"}\n',
         "invalid", "deeper"),
        (b'{"op": "write", "path": "notes/big", "content_b64": "!!!"}\n', "invalid", "base64"),
        # issue 12: each of these ended the daemon (mount unmounted, socket removed)
        (b'{"op": "whoami", "id": ' + b"9" * 5000 + b"}\n", "invalid", "digits"),
        (b'{"op": "read", "path": "notes/keep.md", "offset": ' + b"9" * 5000 + b"}\n",
         "invalid", "digits"),
        (b'{"op":"whoami","id":"\\ud800"}\n', "invalid", "surrogate"),
        (b'{"op":"nope","id":"\\udcff"}\n', "invalid", "surrogate"),
        # ... and this one was an `internal` error with a traceback
        (b'{"op": "write", "path": "notes/keep.md", "content": "x\\ud800", "force": true}\n',
         "invalid", "surrogate"),
        (b'{"op": "whoami", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", "invalid", ""),
    ],
)
def test_malformed_requests(daemon: Daemon, payload: bytes, code: str, fragment: str) -> None:
    replies = raw_exchange(daemon, payload)
    assert len(replies) == 1
    assert replies[0]["ok"] is False
    error = replies[0]["error"]
    assert isinstance(error, dict)
    assert error["code"] == code
    assert fragment in str(error["message"])
    assert_unchanged(daemon)


def test_oversized_content_is_too_large(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        with pytest.raises(TooLargeError):
            alice.write("notes/huge.md", b"x" * (MAX_FILE + 1))
        with pytest.raises(TooLargeError):  # an append may not grow a file past the limit
            alice.write("notes/keep.md", b"y" * MAX_FILE, append=True)
    assert_unchanged(daemon)


def test_huge_line_gets_an_error_and_the_daemon_survives(daemon: Daemon) -> None:
    replies = raw_exchange(daemon, b'{"op": "list", "x": "' + b"A" * (4 * MAX_FILE) + b'"}\n')
    assert replies[-1]["ok"] is False
    assert replies[-1]["error"]["code"] == "too_large"  # type: ignore[index]
    assert_unchanged(daemon)


def test_many_bad_lines_then_a_good_one_on_one_connection(daemon: Daemon) -> None:
    payload = b"garbage\n" * 50 + b"\n\n" + b'{"op": "whoami", "id": 9}\n'
    replies = raw_exchange(daemon, payload)
    assert len(replies) == 51
    assert all(r["ok"] is False for r in replies[:50])
    assert replies[-1] == {"id": 9, "ok": True,
                           "result": {"agent": "alice",
                                      "stores": {"notes": "read_write", "ops": "read_write"}}}


def test_client_vanishing_mid_line_leaves_nothing_locked(daemon: Daemon) -> None:
    with as_euid(UID_A):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(daemon.socket))
    sock.sendall(b'{"op": "write", "path": "notes/keep.md", "content": "half')
    sock.close()
    with connect_as(UID_A, daemon.socket) as alice:
        alice.read("notes/keep.md")
        alice.write("notes/keep.md", "precious\n")  # the store lock is free
    assert_unchanged(daemon)


def test_invalid_utf8_file_names_on_disk_do_not_break_listing(daemon: Daemon) -> None:
    store = daemon.config["root"] + "/stores/ops"
    bad = os.path.join(os.fsencode(store), b"bad-\xff.md")
    with open(bad, "wb") as handle:
        handle.write(b"x")
    try:
        with connect_as(UID_A, daemon.socket) as alice:
            # A name that cannot be spelled in a request is left out, not a crash.
            assert alice.list("ops/**") == []
            assert alice.whoami()["agent"] == "alice"
    finally:
        os.unlink(bad)
