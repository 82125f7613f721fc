"""Who may do what through the socket: an allow/deny table per agent, store and op,
plus delegates. Identities come from real uids (SO_PEERCRED)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memfs.control.client import Client, MemfsClientError
from tests.support import (
    UID_A,
    UID_B,
    UID_C,
    UID_UNKNOWN,
    Daemon,
    connect_as,
    memfs_as,
    public_tmpdir,
    standard_config,
)

UIDS = {"alice": UID_A, "bob": UID_B, "carol": UID_C, "unknown": UID_UNKNOWN}


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(standard_config(public_tmpdir())) as running:
        root = connect_as(0, running.socket, as_agent="alice")
        for store in ("notes", "ops"):
            root.write(f"{store}/seed.md", "seed\n")
        root.close()
        yield running


def attempt(client: Client, op: str, store: str) -> str:
    path = f"{store}/seed.md"
    try:
        if op == "list":
            client.list(f"{store}/**")
        elif op == "read":
            client.read(path)
        elif op == "stat":
            client.stat(path)
        elif op == "write":
            client.write(f"{store}/new-by-test.md", "x\n", force=True)
        elif op == "append":
            client.write(path, "more\n", append=True)
        elif op == "delete":
            client.delete(f"{store}/never-there.md")
    except MemfsClientError as error:
        return error.code
    return "ok"


# (agent, store, op) -> expected; "secret" is attached to nobody. A store an agent is
# not attached to does not exist for it: not_found, exactly as a store there is not.
TABLE = [
    ("alice", "notes", "read", "ok"), ("alice", "notes", "write", "ok"),
    ("alice", "ops", "append", "ok"), ("alice", "ops", "list", "ok"),
    ("alice", "secret", "list", "not_found"),
    ("alice", "secret", "read", "not_found"),
    ("alice", "secret", "write", "not_found"),
    ("bob", "ops", "read", "ok"), ("bob", "ops", "stat", "ok"), ("bob", "ops", "list", "ok"),
    ("bob", "ops", "write", "permission_denied"), ("bob", "ops", "append", "permission_denied"),
    ("bob", "ops", "delete", "permission_denied"), ("bob", "notes", "append", "ok"),
    ("carol", "notes", "read", "ok"), ("carol", "notes", "write", "permission_denied"),
    ("carol", "ops", "read", "not_found"), ("carol", "ops", "list", "not_found"),
    ("carol", "ops", "stat", "not_found"), ("carol", "ops", "write", "not_found"),
    ("unknown", "notes", "read", "permission_denied"),
    ("unknown", "notes", "list", "permission_denied"),
    ("unknown", "notes", "write", "permission_denied"),
    ("alice", "nosuchstore", "list", "not_found"),
    ("alice", "nosuchstore", "read", "not_found"),
    ("alice", "nosuchstore", "write", "not_found"),
]


@pytest.mark.parametrize(("agent", "store", "op", "expected"), TABLE)
def test_access_table(daemon: Daemon, agent: str, store: str, op: str, expected: str) -> None:
    with connect_as(UIDS[agent], daemon.socket) as client:
        assert attempt(client, op, store) == expected


def test_listing_shows_only_attached_stores(daemon: Daemon) -> None:
    with connect_as(UID_C, daemon.socket) as carol:
        assert all(p.startswith("notes/") for p in carol.list())
        assert "notes/seed.md" in carol.list()
    with connect_as(UID_A, daemon.socket) as alice:
        assert {p.split("/")[0] for p in alice.list()} == {"notes", "ops"}


def test_delegate_acts_for_an_agent(daemon: Daemon) -> None:
    with connect_as(0, daemon.socket, as_agent="carol") as as_carol:
        assert as_carol.whoami()["agent"] == "carol"
        assert attempt(as_carol, "write", "notes") == "permission_denied"
        assert attempt(as_carol, "read", "notes") == "ok"
    with connect_as(0, daemon.socket, as_agent="nobody") as as_nobody:
        assert attempt(as_nobody, "read", "notes") == "permission_denied"


def test_non_delegate_cannot_act_for_another(daemon: Daemon) -> None:
    with connect_as(UID_C, daemon.socket, as_agent="alice") as fake:
        assert attempt(fake, "write", "notes") == "permission_denied"
        assert attempt(fake, "read", "notes") == "permission_denied"


@pytest.mark.parametrize(
    ("uid", "args", "code"),
    [
        (UID_C, ["write", "notes/x.md"], 4),
        (UID_C, ["cat", "ops/seed.md"], 5),
        (UID_UNKNOWN, ["ls"], 4),
        (UID_C, ["cat", "notes/missing.md"], 5),
        (UID_C, ["cat", "notes/../ops/seed.md"], 2),
        (UID_C, ["cat", "notes/seed.md"], 0),
        (UID_C, ["--as", "alice", "cat", "ops/seed.md"], 4),
        (0, ["--as", "alice", "cat", "ops/seed.md"], 0),
    ],
)
def test_cli_exit_codes_for_access(daemon: Daemon, uid: int, args: list[str], code: int) -> None:
    result = memfs_as(uid, daemon.socket, *args, input=b"data\n")
    assert result.returncode == code, result.stderr
