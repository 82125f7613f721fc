"""The HTTP listener's own limits (control/http/server.py), over real sockets to a real
daemon: idle, slow and stalled connections beyond the limits starve neither the
control socket, nor the mount, nor a token holder's requests; a connection the client
closed gives its descriptor back at once; a request with both Transfer-Encoding and
Content-Length is refused; a client that goes away leaves a short line at most."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.control.http.conftest import http_config
from tests.fuse.conftest import Mounted, cat, mount_config, stop_mounted
from tests.support import UID_A, UID_B, Daemon, memfs_as, public_tmpdir, scaled


def open_files(daemon: Daemon) -> int:
    assert daemon.proc is not None
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def address(daemon: Daemon) -> tuple[str, int]:
    host, port = daemon.http_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def connect(daemon: Daemon, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection to the listener from ``source`` (any 127/8 address)."""
    sock = socket.create_connection(address(daemon), timeout=scaled(60),
                                    source_address=(source, 0))
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length: status, headers (lower-case), body. Reads no
    byte past it (a pipelined answer that follows stays in the socket for the next)."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        assert byte, f"closed before a response head: {head!r}"
        head += byte
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers["content-length"])
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        assert chunk, "closed inside a response body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def closed_by_peer(sock: socket.socket) -> bool:
    """True when the daemon closed the connection (EOF or reset), waiting for it."""
    sock.settimeout(scaled(60))
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def request(daemon: Daemon, method: str, target: str, *, token: str | None = None,
            source: str = "127.0.0.1", body: bytes = b"",
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request on a connection of its own, closed after the response."""
    lines = [f"{method} {target} HTTP/1.1", "Host: memfs", f"Content-Length: {len(body)}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    with connect(daemon, source) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return read_response(sock)


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + scaled(seconds)
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def many_fds() -> Iterator[None]:
    """Room in this test process for thousands of sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 8192
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Daemon, str]]:
    """A daemon of this module's own (its descriptors and log are counted), and a
    token of alice's."""
    with Daemon(http_config("memfs-listener-")) as running:
        yield running, running.token("alice")


def test_a_closed_connection_gives_its_descriptor_back_at_once(
        served: tuple[Daemon, str]) -> None:
    daemon, _ = served
    assert request(daemon, "GET", "/healthz")[0] == 200
    before = open_files(daemon)
    for _ in range(60):  # like curl: one request, then the client closes
        with connect(daemon) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: memfs\r\n\r\n")
            assert read_response(sock)[0] == 200
            time.sleep(0.02)  # the connection is idle when its client closes it
    # Each connection's descriptor is closed as soon as its client has gone (the
    # keep-alive timeout is far longer than this wait).
    assert wait_for(lambda: open_files(daemon) <= before + 1, 10), \
        (open_files(daemon), before)


def test_transfer_encoding_with_content_length_is_refused_and_closed(
        served: tuple[Daemon, str]) -> None:
    daemon, token = served
    body = b"smuggled\n"
    with connect(daemon) as sock:
        sock.sendall(b"PUT /v1/stores/notes/files/te-cl.md HTTP/1.1\r\nHost: memfs\r\n"
                     b"Authorization: Bearer " + token.encode() + b"\r\n"
                     b"Transfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n"
                     b"9\r\n" + body + b"\r\n0\r\n\r\n")
        status, headers, answer = read_response(sock)
        assert status == 400, (status, answer)
        assert headers["content-type"].startswith("application/problem+json")
        assert json.loads(answer)["code"] == "invalid"
        assert headers.get("connection") == "close"
        assert closed_by_peer(sock)
    assert request(daemon, "GET", "/v1/stores/notes/files/te-cl.md", token=token)[0] == 404


@pytest.mark.parametrize("head", [
    b"GET /healthz HTTP/1.1\nHost: memfs\n\n",  # bare LF line ends
    b"GET /healthz HTTP/1.1\r\nHost: memfs\r\nX-A: one\r\n two\r\n\r\n",  # a folded line
    b"GET /healthz HTTP/1.1\r\nHost: memfs\r\nBad Name: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
])
def test_heads_http11_does_not_allow_are_400_and_closed(served: tuple[Daemon, str],
                                                         head: bytes) -> None:
    daemon, _ = served
    with connect(daemon) as sock:
        sock.sendall(head)
        status, headers, answer = read_response(sock)
        assert (status, headers.get("connection")) == (400, "close"), answer
        assert json.loads(answer)["code"] == "invalid"
        assert closed_by_peer(sock)


def test_continue_pipelining_chunked_bodies_and_oversized_heads(
        served: tuple[Daemon, str]) -> None:
    daemon, token = served
    auth = b"Authorization: Bearer " + token.encode() + b"\r\n"
    with connect(daemon) as sock:
        # Expect: 100-continue: the body is sent once the server asks for it
        sock.sendall(b"PUT /v1/stores/notes/files/continue.md HTTP/1.1\r\nHost: memfs\r\n"
                     + auth + b"Expect: 100-continue\r\nContent-Length: 6\r\n\r\n")
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):
            interim += sock.recv(1)
        assert interim.startswith(b"HTTP/1.1 100 "), interim
        sock.sendall(b"asked\n")
        assert read_response(sock)[0] == 201
        # two requests in one write: two answers, in order, on the same connection
        get = b"GET /v1/stores/notes/files/continue.md HTTP/1.1\r\nHost: memfs\r\n" + auth
        sock.sendall(get + b"\r\n" + b"GET /healthz HTTP/1.1\r\nHost: memfs\r\n\r\n")
        assert read_response(sock)[::2] == (200, b"asked\n")
        assert read_response(sock)[::2] == (200, b'{"status":"ok"}')
        # a chunked request body
        sock.sendall(b"PUT /v1/stores/notes/files/chunked.md HTTP/1.1\r\nHost: memfs\r\n"
                     + auth + b"Transfer-Encoding: chunked\r\n\r\n"
                     b"3\r\none\r\n4\r\n two\r\n0\r\n\r\n")
        assert read_response(sock)[0] == 201
    assert request(daemon, "GET", "/v1/stores/notes/files/chunked.md",
                   token=token)[::2] == (200, b"one two")
    with connect(daemon) as sock:  # a head over http_max_head_bytes (16 KiB)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: memfs\r\nX-Big: " + b"x" * 20000
                     + b"\r\n\r\n")
        status, headers, body = read_response(sock)
        assert (status, headers["connection"]) == (431, "close")
        assert json.loads(body)["code"] == "head_too_large"
        assert closed_by_peer(sock)


def test_slow_heads_and_stalled_bodies_are_closed() -> None:
    config = limited_config("memfs-listener-", http_head_seconds=1, http_body_seconds=1)
    with Daemon(config) as daemon:
        with connect(daemon) as slow, stalled_body(daemon, "127.0.0.1") as stalled:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: memfs\r\n")  # never ends
            assert closed_by_peer(slow)
            assert closed_by_peer(stalled)
        assert request(daemon, "GET", "/healthz")[0] == 200
        assert "Traceback" not in daemon.log()


def new_log(daemon: Daemon, start: int) -> list[str]:
    return daemon.log_path.read_bytes()[start:].decode(errors="replace").splitlines()


def answered(daemon: Daemon, token: str) -> float:
    """HTTP requests the daemon has answered so far (its own metrics)."""
    _, _, text = request(daemon, "GET", "/metrics", token=token)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
               if line.startswith("memfs_http_requests_total{"))


def test_clients_that_go_away_mid_body_leave_a_short_line_at_most(
        served: tuple[Daemon, str]) -> None:
    daemon, token = served
    start = daemon.log_path.stat().st_size
    before = answered(daemon, token)
    began = time.monotonic()
    cut_short = [
        b"POST /ui/login HTTP/1.1\r\nHost: memfs\r\nContent-Type: "
        b"application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\ntoken=x",
        b"PUT /v1/stores/notes/files/cut.md HTTP/1.1\r\nHost: memfs\r\nAuthorization: "
        b"Bearer " + token.encode() + b"\r\nContent-Length: 10000\r\n\r\nhalf a ",
        # (/mcp takes only its own names as Host: control/http/origins.py)
        b"POST /mcp HTTP/1.1\r\nHost: " + daemon.http_url.removeprefix("http://").encode()
        + b"\r\nAuthorization: Bearer " + token.encode()
        + b"\r\nAccept: application/json, text/event-stream\r\nContent-Type: "
        b"application/json\r\nContent-Length: 10000\r\n\r\n{\"jsonrpc\"",
    ]
    for _ in range(100):
        for head in cut_short:
            with connect(daemon) as sock:
                sock.sendall(head)
    # all 300 reached the application (and the metrics request of each check)
    assert wait_for(lambda: answered(daemon, token) >= before + 300, 60)
    elapsed = time.monotonic() - began
    lines = new_log(daemon, start)
    lines = [line for line in lines if "transport with session ID" not in line  # the SDK's
             and "Terminating session" not in line]  # own info lines (one per MCP session)
    assert not any("Traceback" in line or "internal" in line or "Error" in line
                   for line in lines), lines[:20]
    assert all(len(line) < 200 for line in lines), lines
    # rate-limited: a line of a kind at most every 10 s
    assert len(lines) <= 2 * (1 + elapsed / 10), lines
    assert request(daemon, "GET", "/v1/stores/notes/files/cut.md", token=token)[0] == 404


def open_http_connections(daemon: Daemon, token: str) -> float:
    """memfs_connections_open{transport="http"}, the metrics request's own included."""
    _, _, text = request(daemon, "GET", "/metrics", token=token)
    found = re.findall(r'^memfs_connections_open\{transport="http"\} (\S+)$', text.decode(),
                       re.MULTILINE)
    assert len(found) == 1, text
    return float(found[0])


def test_open_http_connections_are_a_metric(served: tuple[Daemon, str]) -> None:
    daemon, token = served
    assert wait_for(lambda: open_http_connections(daemon, token) == 1, 10)
    idle = [connect(daemon) for _ in range(3)]
    try:
        assert wait_for(lambda: open_http_connections(daemon, token) == 4, 10)
    finally:
        for sock in idle:
            sock.close()
    assert wait_for(lambda: open_http_connections(daemon, token) == 1, 10)


def stalled_body(daemon: Daemon, source: str) -> socket.socket:
    """A sign-in POST that announces more body than it sends, left open."""
    sock = connect(daemon, source)
    sock.sendall(b"POST /ui/login HTTP/1.1\r\nHost: memfs\r\nContent-Type: "
                 b"application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=x")
    return sock


def limited_config(prefix: str, **limits: Any) -> dict[str, Any]:
    config = http_config(prefix)
    config["limits"] = limits
    return config


def test_connections_per_client_address_are_limited() -> None:
    config = limited_config("memfs-listener-", http_max_connections_per_address=4,
                            http_body_seconds=600)
    with Daemon(config) as daemon:
        # Four requests under way from one address: a fifth connection is refused.
        stalled = [stalled_body(daemon, "127.0.0.2") for _ in range(4)]
        try:
            assert request(daemon, "GET", "/healthz", source="127.0.0.3")[0] == 200
            with connect(daemon, "127.0.0.2") as sock:
                sock.settimeout(scaled(60))
                status, headers, body = read_response(sock)
                assert status == 503, body
                assert headers["retry-after"] and headers["connection"] == "close"
                assert json.loads(body)["code"] == "busy"
                assert "127.0.0.2" in json.loads(body)["detail"]
                assert closed_by_peer(sock)
            assert request(daemon, "GET", "/healthz", source="127.0.0.3")[0] == 200
        finally:
            for sock in stalled:
                sock.close()
        # Connections that wait for a request are closed to make room: the oldest one
        # first, and a new one is served.
        idle = [connect(daemon, "127.0.0.4") for _ in range(4)]
        try:
            assert request(daemon, "GET", "/healthz", source="127.0.0.4")[0] == 200
            assert closed_by_peer(idle[0])
        finally:
            for sock in idle:
                sock.close()
        assert "Traceback" not in daemon.log()


class Attack:
    """Threads that hold many idle connections (opened again as they are closed, from
    several addresses), slow request heads (a byte at a time) and stalled bodies."""

    def __init__(self, daemon: Daemon, *, idle: int, slow: int, stalled: int) -> None:
        self.daemon = daemon
        self.stop = threading.Event()
        self.opened = 0
        self.threads = [threading.Thread(target=self._idle, args=(idle,)),
                        threading.Thread(target=self._slow, args=(slow,)),
                        threading.Thread(target=self._stalled, args=(stalled,))]

    def __enter__(self) -> Attack:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _connect(self, source: str) -> socket.socket | None:
        try:
            sock = socket.create_connection(address(self.daemon), timeout=1,
                                            source_address=(source, 0))
        except OSError:
            return None
        self.opened += 1
        return sock

    def _idle(self, count: int) -> None:
        held: deque[socket.socket] = deque()
        n = 0
        while not self.stop.is_set():
            n += 1
            sock = self._connect(f"127.0.1.{n % 8 + 1}")
            if sock is not None:
                held.append(sock)
            while len(held) > count:
                held.popleft().close()
            time.sleep(0.002)
        for sock in held:
            sock.close()

    def _slow(self, count: int) -> None:
        held: list[socket.socket] = []
        head = b"GET /healthz HTTP/1.1\r\nHost: memfs\r\nX-Slow: " + b"x" * 100_000
        sent = 0
        while not self.stop.is_set():
            held = [sock for sock in held if sock.fileno() >= 0]
            while len(held) < count and not self.stop.is_set():
                sock = self._connect("127.0.2.1")
                if sock is not None:
                    held.append(sock)
            for sock in held:
                try:
                    sock.send(head[sent % len(head):][:1])
                except OSError:
                    sock.close()
            sent += 1
            self.stop.wait(0.2)
        for sock in held:
            sock.close()

    def _stalled(self, count: int) -> None:
        held: list[socket.socket] = []
        while not self.stop.is_set():
            alive = []
            for sock in held:
                sock.setblocking(False)
                try:
                    gone = sock.recv(65536) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    sock.close()
                else:
                    alive.append(sock)
            held = alive
            while len(held) < count and not self.stop.is_set():
                with contextlib.suppress(OSError):
                    held.append(stalled_body(self.daemon, "127.0.3.1"))
            self.stop.wait(0.2)
        for sock in held:
            sock.close()


NOFILE = 1024  # the jail wants a hard limit of 1024 at least


@pytest.fixture
def limited_mount() -> Iterator[Mounted]:
    base = public_tmpdir("memfs-listener-")
    config = mount_config(base)
    config["http"] = {"listen": "127.0.0.1:0"}
    config["limits"] = {"max_connections": 64, "http_max_connections": 64,
                        "http_max_connections_per_address": 48, "http_head_seconds": 2,
                        "http_body_seconds": 2, "fd_reserve": NOFILE - 128}
    daemon = Daemon(config, mount=True, nofile=(NOFILE, NOFILE))
    mounted = Mounted(daemon, base, Path(config["mount"]), Path(config["socket"]),
                      Path(config["root"]))
    try:
        daemon.start()
        yield mounted
    finally:
        stop_mounted(mounted)


def test_idle_slow_and_stalled_connections_starve_no_one(
        limited_mount: Mounted, many_fds: None) -> None:
    m = limited_mount
    daemon = m.daemon
    m.write(UID_A, "notes/a.md", b"everyone is served\n")
    token = daemon.token("alice")
    most = 0
    watching = threading.Event()

    def watch() -> None:
        nonlocal most
        while not watching.is_set():
            with contextlib.suppress(OSError):
                most = max(most, open_files(daemon))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    began = time.monotonic()  # the first refusal comes after this
    try:
        with Attack(daemon, idle=2000, slow=30, stalled=30) as attack:
            assert wait_for(lambda: attack.opened > 1000, 120)  # well past the limits
            opened = attack.opened
            for _ in range(10):
                done = memfs_as(UID_A, m.socket, "cat", "notes/a.md")
                assert done.returncode == 0, done.stderr
                assert done.stdout == b"everyone is served\n"
                assert cat(m, UID_B, "notes/a.md") == b"everyone is served\n"
                status, _, body = request(daemon, "GET", "/v1/stores/notes/files/a.md",
                                          token=token)
                assert (status, body) == (200, b"everyone is served\n")
                assert request(daemon, "GET", "/healthz")[0] == 200
            assert attack.opened > opened  # the attack went on meanwhile
    finally:
        watching.set()
        watcher.join()
    # control 64 + HTTP 64 + the reserve fill the limit exactly; the reserve is not used up
    assert most < NOFILE - 64, most
    log = daemon.log()
    assert "Too many open files" not in log and "EMFILE" not in log
    assert "Traceback" not in log
    refused = re.findall(r"http: refused .*", log)
    # rate-limited: one, then at most one per 10 s, however long the attack took
    assert len(refused) <= 1 + (time.monotonic() - began) / 10, refused[-5:]
