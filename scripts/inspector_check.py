"""memfs's MCP server seen by an independent client: the MCP Inspector's CLI (the
TypeScript SDK), against a real daemon's ``/mcp`` (streamable HTTP, bearer token) and a
``memfs mcp`` over stdio, in both protocol eras (legacy: the initialize handshake;
modern: the 2026 protocol). Checks what each says about the server (name, the
installed version, the same capabilities everywhere), that the tools list and run,
and that ``/mcp`` refuses a page of another site (Origin) with 403 but takes its own.
Prints one line per check; exits 1 if any failed.

The Inspector 2.12 needs Node >= 22: both are installed with npm (a registry fetch,
the first time only) into PREFIX (default /tmp/memfs-inspector), not system-wide.
Every Inspector run has a time limit. Run as root:
`.venv/bin/python scripts/inspector_check.py [--prefix DIR]`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.control.http.conftest import http_config
from tests.support import MEMFS, Daemon

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
NODE = "node@22"
RUN_SECONDS = 120


def install(prefix: Path) -> dict[str, str]:
    """Node 22 and the Inspector under ``prefix`` (npm, once); the environment that
    runs them."""
    bin_dir = prefix / "node_modules" / ".bin"
    if not (bin_dir / "mcp-inspector").exists() or not (bin_dir / "node").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                        NODE, INSPECTOR], check=True, timeout=900)
    (prefix / "home").mkdir(exist_ok=True)  # the Inspector's catalog and config
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(prefix / "home")}


class Checks:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.failed = 0

    def inspector(self, *args: str) -> tuple[int, Any, str]:
        """(exit status, the JSON result or error, stderr) of one Inspector CLI run."""
        done = subprocess.run(["mcp-inspector", "--cli", *args, "--format", "json"],
                              capture_output=True, text=True, env=self.env,
                              timeout=RUN_SECONDS, check=False)
        try:
            answer = json.loads(done.stdout or done.stderr.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        return done.returncode, answer, done.stderr

    def check(self, what: str, ok: bool, detail: object = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + ("" if ok else f": {detail!s:.600}"))
        self.failed += not ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", type=Path, default=Path("/tmp/memfs-inspector"))
    options = parser.parse_args()
    checks = Checks(install(options.prefix))
    version = importlib.metadata.version("memfs")
    with Daemon(http_config("memfs-inspector-")) as daemon:
        token = daemon.token("alice", "--label", "inspector check")
        http = [f"{daemon.http_url}/mcp", "--transport", "http",
                "--header", f"Authorization: Bearer {token}"]
        stdio = [*MEMFS, "--socket", str(daemon.socket), "mcp", "--as", "alice",
                 "--local-dir", "/tmp", "--transport", "stdio"]
        seen = {}
        for transport, target in (("http", http), ("stdio", stdio)):
            for era in ("legacy", "modern"):
                where = f"{transport}, {era}"
                status, answer, err = checks.inspector(*target, "--protocol-era", era,
                                                       "--method", "initialize")
                result = (answer or {}).get("result") or {}
                info = result.get("serverInfo") or {}
                checks.check(f"{where}: serverInfo is memfs {version}", status == 0 and info ==
                             {"name": "memfs", "version": version}, answer or err)
                seen[where] = result.get("capabilities")
                status, answer, err = checks.inspector(*target, "--protocol-era", era,
                                                       "--method", "tools/list")
                tools = {tool["name"] for tool in ((answer or {}).get("result") or {})
                         .get("tools", [])}
                checks.check(f"{where}: tools/list", status == 0 and "storage_write" in tools
                             and "task_claim" in tools
                             and ("storage_download" in tools) == (transport == "stdio"),
                             sorted(tools) or err)
                path = f"notes/inspector-{transport}-{era}.md"
                status, answer, err = checks.inspector(
                    *target, "--protocol-era", era, "--method", "tools/call", "--tool-name",
                    "storage_write", "--tool-args-json",
                    json.dumps({"path": path, "content": f"written over {where}\n"}))
                wrote = (answer or {}).get("result") or {}
                checks.check(f"{where}: tools/call storage_write", status == 0
                             and not wrote.get("isError"), answer or err)
                status, answer, err = checks.inspector(
                    *target, "--protocol-era", era, "--method", "tools/call", "--tool-name",
                    "storage_read", "--tool-args-json", json.dumps({"path": path}))
                read = json.dumps(answer)
                checks.check(f"{where}: tools/call storage_read", status == 0
                             and f"written over {where}" in read, answer or err)
        # resource subscriptions in both eras (resources/subscribe in the handshake era,
        # a subscriptions/listen stream in the 2026 protocol)
        for where, caps in seen.items():
            subscribe = ((caps or {}).get("resources") or {}).get("subscribe")
            checks.check(f"{where}: resources.subscribe", subscribe is True, caps)
        first = next(iter(seen.values()))
        checks.check("the same capabilities in both eras and both transports",
                     all(caps == first for caps in seen.values()), seen)
        checks.check("no list-change notifications advertised", first is not None and not any(
            (kind or {}).get("listChanged") for kind in first.values()), first)
        for origin, allowed in (("http://evil.example", False), (daemon.http_url, True)):
            status, answer, err = checks.inspector(*http, "--header", f"Origin: {origin}",
                                                   "--method", "tools/list")
            text = json.dumps(answer) + err
            checks.check(f"/mcp with Origin {origin}: {'allowed' if allowed else 'refused'}",
                         (status == 0) == allowed and (allowed or "403" in text), text)
    print(f"{checks.failed} check(s) failed" if checks.failed else "all checks passed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
