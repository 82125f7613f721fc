"""One client of tests/control/mcp/test_three_clients.py: the official Python MCP SDK
(``mcp``), run as a real user. It starts ``MEMFS mcp --agent AGENT`` over stdio as a
client configured in the usual way would: ``StdioServerParameters`` with no ``env``, so
the server gets the SDK's default environment (HOME, LOGNAME, PATH, SHELL, TERM, USER)
and must find the daemon by itself. It carries out the steps of the plan (JSON on
stdin) in order and prints what each gave, as JSON; the test judges them.

Usage: ``python py_client.py MEMFS AGENT < plan.json``. Steps (the twin of
ts_client.mjs, which reads the same plan):

- ``{"call": TOOL, "args": {...}, "save": NAME}``: tools/call; ``{"is_error", "text",
  "structured"}``; ``save`` keeps the first JSON string of the text, and an argument
  ``"$NAME"`` later stands for it.
- ``{"cli": [ARG, ...], "input": TEXT}``: ``MEMFS ARG...`` with no environment at all
  (the other agent); ``{"rc", "stdout", "stderr"}``.
- ``{"read": URI}``, ``{"subscribe": URI}``: resources/read; resources/subscribe, or
  on a 2026-07-28 connection (where that method is gone) a ``subscriptions/listen``
  stream for the URI; ``{"text", "mime"}`` / ``{"ok": true}``, or ``{"error", "code"}``.
- ``{"sleep": SECONDS}``, then ``{"updated": true}``: the ``notifications/resources/
  updated`` URIs so far; ``{"await_updated": SECONDS}``: the same, once there is one
  (or the time is up).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated, Subscription
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import TextContent, TextResourceContents
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

FIRST_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def substitute(value: Any, saved: dict[str, str]) -> Any:
    if isinstance(value, str) and value.startswith("$") and value[1:] in saved:
        return saved[value[1:]]
    if isinstance(value, dict):
        return {key: substitute(item, saved) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, saved) for item in value]
    return value


async def run(memfs: str, agent: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
    updated: list[str] = []

    async def drain(subscription: Subscription) -> None:
        async for event in subscription:
            if isinstance(event, ResourceUpdated):
                updated.append(event.uri)

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", "") == "notifications/resources/updated":
            if SUBSCRIPTION_ID_META_KEY in (root.params.meta or {}):
                return  # a subscriptions/listen stream's: drain() has it
            updated.append(str(root.params.uri))

    params = StdioServerParameters(command=memfs, args=["mcp", "--agent", agent])
    results: list[Any] = []
    saved: dict[str, str] = {}
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(Client(
            params, read_timeout_seconds=60, message_handler=on_message))
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)  # the listen streams end with the client
        for step in plan:
            if "call" in step:
                called = await client.call_tool(step["call"], substitute(step["args"], saved))
                text = "\n".join(block.text for block in called.content
                                 if isinstance(block, TextContent))
                results.append({"is_error": bool(called.is_error), "text": text,
                                "structured": called.structured_content})
                if "save" in step:
                    found = FIRST_JSON_STRING.search(text)
                    saved[step["save"]] = json.loads(found.group()) if found else ""
            elif "cli" in step:
                done = subprocess.run([memfs, *step["cli"]], input=step.get("input", ""),
                                      capture_output=True, text=True, env={}, timeout=60,
                                      check=False)
                results.append({"rc": done.returncode, "stdout": done.stdout,
                                "stderr": done.stderr})
            elif "read" in step or "subscribe" in step:
                try:
                    if "read" in step:
                        content = (await client.read_resource(step["read"])).contents[0]
                        assert isinstance(content, TextResourceContents)
                        results.append({"text": content.text, "mime": content.mime_type})
                    elif client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        tasks.start_soon(drain, await stack.enter_async_context(
                            client.listen(resource_subscriptions=[step["subscribe"]])))
                        results.append({"ok": True})
                    else:
                        await client.subscribe_resource(step["subscribe"])
                        results.append({"ok": True})
                except MCPError as error:
                    results.append({"error": error.message, "code": error.code})
            elif "sleep" in step:
                await asyncio.sleep(step["sleep"])
                results.append({})
            elif "updated" in step:
                results.append({"updated": list(updated)})
            elif "await_updated" in step:
                deadline = time.monotonic() + step["await_updated"]
                while not updated and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                results.append({"updated": list(updated)})
            else:
                raise ValueError(f"unknown step {step!r}")
        return {"instructions": client.instructions, "protocol": client.protocol_version,
                "results": results}


def main() -> None:
    memfs, agent = sys.argv[1:]
    print(json.dumps(asyncio.run(run(memfs, agent, json.load(sys.stdin)))))


if __name__ == "__main__":
    main()
