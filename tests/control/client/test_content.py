"""How the client sends a write's bytes: as text when they are UTF-8 whose JSON string is
no longer than their base64, else as base64; either way the daemon stores the very
bytes (a real daemon, over the socket), also for a file of control characters as
large as the daemon takes, whose escaped text would not fit the line limit."""

from __future__ import annotations

import binascii
import os
from collections.abc import Iterator

import pytest

from memfs.control.client.client import request_content
from tests.support import UID_A, Daemon, connect_as, public_tmpdir, standard_config

MAX_FILE = 64 * 1024

SAMPLES = {
    "empty": b"",
    "ascii text": b"# notes\n\nretry: 3\ttimeout: 5s\n" * 100,
    "non-ASCII text": "caf\u00e9 \u00fcber \u65e5\u672c \U0001f600\n".encode() * 50,
    "text with a few control characters": b"a\x00b\x01c\rd\x1b[0m\n" + b"plain " * 100,
    "not UTF-8": os.urandom(4096),
    "an encoded surrogate (not UTF-8)": b"abc \xed\xa0\x80 def",
    "mostly control characters": b"\x01" * 4096,
}


@pytest.mark.parametrize(("name", "expected"), [
    ("empty", "content"),
    ("ascii text", "content"),
    ("non-ASCII text", "content"),
    ("text with a few control characters", "content"),
    ("not UTF-8", "content_b64"),
    ("an encoded surrogate (not UTF-8)", "content_b64"),
    ("mostly control characters", "content_b64"),  # escaped: 6 bytes each
])
def test_bytes_travel_as_text_when_that_is_not_longer(name: str, expected: str) -> None:
    data = SAMPLES[name]
    (field, value), = request_content(data).items()
    assert field == expected
    sent = value.encode() if field == "content" else binascii.a2b_base64(value)
    assert sent == data


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(standard_config(public_tmpdir(), max_file_size=MAX_FILE)) as running:
        yield running


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_daemon_stores_the_very_bytes(daemon: Daemon, name: str) -> None:
    path = f"notes/content/{name.replace(' ', '-')}.bin"
    with connect_as(UID_A, daemon.socket) as alice:
        written = alice.write(path, SAMPLES[name], force=True)
        data, version = alice.read_bytes(path)
    assert data == SAMPLES[name]
    assert version["digest"] == written["digest"]


def test_a_whole_file_of_control_characters_fits_the_line_limit(daemon: Daemon) -> None:
    data = b"\x00" * MAX_FILE  # as text: 6 bytes each, far over the line limit
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/content/nul.bin", data, force=True)
        assert alice.read_bytes("notes/content/nul.bin")[0] == data
