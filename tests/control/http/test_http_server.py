"""control/http/server.py's ConnectionTable: admission within the limits, which
connection is closed to make room, and when a new one is refused."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import trio

from memfs.control.http.server import ConnectionTable, HttpLimits, _Connection


@pytest.fixture
def made() -> Iterator[list[socket.socket]]:
    """The client ends of the connections a test makes (closed after it)."""
    ends: list[socket.socket] = []
    yield ends
    for end in ends:
        end.close()


def connection(made: list[socket.socket], address: str) -> _Connection:
    ours, theirs = socket.socketpair()
    made.append(theirs)
    return _Connection(trio.socket.from_stdlib_socket(ours), (address, 1), ("127.0.0.1", 7800))


async def test_a_newcomer_closes_the_longest_waiting_connection(made: list[socket.socket]) -> None:
    table = ConnectionTable(HttpLimits(max_connections=3, max_connections_per_address=3))
    first, second, third = (connection(made, f"10.0.0.{n}") for n in (1, 2, 3))
    for conn in (first, second, third):
        assert table.admit(conn) is None
    table.busy(first)  # inside a request: never closed to make room
    fourth = connection(made, "10.0.0.4")
    assert table.admit(fourth) is None
    assert second.sock.fileno() == -1 and second not in table.open  # waited longest
    assert first.sock.fileno() != -1 and len(table.open) == 3
    table.busy(third)
    table.busy(fourth)
    refused = table.admit(connection(made, "10.0.0.5"))
    assert refused is not None and "maximum of 3 connections" in refused
    assert len(table.open) == 3
    table.wait(third)  # back to waiting for its next request
    assert table.admit(connection(made, "10.0.0.5")) is None
    assert third.sock.fileno() == -1


async def test_over_its_address_limit_a_newcomer_closes_only_its_own(
        made: list[socket.socket]) -> None:
    table = ConnectionTable(HttpLimits(max_connections=10, max_connections_per_address=2))
    other = connection(made, "10.0.0.9")
    mine = [connection(made, "10.0.0.1") for _ in range(2)]
    for conn in (other, *mine):
        assert table.admit(conn) is None
    assert table.admit(connection(made, "10.0.0.1")) is None
    assert mine[0].sock.fileno() == -1 and other.sock.fileno() != -1
    for conn in list(table.waiting):
        if conn.address == "10.0.0.1":
            table.busy(conn)
    refused = table.admit(connection(made, "10.0.0.1"))
    assert refused is not None and "10.0.0.1 has its maximum of 2" in refused
    assert table.by_address == {"10.0.0.9": 1, "10.0.0.1": 2}


async def test_release_is_idempotent_and_counts_go_to_zero(made: list[socket.socket]) -> None:
    table = ConnectionTable(HttpLimits(max_connections=2, max_connections_per_address=2))
    conn = connection(made, "10.0.0.1")
    assert table.admit(conn) is None
    table.release(conn)
    table.release(conn)
    assert (table.open, table.by_address, table.waiting) == (set(), {}, {})
