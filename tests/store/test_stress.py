"""Lost-update stress: agents increment one counter by read-modify-write through the
socket, retrying on conflict, until each has had INCREMENTS writes accepted (a count,
not a time budget: a slow machine takes longer, it does not test less). The final value
must equal the number of accepted writes, with one daemon and with two daemons sharing
one root."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from memfs.control.client import Client, ConflictError
from tests.support import Daemon, connect_as, public_tmpdir

AGENTS = 6
FIRST_UID = 2100
INCREMENTS = 25  # accepted writes per agent


def counter_config(base: Path, socket_name: str, mount_name: str) -> dict[str, Any]:
    return {
        "root": str(base / "root"),
        "mount": str(base / mount_name),
        "socket": str(base / socket_name),
        "stores": {"notes": {}},
        "agents": {f"worker{i}": {"uid": FIRST_UID + i, "stores": {"notes": "read_write"}}
                   for i in range(AGENTS)},
    }


def increment(client: Client, tally: list[int], conflicts: list[int], index: int) -> None:
    while tally[index] < INCREMENTS:
        value = int(client.read("notes/counter")["text"])
        try:
            client.write("notes/counter", f"{value + 1}\n")
        except ConflictError:
            conflicts[index] += 1
            continue
        tally[index] += 1


@pytest.mark.slow
@pytest.mark.parametrize("daemons", [1, 2])
def test_no_lost_update(daemons: int) -> None:
    base = public_tmpdir()
    configs = [counter_config(base, f"d{n}.sock", f"m{n}") for n in range(daemons)]
    running = [Daemon(config).start() for config in configs]
    try:
        clients = [connect_as(FIRST_UID + i, running[i % daemons].socket) for i in range(AGENTS)]
        clients[0].write("notes/counter", "0\n")
        tally, conflicts = [0] * AGENTS, [0] * AGENTS
        threads = [threading.Thread(target=increment, args=(clients[i], tally, conflicts, i))
                   for i in range(AGENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        final = int(clients[0].read("notes/counter")["text"])
        assert sum(tally) == AGENTS * INCREMENTS
        assert sum(conflicts) > 0, "no interleaving happened; the test proved nothing"
        assert final == sum(tally), f"lost updates: counter {final}, accepted {sum(tally)}"
        for client in clients:
            client.close()
    finally:
        for daemon in running:
            daemon.stop()
