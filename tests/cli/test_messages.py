"""Human words, not protocol: what the CLI (and ``memfs mcp``, ``memfs serve``) says
when a user meets a limit or a mistake names the facts the user knows (a file's size
and ``max_file_size``, the ``[http] listen`` address, how to map a uid), and
``memfs stat`` prints times in UTC and yes/no; ``--json`` keeps machine values."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import (
    MEMFS,
    REPO,
    UID_A,
    UID_UNKNOWN,
    Daemon,
    dump_toml,
    memfs_as,
    public_tmpdir,
    run_as,
    standard_config,
)

MAX = 1000  # the daemon's max_file_size here


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(standard_config(public_tmpdir(), max_file_size=MAX)) as running:
        yield running


@pytest.mark.parametrize("size", [MAX + 1, 200_000])  # refused by the engine; by the line cap
def test_a_file_too_large_names_its_size_and_max_file_size(daemon: Daemon, size: int) -> None:
    done = memfs_as(UID_A, daemon.socket, "write", "notes/big.bin", input=b"x" * size)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode() == (
        f"memfs: too large: notes/big.bin: {size} bytes is more than the daemon takes in "
        f"one file (max_file_size = {MAX} bytes)\n")
    local = Path(public_tmpdir()) / "big.bin"
    local.write_bytes(b"y" * size)
    local.chmod(0o644)
    done = memfs_as(UID_A, daemon.socket, "upload", str(local), "notes/big.bin")
    assert done.returncode == 2 and f"{size} bytes is more than".encode() in done.stderr


def test_an_append_too_large_names_the_size_it_would_reach(daemon: Daemon) -> None:
    assert memfs_as(UID_A, daemon.socket, "write", "notes/grows.md",
                    input=b"a" * 800).returncode == 0
    done = memfs_as(UID_A, daemon.socket, "write", "--append", "notes/grows.md",
                    input=b"b" * 300)
    assert done.returncode == 2
    assert done.stderr.decode() == (
        "memfs: too large: notes/grows.md: appending 300 bytes would make it 1100 bytes, "
        f"more than the daemon takes in one file (max_file_size = {MAX} bytes)\n")


def test_stat_prints_utc_times_and_yes_or_no(daemon: Daemon) -> None:
    assert memfs_as(UID_A, daemon.socket, "write", "notes/s.md", input=b"s\n").returncode == 0
    text = memfs_as(UID_A, daemon.socket, "stat", "notes/s.md").stdout.decode()
    lines = dict(line.split(": ", 1) for line in text.splitlines())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", lines["last_written_at"]), text
    assert lines["changed_since_last_read"] == "no" and lines["last_writer"] == "alice"
    assert lines["size"] == "2 bytes"
    machine = json.loads(memfs_as(UID_A, daemon.socket, "--json", "stat", "notes/s.md").stdout)
    assert machine["changed_since_last_read"] is False  # --json: the values as they are
    assert isinstance(machine["last_written_at"], float) and machine["size"] == 2


def test_an_unmapped_uid_is_told_how_to_map_it(daemon: Daemon) -> None:
    how = (f"uid {UID_UNKNOWN} is not mapped to any agent: give it one in the daemon's "
           f"config ([agents.NAME] with uid = {UID_UNKNOWN}), or act for an agent from a "
           "delegate uid with --as AGENT")
    done = memfs_as(UID_UNKNOWN, daemon.socket, "ls")
    assert (done.returncode, done.stderr.decode()) == (4, f"memfs: permission denied: {how}\n")
    # memfs mcp says the same, and nothing on the MCP wire: it never starts serving
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}) + "\n"
    served = run_as(UID_UNKNOWN, [*MEMFS, "--socket", str(daemon.socket), "mcp"],
                    input=hello.encode())
    assert served.returncode == 4 and served.stdout == b""
    assert served.stderr.decode() == f"memfs mcp: {how}\n"


def test_a_busy_port_names_the_http_listen_address(daemon: Daemon) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        base = public_tmpdir()
        config = standard_config(base, http={"listen": f"127.0.0.1:{port}"})
        path = base / "busy.toml"
        path.write_text(dump_toml(config))
        done = subprocess.run([*MEMFS, "serve", "--no-mount", "--config", str(path)],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"memfs: cannot start: cannot listen on 127.0.0.1:{port} ([http] listen): "
                    "the address is in use (another memfs, or another program, listens "
                    "there): stop it, or set another port"), done.stderr
    assert "Errno" not in done.stderr
