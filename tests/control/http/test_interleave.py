"""No lost update across transports: HTTP writers (If-Match from their GET) and socket
writers (the client's own version tracking), two agents each way, interleaved at
random on one file. Every accepted write's base must be the version it replaced, and
every accepted line must survive."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import httpx

from memfs.control.client import Client, ConflictError
from tests.control.http.conftest import client
from tests.support import UID_A, UID_B, Daemon, connect_as, scaled

PATH = "notes/interleaved.md"
URL = f"/v1/stores/{PATH.replace('notes/', 'notes/files/', 1)}"
WRITES_EACH = 8
MAX_ATTEMPTS = 400  # per writer: bounded even if every attempt conflicted
SEED = 20261130

Attempt = Callable[[str], tuple[bool, str, str | None]]  # -> (accepted, base, replaced)


def http_writer(http: httpx.Client, pause: Callable[[], None]) -> Attempt:
    def attempt(line: str) -> tuple[bool, str, str | None]:
        got = http.get(URL)
        assert got.status_code == 200, got.text
        pause()
        put = http.put(URL, content=got.content + line.encode(),
                       headers={"If-Match": got.headers["etag"]})
        if put.status_code in (409, 412):
            return False, "", None
        assert put.status_code == 200, put.text
        return True, got.headers["etag"].strip('"'), put.json()["previous_digest"]
    return attempt


def socket_writer(socket: Client, pause: Callable[[], None]) -> Attempt:
    def attempt(line: str) -> tuple[bool, str, str | None]:
        read = socket.read(PATH)
        pause()
        try:
            result = socket.write(PATH, read["text"] + line)
        except ConflictError:
            return False, "", None
        return True, read["digest"], result["previous_digest"]
    return attempt


def test_http_and_socket_writers_never_lose_an_update(daemon: Daemon,
                                                      tokens: dict[str, str]) -> None:
    with client(daemon, tokens["alice"]) as setup:
        assert setup.put(URL, content=b"# interleaved\n").status_code in (200, 201)
    master = random.Random(SEED)
    accepted: list[str] = []
    problems: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + scaled(240)  # a budget: the writers stop on counts

    def run(name: str, make: Callable[[Callable[[], None]], Attempt], seed: int) -> None:
        rng = random.Random(seed)

        def pause() -> None:
            time.sleep(rng.choice((0, 0, 0.001, 0.003, 0.01)))

        attempt = make(pause)
        done = tries = 0
        while done < WRITES_EACH and tries < MAX_ATTEMPTS and time.monotonic() < deadline:
            tries += 1
            line = f"{name} write {done}\n"
            try:
                ok, base, replaced = attempt(line)
            except Exception as error:  # reported below, not swallowed
                with lock:
                    problems.append(f"{name}: {error!r}")
                return
            if ok:
                done += 1
                with lock:
                    accepted.append(line)
                    if replaced != base:
                        problems.append(f"{name}: wrote over {replaced}, had read {base}")
            time.sleep(rng.random() * 0.005)
        if done < WRITES_EACH:
            with lock:
                problems.append(f"{name}: only {done} writes in {tries} attempts")

    http_alice = client(daemon, tokens["alice"])
    http_bob = client(daemon, tokens["bob"])
    socket_alice = connect_as(UID_A, daemon.socket)
    socket_bob = connect_as(UID_B, daemon.socket)
    writers = [
        ("http-alice", lambda pause: http_writer(http_alice, pause)),
        ("http-bob", lambda pause: http_writer(http_bob, pause)),
        ("socket-alice", lambda pause: socket_writer(socket_alice, pause)),
        ("socket-bob", lambda pause: socket_writer(socket_bob, pause)),
    ]
    threads = [threading.Thread(target=run, args=(name, make, master.randrange(1 << 30)))
               for name, make in writers]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(scaled(300))
    finally:
        for closeable in (http_alice, http_bob, socket_alice, socket_bob):
            closeable.close()
    assert not problems, f"seed {SEED}: {problems}"
    assert len(accepted) == WRITES_EACH * len(writers)
    with client(daemon, tokens["carol"]) as reader:
        final = reader.get(URL).text.splitlines(keepends=True)
    assert final[0] == "# interleaved\n"
    assert sorted(final[1:]) == sorted(accepted), "an accepted write was lost"
