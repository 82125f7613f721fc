"""A task claim race across hosts: workers on three hosts claim the same task at the
same moment, round after round; exactly one winner per round (the store lock is an
flock on the shared volume)."""

from __future__ import annotations

import threading

from control.client import Client, MemfsClientError
from tests.cluster.conftest import FIRST_UID, WORKERS, Cluster, start_daemons, stop_all
from tests.support import connect_as

ROUNDS = 40


def test_one_winner_per_round_across_hosts(cluster: Cluster) -> None:
    # no history: a commit on the volume costs much more than the claim (see the README)
    stores = {"team": {"structured": True, "history": False}}
    _, daemons = start_daemons(cluster, cluster.hosts, mount=False, stores=stores)
    try:
        clients: list[Client] = [connect_as(FIRST_UID + n, daemons[n % len(daemons)].socket)
                                 for n in range(WORKERS)]
        clients[0].call("task_add", store="team", task="contended", title="one winner")
        barrier = threading.Barrier(WORKERS)
        outcomes: list[list[str]] = [[] for _ in range(ROUNDS)]
        errors: list[BaseException] = []

        def worker(index: int) -> None:
            try:
                for round_ in range(ROUNDS):
                    barrier.wait(timeout=120)
                    try:
                        clients[index].call("task_claim", store="team", task="contended")
                        outcomes[round_].append(f"win:{index}")
                    except MemfsClientError as error:
                        outcomes[round_].append(error.code)
                    barrier.wait(timeout=120)
                    if f"win:{index}" in outcomes[round_]:
                        clients[index].call("task_release", store="team", task="contended")
                    barrier.wait(timeout=120)
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)
                barrier.abort()

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(WORKERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        for round_, results in enumerate(outcomes):
            assert sum(r.startswith("win:") for r in results) == 1, (round_, results)
            assert results.count("lease_held") == WORKERS - 1, (round_, results)
        winners = {int(r[4:]) % len(daemons) for rs in outcomes for r in rs if r[:4] == "win:"}
        assert len(winners) > 1, "every round was won through the same host"
        for client in clients:
            client.close()
    finally:
        stop_all(cluster, daemons)
