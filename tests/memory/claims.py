"""The claim race both the one-host and the several-host tests run: every client
claims the same task at the same moment, round after round; the winner releases it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from memfs.control.client import Client, MemfsClientError


def claim_rounds(clients: Sequence[Client], rounds: int, *, store: str = "team",
                 task: str = "contended", timeout: float = 60) -> list[list[str]]:
    """Per round, each client's outcome: ``win:INDEX`` or the error code it got.
    Raises whatever a client raised other than a refused claim."""
    barrier = threading.Barrier(len(clients))
    outcomes: list[list[str]] = [[] for _ in range(rounds)]
    errors: list[BaseException] = []

    def racer(index: int) -> None:
        client = clients[index]
        try:
            for round_ in range(rounds):
                barrier.wait(timeout=timeout)
                try:
                    client.call("task_claim", store=store, task=task, ttl="1h")
                    outcomes[round_].append(f"win:{index}")
                except MemfsClientError as error:
                    outcomes[round_].append(error.code)
                barrier.wait(timeout=timeout)
                if f"win:{index}" in outcomes[round_]:
                    client.call("task_release", store=store, task=task)
                barrier.wait(timeout=timeout)
        except BaseException as error:  # reported below, once every racer stopped
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return outcomes


def assert_one_winner_per_round(outcomes: list[list[str]], racers: int) -> set[int]:
    """Exactly one winner per round, every other racer ``lease_held``; the winners."""
    for round_, results in enumerate(outcomes):
        winners = [r for r in results if r.startswith("win:")]
        assert len(winners) == 1, (round_, results)
        assert sorted(r for r in results if not r.startswith("win:")) == \
            ["lease_held"] * (racers - 1), (round_, results)
    return {int(r[4:]) for results in outcomes for r in results if r.startswith("win:")}
