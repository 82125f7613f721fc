"""Benchmark of the MCP tool layer (issue 5): round trip of ``storage_read`` of a small
file through MCP (``memfs mcp`` over stdio, driven by the official SDK client) against
the same read through the control-socket Client directly. Interleaved, medians of N
calls each, printed with their ratio in one run.

Run as root (the server acts for agent alice with --as; the direct Client connects as
alice's uid): `.venv/bin/python scripts/bench_mcp.py [N]`.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult

from tests.support import (
    MEMFS,
    REPO,
    UID_A,
    Daemon,
    connect_as,
    public_tmpdir,
    standard_config,
)

PATH = "notes/bench/small.md"
CONTENT = "".join(f"line {n}: the quick brown fox jumps over the lazy dog\n" for n in range(20))


async def run(daemon: Daemon, n: int) -> tuple[list[float], list[float]]:
    params = StdioServerParameters(
        command=MEMFS[0], args=[*MEMFS[1:], "--socket", str(daemon.socket), "mcp",
                                "--as", "alice"],
        cwd=str(REPO), env={"PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8"})
    via_mcp: list[float] = []
    direct: list[float] = []
    with connect_as(UID_A, daemon.socket) as client:
        client.write(PATH, CONTENT)
        async with McpClient(params) as mcp:
            for _ in range(20):  # warm up both paths
                await mcp.call_tool("storage_read", {"path": PATH})
                client.read(PATH, limit=2000)
            for _ in range(n):  # interleaved, so both see the same conditions
                start = time.perf_counter()
                result = await mcp.call_tool("storage_read", {"path": PATH})
                via_mcp.append(time.perf_counter() - start)
                assert isinstance(result, CallToolResult) and not result.is_error
                start = time.perf_counter()
                client.read(PATH, limit=2000)
                direct.append(time.perf_counter() - start)
    return via_mcp, direct


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    base = public_tmpdir("memfs-bench-mcp-")
    try:
        with Daemon(standard_config(base)) as daemon:
            via_mcp, direct = anyio.run(run, daemon, n)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    m, d = statistics.median(via_mcp), statistics.median(direct)
    p90 = statistics.quantiles(via_mcp, n=10)[-1]
    print(f"storage_read of a {len(CONTENT)}-byte file, {n} calls each:")
    print(f"  via MCP (stdio, SDK client -> memfs mcp -> socket): median {m * 1e3:.3f} ms"
          f" (p90 {p90 * 1e3:.3f} ms)")
    print(f"  direct control Client:                              median {d * 1e3:.3f} ms")
    print(f"  ratio MCP / direct: {m / d:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
