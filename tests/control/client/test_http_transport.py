"""The Client over both transports, the daemon's socket and its HTTP listener
(control/client/http.py), against one real daemon: the same ops give the same results
and the same errors, and one client's read-then-write is version-checked alike (over
HTTP through If-Match / If-None-Match)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memfs.control.client import (
    Client,
    ConflictError,
    ConnectionFailed,
    InvalidError,
    LeaseHeldError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
)
from memfs.control.client.http import ROUTES, SPECIAL, HttpTransport, http_client, page
from tests.control.http.conftest import http_config
from tests.support import UID_A, UID_B, UID_C, Daemon, connect_as

UIDS = {"alice": UID_A, "bob": UID_B, "carol": UID_C}
Connect = Callable[[str], Client]


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(http_config("memfs-http-client-")) as running:
        yield running


@pytest.fixture(scope="module")
def token_files(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("tokens")
    files = {}
    for agent in UIDS:
        path = folder / agent
        path.write_text(daemon.token(agent) + "\n")
        path.chmod(0o600)
        files[agent] = str(path)
    return files


@pytest.fixture(params=["socket", "http"])
def connect(request: pytest.FixtureRequest, daemon: Daemon, token_files: dict[str, str]
            ) -> Iterator[Connect]:
    """Open a client for an agent over the transport of the test's parameter; closed
    after the test."""
    opened: list[Client] = []

    def open_one(agent: str) -> Client:
        if request.param == "socket":
            client = connect_as(UIDS[agent], daemon.socket)
        else:
            client = http_client(daemon.http_url, token_files[agent])
        opened.append(client)
        return client

    yield open_one
    for client in opened:
        client.close()


def unique(name: str, request: pytest.FixtureRequest) -> str:
    """A path of its own for each test and transport."""
    return f"notes/client-{request.node.callspec.id}/{name}"


def test_routes_are_the_daemons() -> None:
    """Every op the client sends goes to the route the daemon declares for it."""
    from memfs.control.http.op_routes import operations

    declared = {op.op: (op.method, op.path) for op in operations() if op.adjust is None}
    assert {name: route for name, route in declared.items() if name in ROUTES} == ROUTES
    left = set(declared) - set(ROUTES)
    assert left <= set(SPECIAL), left  # those have their own shape


def test_files_round_trip(connect: Connect, request: pytest.FixtureRequest) -> None:
    alice = connect("alice")
    path = unique("a.md", request)
    made = alice.write(path, b"one\ntwo\nthree")
    assert made["created"] and made["size"] == 13 and made["previous_digest"] is None
    got = alice.read(path, offset=2, limit=1)
    assert (got["text"], got["lines"], got["total_lines"], got["next_offset"]) == \
        ("two\n", 1, 3, 3)
    assert got["digest"] == made["digest"] and got["last_writer"] == "alice"
    data, meta = alice.read_bytes(f"/memory/{path}")
    assert data == b"one\ntwo\nthree" and meta["size"] == 13
    info = alice.stat(path)
    assert (info["digest"], info["size"], info["changed_since_last_read"], info["seen"]) == \
        (made["digest"], 13, False, made["digest"])
    assert connect("bob").stat(path)["seen"] is None  # bob never read it
    appended = alice.write(path, b"\nfour\n", append=True)
    assert appended["previous_digest"] == made["digest"]
    edited = alice.edit(path, ["s/one/ONE/"])
    assert alice.read(path)["text"] == "ONE\ntwo\nthree\nfour\n"
    assert alice.write(path, b"ONE\ntwo\nthree\nfour\n")["unchanged"]
    assert edited["size"] == 19
    assert path in alice.list(f"{path.rsplit('/', 1)[0]}/*.md")
    assert path in alice.list()
    assert alice.delete(path)["path"] == path
    with pytest.raises(NotFoundError):
        alice.read(path)


def test_binary_content(connect: Connect, request: pytest.FixtureRequest) -> None:
    alice = connect("alice")
    path = unique("b.bin", request)
    data = bytes(range(256)) * 3
    alice.write(path, data)
    assert alice.read_bytes(path)[0] == data


@pytest.mark.parametrize("data", [b"", b"a", b"a\n", b"a\nb", b"a\n\nb\n", b"\n\n"])
def test_pages_as_the_daemon_gives_them(daemon: Daemon, data: bytes) -> None:
    """The HTTP transport pages a read itself; the socket's reply is the reference."""
    with connect_as(UID_A, daemon.socket) as alice:
        path = f"notes/pages/{len(data)}-{data.count(b'n')}.md"
        alice.write(path, data, force=True)
        for offset, limit in ((1, None), (1, 1), (2, 1), (2, None), (3, 2), (5, 1)):
            theirs = alice.read(path, offset=offset, limit=limit)
            ours = page(data, offset, limit)
            assert ours == {key: theirs[key] for key in ours}, (offset, limit)  # type: ignore[literal-required]


def test_read_then_write_is_version_checked(connect: Connect,
                                            request: pytest.FixtureRequest) -> None:
    """Two clients of the same agent: the daemon's record of the agent has both their
    reads, so only what the client itself read keeps their writes apart."""
    first, second = connect("alice"), connect("alice")
    path = unique("lost.md", request)
    first.write(path, b"v1\n")
    assert second.read(path)["text"] == "v1\n"
    second.write(path, b"v2 from second\n")
    with pytest.raises(ConflictError, match="changed since you last read it") as stale:
        first.write(path, b"v2 from first\n")
    assert "alice" in stale.value.message
    assert first.read(path)["text"] == "v2 from second\n"  # nothing was lost
    first.write(path, b"v3 from first\n")  # read again: accepted
    with pytest.raises(ConflictError):
        second.delete(path)
    assert second.read(path)["text"] == "v3 from first\n"


def test_absent_then_created(connect: Connect, request: pytest.FixtureRequest) -> None:
    first, second = connect("alice"), connect("alice")
    path = unique("absent.md", request)
    with pytest.raises(NotFoundError):
        first.read(path)
    second.write(path, b"made\n")
    with pytest.raises(ConflictError, match="created since you found it absent"):
        first.write(path, b"mine\n")
    assert first.write(path, b"mine\n", force=True)["previous_digest"] is not None


def test_another_agents_write_is_a_conflict(connect: Connect,
                                            request: pytest.FixtureRequest) -> None:
    alice, bob = connect("alice"), connect("bob")
    path = unique("shared.md", request)
    alice.write(path, b"alice 1\n")
    bob.read(path)
    alice.write(path, b"alice 2\n")
    with pytest.raises(ConflictError, match="last written by alice"):
        bob.write(path, b"bob\n")
    with pytest.raises(ConflictError):
        bob.edit(path, ["s/alice/bob/"])
    assert bob.write(path, b"bob\n", force=True)["size"] == 4


def test_errors_are_the_same_classes(connect: Connect, request: pytest.FixtureRequest) -> None:
    carol = connect("carol")
    with pytest.raises(PermissionDeniedError):
        carol.write(unique("no.md", request), b"x")
    with pytest.raises(NotFoundError, match="no store named"):
        carol.read("team2/anything.md")  # not one of hers: no such store, to her
    with pytest.raises(NotFoundError, match=r"missing\.md"):
        carol.stat(unique("missing.md", request))
    with pytest.raises(InvalidError):
        carol.call("task_add", store="team", task="bad id!", title="x")


def test_search_recall_history(connect: Connect, request: pytest.FixtureRequest) -> None:
    alice = connect("alice")
    path = unique("hist.md", request)
    alice.write(path, b"zebra crossing\n")
    alice.write(path, b"zebra crossing, painted\n")
    found = alice.search(["zebra", path.rsplit("/", 1)[0]])
    assert found["exit_code"] == 0 and f"{path}:zebra crossing, painted" in found["output"]
    matches = alice.search(["zebra", path], structured=True)["matches"]
    assert [m["path"] for m in matches] == [path]
    assert alice.recall("zebra painted", store="notes")["hits"][0]["path"] == path
    log = alice.log(path, limit=5)
    assert [entry["op"] for entry in log[:2]] == ["write", "write"]
    assert alice.log(limit=1)[0]["rev"] == log[0]["rev"]  # every store: newest first
    old, meta = alice.show_bytes(path, "HEAD~1")
    assert old == b"zebra crossing\n" and meta["rev"] == log[1]["rev"]
    assert alice.show(path, log[1]["rev"])["text"] == "zebra crossing\n"
    assert "+zebra crossing, painted" in alice.diff(path, "HEAD~1")["diff"]
    alice.read(path)
    restored = alice.restore(path, "HEAD~1")
    assert alice.read_bytes(path)[0] == b"zebra crossing\n" and not restored["unchanged"]


def test_restore_is_version_checked(connect: Connect, request: pytest.FixtureRequest) -> None:
    first, second = connect("alice"), connect("alice")
    path = unique("restore.md", request)
    first.write(path, b"a\n")
    first.write(path, b"b\n")
    second.read(path)
    second.write(path, b"c\n")
    with pytest.raises(ConflictError):
        first.restore(path, "HEAD~2")


def test_memory_ops(connect: Connect, request: pytest.FixtureRequest) -> None:
    alice, bob = connect("alice"), connect("bob")
    task = f"t-{request.node.callspec.id}"
    assert alice.call("task_add", store="team", task=task, title="do it")["id"] == task
    alice.call("task_claim", store="team", task=task, ttl="10m")
    with pytest.raises(LeaseHeldError):
        bob.call("task_claim", store="team", task=task, ttl="10m")
    assert bob.call("task_show", store="team", task=task)["status"] == "claimed"
    session = bob.call("session_start", goal="look")["id"]  # bob's only structured store
    bob.call("session_checkpoint", session=session, note="looked")
    assert bob.call("session_show", session=session)["entries"][0]["note"] == "looked"
    made = bob.call("decision_record", title="t", decision="d", reason="r")
    assert made["id"] in [d["id"] for d in bob.call("decision_list")["decisions"]]
    assert "markdown" in bob.call("brief")
    with pytest.raises(InvalidError, match="several structured stores"):
        alice.call("task_list")  # alice has two: she must name one


# -- HTTP only -----------------------------------------------------------------------------


def test_revoked_token(daemon: Daemon, tmp_path: Path) -> None:
    token = daemon.token("alice", "--label", "to revoke")
    path = tmp_path / "token"
    path.write_text(token)
    path.chmod(0o600)
    with http_client(daemon.http_url, str(path)) as alice:
        alice.whoami()
        with connect_as(0, daemon.socket) as root:
            root.call("token_revoke", token=token.split("_")[1])
        with pytest.raises(UnauthenticatedError, match="unknown, revoked or expired"):
            alice.whoami()


def test_token_file_must_be_private(daemon: Daemon, tmp_path: Path,
                                    token_files: dict[str, str]) -> None:
    path = tmp_path / "token"
    path.write_text(Path(token_files["alice"]).read_text())
    path.chmod(0o644)
    with pytest.raises(InvalidError, match="chmod 600"):
        http_client(daemon.http_url, str(path))
    with pytest.raises(InvalidError, match="--token-file"):
        http_client(daemon.http_url, None)


@pytest.mark.parametrize("url", ["ftp://host", "host:7800", "http://", "http://h:99999",
                                 "http://user:pw@h", "https://h/?x=1",
                                 "http://memfs.example:7800", "http://10.0.0.2"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidError, match="bad URL"):
        HttpTransport(url, "token")


def test_plain_http_only_to_loopback() -> None:
    with pytest.raises(InvalidError, match="clear text"):
        HttpTransport("http://memfs.example", "token")
    for url in ("http://localhost:7800", "http://127.0.0.2", "http://[::1]:80/prefix",
                "https://memfs.example", "https://10.0.0.2:7800"):
        HttpTransport(url, "token").close()


def test_unreachable() -> None:
    with socket.socket() as held:  # a port nobody listens on
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
    with pytest.raises(ConnectionFailed, match=f"cannot reach the memfs daemon at "
                       f"http://127.0.0.1:{port}"):
        HttpTransport(f"http://127.0.0.1:{port}", "token").exchange("whoami", {})


def test_operator_ops_are_not_sent(daemon: Daemon, token_files: dict[str, str]) -> None:
    with http_client(daemon.http_url, token_files["alice"]) as alice, \
            pytest.raises(UnavailableError, match="socket"):
        alice.call("token_list")


def test_a_closed_connection_is_reopened(daemon: Daemon, token_files: dict[str, str]) -> None:
    with http_client(daemon.http_url, token_files["alice"]) as alice:
        alice.write("notes/reopen.md", b"x\n", force=True)
        transport = alice.transport
        assert isinstance(transport, HttpTransport) and transport._conn is not None
        sock = transport._conn.sock
        assert sock is not None
        sock.shutdown(socket.SHUT_RDWR)  # as if the daemon had closed it
        assert alice.read("notes/reopen.md")["text"] == "x\n"


def test_the_http_client_is_standard_library_only() -> None:
    """`memfs --url ... cat` starts without the server stack or any HTTP package."""
    import subprocess
    import sys

    code = ("import sys, memfs.cli, memfs.control.client.http; bad = {'trio', 'pydantic', "
            "'httpx', 'starlette', 'anyio', 'h11', 'blake3', 'memfs.store'} & set(sys.modules); "
            "print(sorted(bad)); sys.exit(bool(bad))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("patterns", [
    (), ("notes/**",), ("notes",), ("*/x",), ("**/*.md",), ("*/list/*.md",),
    ("notes/list/a.md", "ops/**"), ("/memory/notes/list/*",), ("notes/nowhere/*",),
    ("nostore/**",),
])
def test_list_as_over_the_socket(daemon: Daemon, token_files: dict[str, str],
                                 patterns: tuple[str, ...]) -> None:
    """ls over HTTP lists a store at a time: the same paths (or error) as the socket."""
    with connect_as(UID_A, daemon.socket) as over_socket, \
            http_client(daemon.http_url, token_files["alice"]) as over_http:
        for name in ("a.md", "b.txt", "sub/c.md"):
            over_socket.write(f"notes/list/{name}", b"x", force=True)
        over_socket.write("ops/list/d.md", b"x", force=True)
        outcomes = []
        for client in (over_socket, over_http):
            try:
                outcomes.append(sorted(client.list(*patterns)))
            except NotFoundError as error:
                outcomes.append(["not found", error.message])
        assert outcomes[0] == outcomes[1]
