"""8 agents through two daemons on one root claim the same task at the same moment,
200 rounds: exactly one winner per round, everyone else lease_held."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.control.client import Client
from tests.memory.claims import assert_one_winner_per_round, claim_rounds
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
        winners = assert_one_winner_per_round(claim_rounds(clients, ROUNDS), AGENTS)
        assert len(winners) > 1
        history = Path(config["root"]) / "state" / "history" / "team.git"
        assert history.exists()
    finally:
        first_daemon.stop()
        second_daemon.stop()
