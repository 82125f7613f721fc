"""Issue 30's acceptance scenario with each official MCP SDK as the client, run as a real
user (useradd) against the personal daemon that root started for it, each launching
``memfs mcp --agent NAME`` the way a client's config does: the SDK's stdio transport with
no ``env``, i.e. the SDK's default environment, so the server finds the daemon from the
uid alone. Python: tests/control/mcp/py_client.py (``mcp``, the SDK this project
depends on); TypeScript: tests/control/mcp/ts_client.mjs (``@modelcontextprotocol/sdk``,
pinned in ``scripts/setup --test``, under its Node 22). Both carry out the same plan and
print what each step gave; the checks are here, one set for both.

The scenario, for an agent of its own per client and a second agent (the CLI, run with
no environment at all) making the changes: write a note; the other agent changes it; a
write based on the old read is refused with a hint to read it again; append; a task the
other agent claimed is refused as lease held; a decision superseded; recall by a
paraphrase (other forms of the note's words); ripgrep with ``-i -C 1``; a resource
subscribed to, and ``notifications/resources/updated`` once the other agent changes it.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.daemon.test_personal_user import RootDaemon, User, real_user
from tests.support import REPO, scaled

MEMFS_BIN = str(REPO / ".venv" / "bin" / "memfs")
PYTHON_CLIENT = [str(REPO / ".venv" / "bin" / "python"),
                 str(REPO / "tests" / "control" / "mcp" / "py_client.py")]
NODE_DIR = REPO / ".node-conformance" / "node_modules"
TS_CLIENT = [str(NODE_DIR / ".bin" / "node"),
             str(REPO / "tests" / "control" / "mcp" / "ts_client.mjs"),
             str(NODE_DIR / "@modelcontextprotocol" / "sdk")]
FIRST_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@pytest.fixture(scope="module")
def personal() -> Iterator[tuple[User, RootDaemon]]:
    with real_user() as user:
        daemon = RootDaemon(user)
        try:
            yield user, daemon
            assert "Traceback" not in daemon.daemon.log()
        finally:
            daemon.stop()


def login_env(user: User) -> dict[str, str]:
    """The environment the client itself runs in: a login of the user's. MEMFS_SOCKET
    names no daemon: a server given this environment would fail; the SDK's default
    environment does not carry it (nor XDG_RUNTIME_DIR)."""
    return {"HOME": str(user.home), "USER": user.name, "LOGNAME": user.name,
            "SHELL": "/bin/sh", "TERM": "dumb", "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8", "XDG_RUNTIME_DIR": str(user.home / "run"),
            "MEMFS_SOCKET": "/nonexistent/memfs/control.sock"}


def scenario(agent: str, rival: str, bird: str) -> dict[str, dict[str, Any]]:
    """The scenario's steps by name (py_client.py describes the kinds), but for the
    subscription (`watch`)."""
    note, topic, task = f"notes/{agent}/plan.md", f"notes/{agent}/{bird}.md", f"{agent}-deploy"

    def call(tool: str, **args: Any) -> dict[str, Any]:
        return {"call": tool, "args": args}

    def cli(*args: str, input: str = "") -> dict[str, Any]:
        return {"cli": ["--agent", rival, *args], "input": input}

    return {
        "write": call("storage_write", path=note, content="# Deploy plan\nShip on Friday.\n"),
        "read": call("storage_read", path=note),
        "rival_changes": cli("write", "--force", note, input="# Deploy plan\nShip on Monday.\n"),
        "stale": call("storage_write", path=note, content="# Deploy plan\nShip on Sunday.\n"),
        "reread": call("storage_read", path=note),
        "append": call("storage_write", path=note, content="- checked\n", append=True),
        "rival_reads": cli("cat", note),
        "task_add": cli("task", "add", task, "--title", "Deploy the plan"),
        "rival_claims": cli("task", "claim", task),
        "claim": call("task_claim", task=task),
        "old_decision": call("decision_record", title="Deploy on Fridays",
                             decision="Friday", reason="quiet traffic") | {"save": "old"},
        "new_decision": call("decision_record", title="Deploy on Mondays", decision="Monday",
                             reason="people are around", supersedes="$old"),
        "decisions": call("decision_list", status="all"),
        "old_shown": call("decision_show", decision="$old"),
        "topic": call("storage_write", path=topic, content=(
            f"# {bird.title()}s nesting by the sluice\n\n"
            f"Two {bird}s were fishing below the sluice gate at dawn.\n"
            "They flew off at sunrise.\n")),
        "recall": call("memory_recall", query=f"{bird} fishes near sluices"),
        "search": call("storage_search", pattern="FISHING BELOW", flags=["-i", "-C", "1"],
                       paths=[f"notes/{agent}"]),
        "search_case": call("storage_search", pattern="FISHING BELOW", flags=["-C", "1"],
                            paths=[f"notes/{agent}"]),
        "resource": {"read": f"memfs://{topic}"},
    }


def watch(agent: str, rival: str, bird: str) -> dict[str, dict[str, Any]]:
    """Subscribing to the scenario's topic file, which the other agent then changes."""
    topic = f"notes/{agent}/{bird}.md"
    return {
        "subscribe": {"subscribe": f"memfs://{topic}"},
        "quiet": {"sleep": 1.5},
        "before": {"updated": True},
        "rival_edits": {"cli": ["--agent", rival, "write", "--force", topic],
                        "input": f"The {bird}s left.\n"},
        "notified": {"await_updated": scaled(15)},
    }


def run_client(user: User, argv: list[str], steps: dict[str, dict[str, Any]]
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the client said of the connection (the server's ``instructions``; the
    Python client: the ``protocol`` version), and each step's result by name."""
    done = subprocess.run(argv, input=json.dumps(list(steps.values())), capture_output=True,
                          text=True, user=user.uid, group=user.gid, extra_groups=[],
                          env=login_env(user), cwd=user.home, timeout=scaled(120),
                          check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["results"]) == len(steps), out
    return out, dict(zip(steps, out.pop("results"), strict=True))


def check(agent: str, rival: str, bird: str, instructions: str | None,
          got: dict[str, Any]) -> None:
    """The scenario's results, as they must be."""
    note, topic = f"notes/{agent}/plan.md", f"notes/{agent}/{bird}.md"

    def ok(name: str) -> str:
        assert not got[name]["is_error"], (name, got[name])
        return str(got[name]["text"])

    def refused(name: str) -> str:
        assert got[name]["is_error"], (name, got[name])
        return str(got[name]["text"])

    def ran(name: str) -> str:
        assert got[name]["rc"] == 0, (name, got[name])
        return str(got[name]["stdout"])

    assert f"You are agent {agent} in memfs" in (instructions or "")
    ok("write")
    assert "Ship on Friday." in ok("read")
    ran("rival_changes")
    stale = refused("stale")
    assert stale.startswith("CONFLICT: your write was NOT applied"), stale
    assert f'"{note}" was changed by "{rival}"' in stale, stale
    assert "read it again (storage_read)" in stale, stale
    assert "Ship on Monday." in ok("reread")
    ok("append")
    assert ran("rival_reads") == "# Deploy plan\nShip on Monday.\n- checked\n"

    ran("task_add")
    ran("rival_claims")
    held = refused("claim")
    assert held.startswith("LEASE HELD") and f'"{rival}"' in held, held

    found = FIRST_JSON_STRING.search(ok("old_decision"))
    assert found is not None, got["old_decision"]
    old = json.loads(found.group())
    ok("new_decision")
    assert f'"{old}" [superseded]' in ok("decisions"), got["decisions"]
    assert "superseded by" in ok("old_shown"), got["old_shown"]

    ok("topic")
    recalled = ok("recall").splitlines()
    assert recalled[1].startswith(f'1. "{topic}" (score '), recalled
    assert ok("search").splitlines() == [
        f"{topic}-2-",
        f"{topic}:3:Two {bird}s were fishing below the sluice gate at dawn.",
        f"{topic}-4-They flew off at sunrise."]
    assert ok("search_case") == "No matches."  # without -i: the case matters

    assert got["resource"]["mime"] == "text/markdown"
    assert got["resource"]["text"].startswith(f"# {bird.title()}s nesting"), got["resource"]


def check_watch(agent: str, bird: str, got: dict[str, Any]) -> None:
    topic = f"notes/{agent}/{bird}.md"
    assert got["subscribe"] == {"ok": True}
    assert got["before"] == {"updated": []}  # nothing changed yet
    assert got["rival_edits"]["rc"] == 0, got["rival_edits"]
    assert got["notified"] == {"updated": [f"memfs://{topic}"]}


def test_the_python_sdk(personal: tuple[User, RootDaemon]) -> None:
    """The SDK's default connect mode: the 2026-07-28 protocol with memfs, where a
    subscription is a ``subscriptions/listen`` stream."""
    user, _ = personal
    steps = scenario("py-sdk", "py-rival", "heron") | watch("py-sdk", "py-rival", "heron")
    connection, got = run_client(user, [*PYTHON_CLIENT, MEMFS_BIN, "py-sdk"], steps)
    assert connection["protocol"] in MODERN_PROTOCOL_VERSIONS, connection
    check("py-sdk", "py-rival", "heron", connection["instructions"], got)
    check_watch("py-sdk", "heron", got)


def test_the_typescript_sdk(personal: tuple[User, RootDaemon]) -> None:
    """The SDK's own way of connecting: the initialize handshake (2025 era), where a
    subscription is ``resources/subscribe``."""
    if not (NODE_DIR / "@modelcontextprotocol" / "sdk" / "package.json").exists():
        pytest.fail("the TypeScript MCP SDK is not installed: run scripts/setup --test")
    user, _ = personal
    steps = scenario("ts-sdk", "ts-rival", "egret") | watch("ts-sdk", "ts-rival", "egret")
    connection, got = run_client(user, [*TS_CLIENT, MEMFS_BIN, "ts-sdk"], steps)
    check("ts-sdk", "ts-rival", "egret", connection["instructions"], got)
    check_watch("ts-sdk", "egret", got)


def test_the_plan_is_the_same_for_both_clients() -> None:
    """The two clients read one plan format: every kind of step the plan uses is one
    each of them carries out."""
    steps = scenario("a", "b", "c") | watch("a", "b", "c")
    kinds = {next(iter(step)) for step in steps.values()}
    for script in (Path(PYTHON_CLIENT[1]), Path(TS_CLIENT[1])):
        text = script.read_text()
        for kind in kinds:
            assert f'"{kind}" in step' in text, (script.name, kind)
