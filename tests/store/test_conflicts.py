"""The conflict matrix: two agents, every pair of operations, each outcome asserted.

Both agents (alice, bob: read_write on `notes`) first read version v0 (when the row
says so); then bob does his operation, then alice does hers through the real socket.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from memfs.control.client import Client, ConflictError, MemfsClientError, NotFoundError
from tests.support import UID_A, UID_B, Daemon, connect_as, memfs_as

_names = itertools.count()

# bob's move after both read v0
BOB_OPS = ["none", "read", "replace", "append", "delete", "replace_force"]
# alice's move afterwards
ALICE_OPS = ["replace", "append", "delete", "replace_force", "delete_force", "read_then_replace"]

# Expected outcome of alice's move: "ok", "conflict" or "not_found".
EXPECTED = {
    ("none", "replace"): "ok", ("none", "append"): "ok", ("none", "delete"): "ok",
    ("read", "replace"): "ok", ("read", "append"): "ok", ("read", "delete"): "ok",
    ("replace", "replace"): "conflict", ("replace", "append"): "ok",
    ("replace", "delete"): "conflict",
    ("append", "replace"): "conflict", ("append", "append"): "ok",
    ("append", "delete"): "conflict",
    ("delete", "replace"): "conflict", ("delete", "append"): "ok",
    ("delete", "delete"): "not_found",
    ("replace_force", "replace"): "conflict", ("replace_force", "append"): "ok",
    ("replace_force", "delete"): "conflict",
}
for bob in BOB_OPS:
    EXPECTED[(bob, "replace_force")] = "ok"
    EXPECTED[(bob, "delete_force")] = "not_found" if bob == "delete" else "ok"
    # reading the latest version first always makes a replace acceptable
    EXPECTED[(bob, "read_then_replace")] = "not_found" if bob == "delete" else "ok"


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, Client]]:
    from tests.support import public_tmpdir, standard_config

    base = public_tmpdir()
    with Daemon(standard_config(base)) as daemon:
        alice, bob = connect_as(UID_A, daemon.socket), connect_as(UID_B, daemon.socket)
        yield alice, bob
        alice.close()
        bob.close()


def do(client: Client, op: str, path: str, content: str) -> None:
    if op in ("none",):
        return
    if op == "read":
        client.read(path)
    elif op == "replace":
        client.write(path, content)
    elif op == "replace_force":
        client.write(path, content, force=True)
    elif op == "append":
        client.write(path, content, append=True)
    elif op == "delete":
        client.delete(path)
    elif op == "delete_force":
        client.delete(path, force=True)
    elif op == "read_then_replace":
        client.read(path)
        client.write(path, content)
    else:  # pragma: no cover
        raise AssertionError(op)


def outcome(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except ConflictError:
        return "conflict"
    except NotFoundError:
        return "not_found"
    except MemfsClientError as error:
        return error.code
    return "ok"


@pytest.mark.parametrize(("bob_op", "alice_op"), list(itertools.product(BOB_OPS, ALICE_OPS)))
def test_matrix(clients: tuple[Client, Client], bob_op: str, alice_op: str) -> None:
    alice, bob = clients
    path = f"notes/matrix/{bob_op}-{alice_op}-{next(_names)}.md"
    alice.write(path, "v0\n")
    alice.read(path)
    bob.read(path)
    do(bob, bob_op, path, "bob\n")
    before = _content(bob, path)
    result = outcome(lambda: do(alice, alice_op, path, "alice\n"))
    assert result == EXPECTED[(bob_op, alice_op)]
    after = _content(bob, path)
    if result != "ok":
        assert after == before, "a refused write must change nothing"
    elif alice_op == "append":
        assert after == (before or "") + "alice\n", "an append never loses data"
    elif alice_op in ("delete", "delete_force"):
        assert after is None
    else:
        assert after == "alice\n"


def _content(client: Client, path: str) -> str | None:
    try:
        return str(client.read(path)["text"])
    except NotFoundError:
        return None


def test_conflict_says_who_and_what(clients: tuple[Client, Client]) -> None:
    alice, bob = clients
    path = f"notes/details-{next(_names)}.md"
    alice.write(path, "v0\n")
    bob.read(path)
    alice.write(path, "v1\n")
    with pytest.raises(ConflictError) as caught:
        bob.write(path, "stale\n")
    details = caught.value.details
    assert details["last_writer"] == "alice"
    assert details["current_digest"] == alice.stat(path)["digest"]
    assert details["seen_digest"] != details["current_digest"]
    assert "alice" in caught.value.message and "read it again" in caught.value.message


def test_create_race_second_creator_conflicts(clients: tuple[Client, Client]) -> None:
    alice, bob = clients
    path = f"notes/new-{next(_names)}.md"
    bob.write(path, "bob first\n")
    with pytest.raises(ConflictError) as caught:
        alice.write(path, "alice second\n")
    assert caught.value.details["seen_digest"] is None
    assert bob.read(path)["text"] == "bob first\n"


def test_replace_of_unread_file_conflicts_and_read_changes_notice(
    clients: tuple[Client, Client],
) -> None:
    alice, bob = clients
    path = f"notes/unread-{next(_names)}.md"
    alice.write(path, "one\n")
    with pytest.raises(ConflictError):
        bob.write(path, "two\n")
    first = bob.read(path)
    assert first["changed_since_last_read"] is False
    alice.read(path)
    alice.write(path, "three\n")
    again = bob.read(path)
    assert again["changed_since_last_read"] is True
    assert again["last_writer"] == "alice"
    assert bob.read(path)["changed_since_last_read"] is False


def test_append_by_reader_of_latest_keeps_its_version(clients: tuple[Client, Client]) -> None:
    """An agent that had the latest version before appending may replace right after;
    one that had not must read first."""
    alice, bob = clients
    path = f"notes/append-{next(_names)}.md"
    alice.write(path, "a\n")
    alice.write(path, "b\n", append=True)
    alice.write(path, "c\n")  # alice knew the whole file
    bob.write(path, "d\n", append=True)  # bob never read it
    with pytest.raises(ConflictError):
        bob.write(path, "e\n")
    assert alice.read(path)["text"] == "c\nd\n"


def test_two_processes_of_one_agent_do_not_lose_updates(
    clients: tuple[Client, Client],
) -> None:
    """Both connections are alice: they share her record, but each connection's own
    last-seen version travels with its writes, so the stale one is refused."""
    alice, _ = clients
    path = f"notes/same-agent-{next(_names)}.md"
    alice.write(path, "v0\n")
    sock = alice.socket_path
    with connect_as(UID_A, sock) as first, connect_as(UID_A, sock) as second:
        first.read(path)
        second.read(path)
        first.write(path, "v1 from first\n")
        with pytest.raises(ConflictError):
            second.write(path, "v1 from second\n")
        with pytest.raises(ConflictError):
            second.delete(path)
        with pytest.raises(ConflictError):
            second.edit(path, ["s/v0/v9/"])
        second.read(path)
        second.write(path, "v2 from second\n")
        assert first.read(path)["text"] == "v2 from second\n"
        second.write(path, "forced\n", force=True)


def test_expect_is_checked_by_the_daemon(clients: tuple[Client, Client]) -> None:
    alice, _ = clients
    path = f"notes/expect-{next(_names)}.md"
    digest = alice.write(path, "v0\n")["digest"]
    stale = "0" * 64
    with pytest.raises(ConflictError):
        alice.call("write", path=path, content="x\n", expect=stale)
    with pytest.raises(ConflictError):
        alice.call("delete", path=path, expect=stale)
    assert alice.call("write", path=path, content="v1\n", expect=digest)["size"] == 3


# -- two connections of one agent: absence is a version too -------------------------------


def test_same_agent_create_race(clients: tuple[Client, Client]) -> None:
    """Both connections found no file; the first creates it; the second's write is a
    replace of a file it never saw and is refused (it used to be accepted)."""
    alice, _ = clients
    path = f"notes/same-agent-create-{next(_names)}.md"
    with connect_as(UID_A, alice.socket_path) as c1, connect_as(UID_A, alice.socket_path) as c2:
        for client in (c1, c2):
            with pytest.raises(NotFoundError):
                client.read(path)
        c1.write(path, "from c1\n")
        with pytest.raises(ConflictError) as caught:
            c2.write(path, "from c2\n")
        assert caught.value.details["seen_absent"] is True
        assert "created since you found it absent" in caught.value.message
        assert c1.read(path)["text"] == "from c1\n"
        c2.read(path)
        c2.write(path, "from c2, after reading\n")


def test_same_agent_delete_race(clients: tuple[Client, Client]) -> None:
    """c2 deletes the file both read; c1 finds it gone and creates a new one; c2, which
    saw no file there since, must not overwrite c1's new file blindly."""
    alice, _ = clients
    path = f"notes/same-agent-delete-{next(_names)}.md"
    alice.write(path, "v0\n")
    with connect_as(UID_A, alice.socket_path) as c1, connect_as(UID_A, alice.socket_path) as c2:
        c1.read(path)
        c2.read(path)
        c2.delete(path)
        with pytest.raises(ConflictError):
            c1.write(path, "c1 edit of v0\n")  # deleted since c1 read it
        with pytest.raises(NotFoundError):
            c1.read(path)
        c1.write(path, "c1 recreated\n")
        with pytest.raises(ConflictError) as caught:
            c2.write(path, "c2 recreated\n")
        assert caught.value.details["seen_absent"] is True
        assert c1.read(path)["text"] == "c1 recreated\n"


def test_same_agent_append_then_replace(clients: tuple[Client, Client]) -> None:
    """c1 replaces the file; c2 appends to it without having read it; c2 has not seen
    c1's version, so its blind replace is refused until it reads."""
    alice, _ = clients
    path = f"notes/same-agent-append-{next(_names)}.md"
    alice.write(path, "v0\n")
    with connect_as(UID_A, alice.socket_path) as c1, connect_as(UID_A, alice.socket_path) as c2:
        c1.read(path)
        c1.write(path, "v1 by c1\n")
        c2.write(path, "appended by c2\n", append=True)
        with pytest.raises(ConflictError):
            c2.write(path, "c2 blind replace\n")
        assert c2.read(path)["text"] == "v1 by c1\nappended by c2\n"
        c2.write(path, "c2 replace after reading\n")
        c2.write(path, "more\n", append=True)  # it knew the whole file
        c2.write(path, "c2 again\n")


def test_deleted_file_can_be_recreated_by_an_old_reader(clients: tuple[Client, Client]) -> None:
    """bob read y, alice deleted it: bob's blind re-create is a conflict, but once bob
    has seen that it is gone (a not-found read or stat), he may create it again."""
    alice, bob = clients
    path = f"notes/recreate-{next(_names)}.md"
    alice.write(path, "y\n")
    bob.read(path)
    alice.read(path)
    alice.delete(path)
    with pytest.raises(ConflictError) as caught:
        bob.write(path, "stale copy of y\n")
    assert "deleted since you last read it" in caught.value.message
    # a new process: the agent's record only
    with connect_as(UID_B, alice.socket_path) as fresh, pytest.raises(NotFoundError):
        fresh.stat(path)
    with connect_as(UID_B, alice.socket_path) as another:
        assert another.write(path, "bob's new y\n")["created"] is True


def test_deleted_file_recreate_by_cli(clients: tuple[Client, Client]) -> None:
    """The same through the real CLI: one process per command."""
    alice, bob = clients
    path = f"notes/recreate-cli-{next(_names)}.md"
    alice.write(path, "y\n")
    bob.read(path)
    alice.read(path)
    alice.delete(path)
    sock = alice.socket_path
    assert memfs_as(UID_B, sock, "write", path, input=b"stale\n").returncode == 3
    assert memfs_as(UID_B, sock, "cat", path).returncode == 5
    done = memfs_as(UID_B, sock, "write", path, input=b"new\n")
    assert done.returncode == 0, done.stderr
    assert alice.read(path)["text"] == "new\n"
