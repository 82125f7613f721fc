"""The live pages' event stream (``/ui/events``) against a real daemon: commits made
through the socket arrive as events, only for the agent's stores; a stream ends when
its token is revoked, and when the daemon stops (which it then does cleanly)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx

from tests.control.http.conftest import http_config
from tests.control.http.web.conftest import sign_in
from tests.support import UID_A, Daemon, connect_as, memfs_as, scaled


def events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, object]]]:
    """(event name, data) of a text/event-stream, one at a time."""
    name, data = "", ""
    for line in lines:
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data = line[len("data: "):]
        elif not line and name:
            yield name, json.loads(data or "{}")
            name, data = "", ""


def open_stream(web: httpx.Client) -> httpx.Response:
    """A streamed GET of the events (the caller closes it)."""
    return web.send(web.build_request("GET", "/ui/events", timeout=scaled(60)), stream=True)


def test_commits_arrive_for_the_agents_stores_only(daemon: Daemon,
                                                   tokens: dict[str, str]) -> None:
    web = sign_in(daemon, tokens["carol"])  # carol reads notes and team, not ops
    response = open_stream(web)
    try:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        stream = events(response.iter_lines())
        assert next(stream) == ("hello", {"agent": "carol"})
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("ops/events/hidden.md", "not for carol\n")
            alice.write("notes/events/shown.md", "for carol\n")
        # events come in commit order: had ops reached carol, it would come first
        assert next(stream) == ("commit", {"store": "notes", "path": "notes/events/shown.md"})
    finally:
        response.close()
        web.close()


def test_a_stream_ends_when_its_token_is_revoked(daemon: Daemon) -> None:
    token = daemon.token("dave", "--label", "events, to revoke")
    web = sign_in(daemon, token)
    response = open_stream(web)
    try:
        stream = events(response.iter_lines())
        assert next(stream)[0] == "hello"
        assert memfs_as(0, daemon.socket, "token", "revoke", token.split("_")[1]).returncode == 0
        with connect_as(UID_A, daemon.socket) as alice:  # something dave would see
            alice.call("task_add", store="team", task="after-revoke", title="after")
        assert next(stream) == ("end", {"reason": "signed out"})
        assert list(stream) == []  # and the daemon closed it
        response.close()
        assert web.get("/ui/events").status_code == 401
    finally:
        response.close()
        web.close()


def test_the_daemon_stops_cleanly_with_streams_open() -> None:
    daemon = Daemon(http_config("memfs-web-stop-")).start()
    try:
        web = sign_in(daemon, daemon.token("alice"))
        responses = [open_stream(web) for _ in range(3)]
        ends: list[tuple[str, dict[str, object]]] = []

        def read(response: httpx.Response) -> None:
            for event in events(response.iter_lines()):
                if event[0] == "end":
                    ends.append(event)

        readers = [threading.Thread(target=read, args=(r,)) for r in responses]
        for reader in readers:
            reader.start()
        with connect_as(UID_A, daemon.socket) as alice:  # the streams are being served
            alice.write("notes/stop.md", "x\n")
        assert daemon.stop(timeout=scaled(60)) == 0
        for reader in readers:
            reader.join(scaled(60))
            assert not reader.is_alive()
        assert ends == [("end", {"reason": "the daemon is stopping"})] * 3
        assert "Traceback" not in daemon.log()
    finally:
        if daemon.alive():
            daemon.kill()
