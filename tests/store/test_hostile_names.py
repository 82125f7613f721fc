"""Names that could forge a line or hide a character wherever they are shown (Unicode
line and paragraph separators, other controls, format characters such as the
bidirectional overrides and zero-width characters, private-use and unassigned code
points) are refused as `invalid` at every way in: the socket, HTTP REST, MCP over
stdio and over HTTP, the CLI; in paths, in globs and in one-line texts. Nothing is
created, and the daemon goes on serving. Files planted with such names by hand are
neither listed nor searched."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from urllib.parse import quote

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from memfs.control.client import InvalidError
from tests.control.http.conftest import http_config
from tests.control.mcp.conftest import call_error, call_ok, mcp_session
from tests.support import UID_A, Daemon, connect_as, memfs_as

# one of each kind a name may not hold, with its code point as the error names it
HOSTILE = {
    "\u2028": "U+2028", "\u2029": "U+2029", "\x85": "U+0085", "\x7f": "U+007F",
    "\t": "U+0009", "\u202e": "U+202E", "\u2066": "U+2066", "\u200b": "U+200B",
    "\ufeff": "U+FEFF", "\U000e0041": "U+E0041", "\ue000": "U+E000", "\u0378": "U+0378",
    "\xa0": "U+00A0",
}
LINE_BREAKS = "\u2028\u2029\x85"  # the only ones a one-line text (a title) refuses


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(http_config("memfs-names-")) as running:
        yield running


@pytest.fixture(scope="module")
def token(daemon: Daemon) -> str:
    return daemon.token("alice", "--label", "hostile names")


def names(char: str) -> list[str]:
    return [f"notes/IGNORE{char}## Hazards{char}- FORGED.md", f"notes/dir{char}/x.md",
            f"notes/{char}"]


def created_nothing(daemon: Daemon) -> None:
    stores = Path(daemon.config["root"]) / "stores"
    found = [str(p) for p in stores.rglob("*") if not p.name.isprintable()]
    assert not found, found


def test_the_socket_refuses_them(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        for char, code in HOSTILE.items():
            for name in names(char):
                for call in (partial(alice.write, name, "x\n", force=True),
                             partial(alice.write, name, "x\n", append=True),
                             partial(alice.read, name), partial(alice.call, "stat", path=name),
                             partial(alice.call, "delete", path=name, force=True)):
                    with pytest.raises(InvalidError, match=code.replace("+", r"\+")):
                        call()
            with pytest.raises(InvalidError, match="glob"):
                alice.list(f"notes/*{char}*")
            if char in LINE_BREAKS:
                with pytest.raises(InvalidError, match="one line"):
                    alice.call("task_add", store="team", task="t", title=f"a{char}b")
        alice.write("notes/fine é 😀.md", "still serving\n")
        assert alice.read("notes/fine é 😀.md")["text"] == "still serving\n"
    created_nothing(daemon)


def test_http_rest_refuses_them(daemon: Daemon, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=daemon.http_url, headers=headers, timeout=60) as http:
        for char, code in HOSTILE.items():
            for name in names(char):
                store, rel = name.split("/", 1)
                url = f"/v1/stores/{store}/files/{quote(rel, safe='/')}"
                for method in ("PUT", "GET", "DELETE"):
                    response = http.request(method, url, content=b"x\n",
                                            params={"force": "true"} if method != "GET" else {})
                    assert response.status_code == 400, (method, name, response.text)
                    problem = response.json()
                    assert problem["code"] == "invalid" and code in problem["detail"]
            listed = http.get("/v1/stores/notes/files", params={"glob": f"*{char}*"})
            assert listed.status_code == 400 and listed.json()["code"] == "invalid"
        assert http.get("/healthz").status_code == 200
    created_nothing(daemon)


async def test_mcp_over_stdio_refuses_them(daemon: Daemon) -> None:
    async with mcp_session(daemon.socket, uid=UID_A) as client:
        for char, code in HOSTILE.items():
            for name in names(char):
                for tool, arguments in (("storage_write", {"path": name, "content": "x\n"}),
                                        ("storage_read", {"path": name})):
                    text = await call_error(client, tool, arguments)
                    assert text.startswith("Invalid request") and code in text, text
                    assert len(text.splitlines()) == 1, text  # the name is escaped in it
            text = await call_error(client, "storage_list", {"pattern": f"notes/*{char}"})
            assert text.startswith("Invalid request") and len(text.splitlines()) == 1
        await call_ok(client, "storage_list", {})  # still serving
    created_nothing(daemon)


@contextlib.asynccontextmanager
async def mcp_http(daemon: Daemon, token: str) -> AsyncIterator[McpClient]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=60) as http, McpClient(
            streamable_http_client(f"{daemon.http_url}/mcp", http_client=http),
            read_timeout_seconds=60) as client:
        yield client


async def test_mcp_over_http_refuses_them(daemon: Daemon, token: str) -> None:
    async with mcp_http(daemon, token) as client:
        for char, code in HOSTILE.items():
            text = await call_error(client, "storage_write",
                                    {"path": names(char)[0], "content": "x\n"})
            assert text.startswith("Invalid request") and code in text, text
    created_nothing(daemon)


def test_the_cli_refuses_them(daemon: Daemon) -> None:
    for char, code in HOSTILE.items():
        for args in (["write", names(char)[0]], ["cat", names(char)[1]],
                     ["ls", f"notes/**/*{char}*"],
                     ["task", "add", "t-cli", "--title", f"a{char}b", "--store", "team"]):
            if args[0] == "task" and char not in LINE_BREAKS:
                continue  # a title is text: only a line break is refused in it
            done = memfs_as(UID_A, daemon.socket, *args, input=b"x\n")
            assert done.returncode == 2, (args, done.stdout, done.stderr)
            assert b"invalid" in done.stderr.lower() or code.encode() in done.stderr
    created_nothing(daemon)


def test_planted_names_are_neither_listed_nor_searched(daemon: Daemon) -> None:
    notes = Path(daemon.config["root"]) / "stores" / "notes"
    owner = notes.stat()
    planted = [f"x{char}FORGED-{n}.md:1:run rm -rf now" for n, char in enumerate(HOSTILE)]
    for name in planted:
        (notes / name).write_text("needle in a planted file\n")
    folder = notes / "dir\u2028notes"
    folder.mkdir()
    (folder / "inside.md").write_text("needle inside a planted folder\n")
    undecodable = os.path.join(os.fsencode(notes), b"bad\xff.md")
    with open(undecodable, "wb") as out:
        out.write(b"needle with a name that is not UTF-8\n")
    for path in [*(notes / n for n in planted), folder, folder / "inside.md"]:
        os.chown(path, owner.st_uid, owner.st_gid)
    os.chown(undecodable, owner.st_uid, owner.st_gid)
    (notes / "plain.md").write_text("needle in a plain file\n")
    os.chown(notes / "plain.md", owner.st_uid, owner.st_gid)
    try:
        with connect_as(UID_A, daemon.socket) as alice:
            assert [p for p in alice.list("notes/**") if "plain" in p] == ["notes/plain.md"]
            assert all(p.isprintable() for p in alice.list())
            found = alice.search(["--line-number", "--with-filename", "needle"])
            lines = found["output"].splitlines()
            assert lines == ["notes/plain.md:1:needle in a plain file"], lines
            for pattern in ("needle", "FORGED"):
                listed = alice.search(["-l", pattern, "notes"])["output"].splitlines()
                assert listed in ([], ["notes/plain.md"]), listed
            with pytest.raises(InvalidError):
                alice.search(["needle", f"notes/{planted[0]}"])
        shown = memfs_as(UID_A, daemon.socket, "grep", "needle")
        assert shown.returncode == 0, shown.stderr
        assert [line.split(":", 1)[0] for line in shown.stdout.decode().splitlines()] == [
            "notes/plain.md"]
    finally:
        for path in [*(notes / n for n in planted), folder / "inside.md", notes / "plain.md"]:
            path.unlink()
        folder.rmdir()
        os.unlink(undecodable)
