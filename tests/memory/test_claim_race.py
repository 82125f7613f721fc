"""8 agents through two daemons on one root claim the same task at the same moment,
200 rounds: exactly one winner per round, everyone else lease_held."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from control.client import Client, MemfsClientError
from tests.memory.conftest import memory_config
from tests.support import Daemon, connect_as, public_tmpdir

AGENTS = 8
ROUNDS = 200


@pytest.mark.slow
def test_one_winner_per_round() -> None:
    base = public_tmpdir()
    config = memory_config(base)
    for n in range(AGENTS):
        config["agents"][f"racer{n}"] = {"uid": 3100 + n, "stores": {"team": "read_write"}}
    second = dict(config, socket=str(base / "second.sock"), mount=str(base / "m2"))
    first_daemon, second_daemon = Daemon(config).start(), Daemon(second).start()
    try:
        clients: list[Client] = [
            connect_as(3100 + n, (first_daemon, second_daemon)[n % 2].socket)
            for n in range(AGENTS)]
        clients[0].call("task_add", store="team", task="contended", title="one winner")
        barrier = threading.Barrier(AGENTS)
        outcomes: list[list[str]] = [[] for _ in range(ROUNDS)]
        errors: list[BaseException] = []

        def racer(index: int) -> None:
            client = clients[index]
            try:
                for round_ in range(ROUNDS):
                    barrier.wait(timeout=60)
                    try:
                        client.call("task_claim", store="team", task="contended", ttl="1h")
                        outcomes[round_].append(f"win:{index}")
                    except MemfsClientError as error:
                        outcomes[round_].append(error.code)
                    barrier.wait(timeout=60)
                    if f"win:{index}" in outcomes[round_]:
                        client.call("task_release", store="team", task="contended")
                    barrier.wait(timeout=60)
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)
                barrier.abort()

        threads = [threading.Thread(target=racer, args=(n,)) for n in range(AGENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        for round_, results in enumerate(outcomes):
            winners = [r for r in results if r.startswith("win:")]
            assert len(winners) == 1, (round_, results)
            assert sorted(r for r in results if not r.startswith("win:")) == \
                ["lease_held"] * (AGENTS - 1)
        assert len({r for results in outcomes for r in results if r.startswith("win:")}) > 1
        history = Path(config["root"]) / "state" / "history" / "team.git"
        assert history.exists()
    finally:
        first_daemon.stop()
        second_daemon.stop()
