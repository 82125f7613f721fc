"""One mistake, one answer: a store the agent does not have (there is none of that name,
or it is another agent's) and a path that does not exist are `not_found`, exit 5, with
one wording and the names the agent may have meant, for every command of the real CLI
against a real daemon; and the same over HTTP (404, ``details.did_you_mean``). A
search names a missing path before rg runs, never with rg's own error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.control.http.conftest import client
from tests.support import UID_A, UID_C, Daemon, connect_as, memfs_as, public_tmpdir, standard_config

NO_NOTS = 'not found: no store named "nots" (did you mean "notes"?)'
NO_TOW = 'not found: notes/one/tow.md does not exist (did you mean "notes/one/two.md"?)'


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    config = standard_config(public_tmpdir())
    config["stores"]["team"] = {"structured": True}
    config["agents"]["alice"]["stores"]["team"] = "read_write"
    config["http"] = {"listen": "127.0.0.1:0"}
    with Daemon(config) as running:
        with connect_as(UID_A, running.socket) as alice:
            alice.write("notes/one/two.md", "two\n")
        yield running


@pytest.mark.parametrize(
    ("uid", "args", "said"),
    [
        (UID_A, ["ls", "nots/**"], NO_NOTS),
        (UID_A, ["cat", "nots/a.md"], NO_NOTS),
        (UID_A, ["stat", "nots/a.md"], NO_NOTS),
        (UID_A, ["write", "nots/a.md"], NO_NOTS),
        (UID_A, ["edit", "nots/a.md", "-e", "p"], NO_NOTS),
        (UID_A, ["rm", "nots/a.md"], NO_NOTS),
        (UID_A, ["log", "nots"], NO_NOTS),
        (UID_A, ["grep", "two", "nots"], NO_NOTS),
        (UID_A, ["grep", "two", "/memory/nots/one"], NO_NOTS),
        (UID_A, ["brief", "nots"], NO_NOTS),
        (UID_A, ["task", "list", "--store", "nots"], NO_NOTS),
        (UID_A, ["session", "list", "--store", "nots"], NO_NOTS),
        # another agent's store is one that does not exist, and is never suggested
        (UID_A, ["cat", "secret/a.md"], 'not found: no store named "secret"\n'),
        (UID_A, ["ls", "secrt/**"], 'not found: no store named "secrt"\n'),
        (UID_C, ["grep", "two", "ops"], 'not found: no store named "ops"\n'),
        (UID_A, ["cat", "notes/one/tow.md"], NO_TOW),
        (UID_A, ["stat", "notes/one/tow.md"], NO_TOW),
        (UID_A, ["ls", "notes/one/tow.md"], NO_TOW),
        (UID_A, ["edit", "notes/one/tow.md", "-e", "p"], NO_TOW),
        (UID_A, ["rm", "notes/one/tow.md"], NO_TOW),
        (UID_A, ["log", "notes/one/tow.md"], NO_TOW),
        (UID_A, ["grep", "two", "notes/one/tow.md"], NO_TOW),
        (UID_A, ["ls", "notes/onr/**"],
         'not found: notes/onr does not exist (did you mean "notes/one"?)'),
        (UID_A, ["grep", "x", "notes/nope"], "not found: notes/nope does not exist\n"),
        (UID_A, ["cat", "notes/on/two.md"], 'not found: notes/on/two.md does not exist (no '
                                             'folder "notes/on"; did you mean "notes/one"?)'),
    ],
)
def test_one_mistake_one_answer(daemon: Daemon, uid: int, args: list[str], said: str) -> None:
    done = memfs_as(uid, daemon.socket, *args, input=b"x\n")
    assert (done.returncode, done.stdout) == (5, b""), done.stderr
    assert done.stderr.decode().startswith(f"memfs: {said}"), done.stderr
    assert b"rg:" not in done.stderr and b"Traceback" not in done.stderr


def test_what_exists_is_found(daemon: Daemon) -> None:
    """Not an error: a write creates its folders, a wildcard may match nothing."""
    assert memfs_as(UID_A, daemon.socket, "write", "notes/new/folder/a.md",
                    input=b"a\n").returncode == 0
    listed = memfs_as(UID_A, daemon.socket, "ls", "notes/one/*.csv")
    assert (listed.returncode, listed.stdout) == (0, b"")
    assert memfs_as(UID_A, daemon.socket, "grep", "two", "notes/one").returncode == 0


def test_over_http_too(daemon: Daemon) -> None:
    token = daemon.token("alice")
    with client(daemon, token) as http:
        for url, near in [("/v1/stores/notes/files/one/tow.md", ["notes/one/two.md"]),
                          ("/v1/stores/nots/files/one/two.md", ["notes"]),
                          ("/v1/stores/secret/files/a.md", None)]:
            answer = http.get(url)
            assert answer.status_code == 404, answer.text
            problem = answer.json()
            assert problem["code"] == "not_found"
            assert problem["details"].get("did_you_mean") == near, problem
