"""A task claim race across hosts: workers on three hosts claim the same task at the
same moment, round after round; exactly one winner per round (the store lock is an
flock on the shared volume)."""

from __future__ import annotations

from memfs.control.client import Client
from tests.cluster.conftest import FIRST_UID, WORKERS, Cluster, start_daemons, stop_all
from tests.memory.claims import assert_one_winner_per_round, claim_rounds
from tests.support import connect_as

ROUNDS = 40


def test_one_winner_per_round_across_hosts(cluster: Cluster) -> None:
    # no history: a commit on the volume costs much more than the claim
    # (see docs/operate/several-hosts.md)
    stores = {"team": {"structured": True, "history": False}}
    _, daemons = start_daemons(cluster, cluster.hosts, mount=False, stores=stores)
    try:
        clients: list[Client] = [connect_as(FIRST_UID + n, daemons[n % len(daemons)].socket)
                                 for n in range(WORKERS)]
        clients[0].call("task_add", store="team", task="contended", title="one winner")
        outcomes = claim_rounds(clients, ROUNDS, timeout=120)
        winners = assert_one_winner_per_round(outcomes, WORKERS)
        assert len({index % len(daemons) for index in winners}) > 1, \
            "every round was won through the same host"
        for client in clients:
            client.close()
    finally:
        stop_all(cluster, daemons)
