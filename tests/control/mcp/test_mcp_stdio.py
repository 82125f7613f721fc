"""The thread-free stdio transport of ``memfs mcp`` (control/mcp/stdio.py): what it
promises on its own (the SDK-driven tests in this folder run every tool through it)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from memfs.control.mcp import stdio
from tests.support import MEMFS, REPO


def _in_child(body: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``body`` in a fresh interpreter with stdin/stdout pipes (as an MCP client
    starts a server)."""
    code = f"import sys; sys.path.insert(0, {str(REPO)!r})\n{body}"
    return subprocess.run([sys.executable, "-c", code], input=b"", capture_output=True,
                          timeout=60, check=False)


def test_claimed_stdio_diverts_stray_output_and_restores() -> None:
    done = _in_child(
        "import os\n"
        "from memfs.control.mcp.stdio import claimed_stdio\n"
        "with claimed_stdio() as (wire_in, wire_out):\n"
        "    os.write(1, b'stray\\n')\n"  # a library printing: must miss the wire
        "    assert os.read(0, 10) == b''\n"  # fd 0 reads /dev/null meanwhile
        "    os.write(wire_out, b'wire\\n')\n"
        "os.write(1, b'after\\n')\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"wire\nafter\n"
    assert done.stderr == b"stray\n"


def test_lines_are_decoded_with_bad_bytes_replaced_and_a_last_partial_line() -> None:
    async def read_all(data: bytes) -> list[str]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [line async for line in stdio.LineReader(reader)]

    lines = asyncio.run(read_all(b'{"a": 1}\n\xff\xfe\n{"b": 2}'))
    assert lines == ['{"a": 1}\n', "\ufffd\ufffd\n", '{"b": 2}']


def test_only_pipes_and_sockets_take_the_fast_path() -> None:
    read_end, write_end = os.pipe()
    try:
        assert stdio.pipe_like(read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    with tempfile.TemporaryFile() as regular:
        assert not stdio.pipe_like(regular.fileno())
    assert not stdio.pipe_like(987654)  # not open


def test_a_regular_file_as_stdin_is_served_by_the_sdk_transport(tmp_path: Path) -> None:
    """`memfs mcp < requests.jsonl`: a regular file cannot be watched by the event
    loop; the SDK's own transport serves it (the initialize request is answered: with
    no daemon there, by the refusal naming the socket)."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}}
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(request) + "\n")
    with open(requests, "rb") as stdin:
        done = subprocess.run(
            [*MEMFS, "--socket", str(tmp_path / "none.sock"), "mcp"], stdin=stdin,
            capture_output=True, timeout=120, cwd=REPO, check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)})
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert replies and replies[0]["id"] == 1, done.stderr
    assert "none.sock" in replies[0]["error"]["message"], replies
