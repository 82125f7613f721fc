"""Protocol fuzz (issue 12): no line from any uid ends the daemon or escapes as an
unhandled error. Most inputs run against the real decoder and a real Dispatcher
(engine on a scratch root, the real jail) without a socket; a few thousand go to a
real daemon over the socket, after which it must still answer a normal request.

The lines come from tests/fuzzlines.py, seeded: a failure names the seed and the
index of the line, which reproduce it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs.config import parse_config
from memfs.control import protocol as p
from memfs.control.ops.dispatcher import Dispatcher
from memfs.control.ops.registry import decode_request
from memfs.daemon.serve import start_jail
from memfs.store.engine import Engine
from tests import fuzzlines
from tests.support import (
    UID_A,
    UID_C,
    UID_UNKNOWN,
    Daemon,
    as_euid,
    connect_as,
    public_tmpdir,
    standard_config,
)

SEED = int(os.environ.get("MEMFS_FUZZ_SEED", "12"))
IN_PROCESS = 12_000
OVER_SOCKET = 3_000
PER_CONNECTION = 100


def parse_reply(reply: bytes) -> dict[str, Any]:
    """Assert that ``reply`` is one well-formed reply line; return it decoded."""
    assert reply.endswith(b"\n") and reply.count(b"\n") == 1, reply[:200]
    decoded = json.loads(reply.decode("utf-8"))  # strict UTF-8, strict JSON
    assert isinstance(decoded, dict)
    if decoded["ok"] is True:
        assert set(decoded) == {"id", "ok", "result"}
    else:
        assert set(decoded) == {"id", "ok", "error"}
        assert decoded["error"]["code"] in p.ERROR_CODES
        assert isinstance(decoded["error"]["message"], str)
    return decoded


def fuzz_config(base: Path) -> dict[str, Any]:
    """The standard stores and agents, plus a structured store for the memory ops."""
    config = standard_config(base, jail={"timeout_seconds": 5})
    config["stores"]["team"] = {"structured": True}
    config["agents"]["alice"]["stores"]["team"] = "read_write"
    config["agents"]["carol"]["stores"]["team"] = "read"
    return config


@pytest.fixture(scope="module")
def dispatcher() -> Iterator[Dispatcher]:
    base = public_tmpdir("memfs-fuzz-")
    config = parse_config(fuzz_config(base))
    engine = Engine.of(config)
    jail = start_jail(config)
    try:
        yield Dispatcher(engine, jail)
    finally:
        jail.close()
        engine.close()


def test_fuzz_decoder_and_dispatcher(dispatcher: Dispatcher) -> None:
    outcomes: Counter[str] = Counter()
    for index, line in enumerate(fuzzlines.lines(SEED, IN_PROCESS)):
        where = f"seed {SEED}, line {index}: {line[:300]!r}"
        uid = (UID_A, UID_C, UID_UNKNOWN, 0)[index % 4]
        try:
            request = decode_request(line)
        except p.ProtocolError as error:
            assert error.code == "invalid", where
            reply = parse_reply(p.encode_error(error.request_id, error.code, error.message))
            outcomes["refused at decode"] += 1
            continue
        except Exception as error:  # the bug this test is for
            pytest.fail(f"decode_request raised {error!r} on {where}")
        reply = parse_reply(dispatcher.handle(uid, request))
        assert reply["id"] == request.id, where
        code = "ok" if reply["ok"] else reply["error"]["code"]
        assert code != "internal", f"{where}: {reply}"
        outcomes[code] += 1
    # The generator reaches every kind of outcome, not only the decoder's refusals.
    assert sum(outcomes.values()) == IN_PROCESS
    assert outcomes["refused at decode"] > IN_PROCESS // 2, outcomes
    assert outcomes["ok"] > 300, outcomes
    for code in ("permission_denied", "not_found", "invalid"):
        assert outcomes[code] > 20, outcomes


def _exchange(path: Path, uid: int, lines: list[bytes], tail: bytes) -> list[bytes]:
    """Send ``lines`` (each plus a newline) and then ``tail`` (no newline) on one
    connection as ``uid``, reading replies meanwhile; return every reply line."""
    with as_euid(uid):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
    received = bytearray()

    def read() -> None:
        while chunk := sock.recv(1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with sock:
        try:
            sock.sendall(b"".join(line + b"\n" for line in lines) + tail)
            sock.shutdown(socket.SHUT_WR)
        finally:
            reader.join(120)
    assert not reader.is_alive(), "the daemon stopped answering"
    return bytes(received).splitlines(keepends=True)


def test_fuzz_over_the_socket_then_the_daemon_still_serves() -> None:
    base = public_tmpdir("memfs-fuzz-")
    with Daemon(fuzz_config(base)) as daemon:
        all_lines = list(fuzzlines.lines(SEED + 1, OVER_SOCKET))
        codes: Counter[str] = Counter()
        for start in range(0, OVER_SOCKET, PER_CONNECTION):
            batch = all_lines[start : start + PER_CONNECTION]
            # Every other connection ends in the middle of a line (no reply to it).
            lines, tail = (batch[:-1], batch[-1]) if start % 200 else (batch, b"")
            uid = UID_UNKNOWN if start % 300 == 0 else UID_A
            replies = _exchange(daemon.socket, uid, lines, tail)
            expected = sum(1 for line in lines if line and not line.isspace())
            assert len(replies) == expected, f"seed {SEED + 1}, lines {start}..: {daemon.log()}"
            for reply in replies:
                decoded = parse_reply(reply)
                code = "ok" if decoded["ok"] else decoded["error"]["code"]
                assert code != "internal", decoded
                codes[code] += 1
            assert daemon.alive(), daemon.log()
        assert codes["ok"] > 50 and codes["invalid"] > 500, codes
        with connect_as(UID_A, daemon.socket) as alice:
            assert alice.whoami()["agent"] == "alice"
            alice.write("notes/after-fuzz.md", "still here\n", force=True)
            assert alice.read("notes/after-fuzz.md")["text"] == "still here\n"
        assert daemon.alive()
        assert "Traceback" not in daemon.log()
