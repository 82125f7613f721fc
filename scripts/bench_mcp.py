"""Benchmark of the MCP tool layer (issues 5 and 23): round trip of ``storage_read`` of a
small file through MCP (``memfs mcp`` over stdio, driven by the official SDK client),
next to its ceiling, the same client calling the one tool of a minimal SDK server that
answers from memory (scripts/baselines/mcp_server.py: the least any MCP server made
with the SDK costs), and the same read through the control-socket Client directly.
All three in turn (each round starting one further along), medians of N calls each,
with the machine's load, in one run. Goal: storage_read <= 1.3x the minimal server's
tool call.

Run as root (the server acts for agent alice with --as; the direct Client connects as
alice's uid): `.venv/bin/python scripts/bench_mcp.py [N]`.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import MachineLoad, ProcessCpu, record
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, TextContent

from tests.support import (
    MEMFS,
    PYTHON,
    REPO,
    UID_A,
    Daemon,
    connect_as,
    public_tmpdir,
    standard_config,
)

PATH = "notes/bench/small.md"
CONTENT = "".join(f"line {n}: the quick brown fox jumps over the lazy dog\n" for n in range(20))
BASELINE = Path(__file__).resolve().parent / "baselines" / "mcp_server.py"
GOAL = 1.3


def _text(result: object) -> str:
    assert isinstance(result, CallToolResult) and not result.is_error, result
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


async def run(daemon: Daemon, base: Path, n: int) -> dict[str, list[float]]:
    env = {"PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8"}
    ours = StdioServerParameters(
        command=MEMFS[0], args=[*MEMFS[1:], "--socket", str(daemon.socket), "mcp",
                                "--as", "alice"], cwd=str(REPO), env=env)
    text_file = base / "baseline.txt"
    text_file.write_text(CONTENT)
    minimal = StdioServerParameters(command=PYTHON, args=[str(BASELINE), str(text_file)],
                                    cwd=str(REPO), env=env)
    with connect_as(UID_A, daemon.socket) as client:
        client.write(PATH, CONTENT)
        async with McpClient(ours) as via_memfs, McpClient(minimal) as via_minimal:

            async def storage_read() -> None:
                assert "quick brown fox" in _text(
                    await via_memfs.call_tool("storage_read", {"path": PATH}))

            async def baseline_read() -> None:
                assert _text(await via_minimal.call_tool("read", {"path": PATH})) == CONTENT

            async def socket_read() -> None:
                client.read(PATH, limit=2000)

            calls: dict[str, Callable[[], Awaitable[None]]] = {
                "memfs": storage_read, "minimal": baseline_read, "socket": socket_read}
            names = list(calls)
            for _ in range(20):  # warm up every path
                for name in names:
                    await calls[name]()
            samples: dict[str, list[float]] = {name: [] for name in names}
            for i in range(n):
                for k in range(len(names)):
                    name = names[(i + k) % len(names)]
                    start = time.perf_counter()
                    await calls[name]()
                    samples[name].append(time.perf_counter() - start)
    return samples


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    base = public_tmpdir("memfs-bench-mcp-")
    load = MachineLoad()
    try:
        with Daemon(standard_config(base)) as daemon:
            assert daemon.proc is not None
            meter = ProcessCpu(daemon.proc.pid, "memfs-bench-mcp")
            try:
                samples = anyio.run(run, daemon, base, n)
                daemon_cpu = meter.ns() / 1e9
            finally:
                meter.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {name: statistics.median(values) for name, values in samples.items()}
    p90 = {name: statistics.quantiles(values, n=10)[-1] for name, values in samples.items()}
    ratio = med["memfs"] / med["minimal"]
    print(f"storage_read of a {len(CONTENT)}-byte file, {n} calls each, in turn:")
    print(f"  memfs mcp storage_read (stdio, SDK client -> memfs mcp -> socket): median "
          f"{med['memfs'] * 1e3:.3f} ms (p90 {p90['memfs'] * 1e3:.3f} ms)")
    print(f"  minimal SDK server, one tool answering from memory:               median "
          f"{med['minimal'] * 1e3:.3f} ms (p90 {p90['minimal'] * 1e3:.3f} ms)")
    print(f"  direct control Client (socket read):                             median "
          f"{med['socket'] * 1e3:.3f} ms")
    print(f"  ratio memfs / minimal server: {ratio:.2f}x   "
          f"{'OK' if ratio <= GOAL else 'ABOVE GOAL'} (goal <= {GOAL}); memfs / socket "
          f"{med['memfs'] / med['socket']:.1f}x; the daemon's CPU over the run "
          f"{daemon_cpu:.2f} s")
    print(f"  {load.report()}")
    record(f"`storage_read` of {len(CONTENT):,} B through `memfs mcp` (median)",
           f"{med['memfs'] * 1e3:.3f} ms",
           baseline=f"a minimal MCP SDK server answering from memory: "
           f"{med['minimal'] * 1e3:.3f} ms", ratio=ratio, goal=f"<= {GOAL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
