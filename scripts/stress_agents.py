"""A team of agents under ordinary load: AGENTS agent processes (one uid and one
connection each) through two daemons on one root, each making a randomized mix of
reads, stats, replaces, appends, lists, jailed sed edits and jailed searches, CALLS
calls in all (a count, not a time). Prints how many calls got ``busy`` (by op) and
any other error; a team's ordinary load should get none.

Run as root: `.venv/bin/python scripts/stress_agents.py [--calls N] [--agents N]
[--seed N] [--max-jail-runs N]`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memfs.control.client import BusyError, Client, ConflictError, MemfsClientError
from tests.support import Daemon, connect_as, public_tmpdir

FIRST_UID = 2400
DAEMONS = 2


def team_config(base: Path, daemon: int, agents: int, max_jail_runs: int | None
                ) -> dict[str, Any]:
    config: dict[str, Any] = {
        "root": str(base / "root"),
        "mount": str(base / f"memory{daemon}"),
        "socket": str(base / f"d{daemon}.sock"),
        "stores": {"team": {}},
        "agents": {f"agent{i}": {"uid": FIRST_UID + i, "stores": {"team": "read_write"}}
                   for i in range(agents)},
    }
    if max_jail_runs is not None:
        config["limits"] = {"max_jail_runs": max_jail_runs}
    return config


def agent(index: int, agents: int, socket: str, calls: int, seed: int,
          results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """One agent process: ``calls`` calls, each chosen at random; puts (counts of
    outcomes by (op, outcome), first error messages) on ``results``."""
    rng = random.Random(seed * 1000 + index)
    outcomes: Counter[tuple[str, str]] = Counter()
    errors: list[str] = []
    with connect_as(FIRST_UID + index, socket) as client:
        client.read(f"team/agents/{index}.md")  # its own file: replaced and edited
        for n in range(calls):
            op, call = choose(rng, client, index, agents, n)
            try:
                call()
            except BusyError as error:
                outcomes[op, "busy"] += 1
                errors.append(f"{op}: busy: {error.message}")
            except ConflictError:
                outcomes[op, "conflict"] += 1
            except MemfsClientError as error:
                outcomes[op, error.code] += 1
                errors.append(f"{op}: {error.code}: {error.message}")
            else:
                outcomes[op, "ok"] += 1
    results.put((outcomes, errors[:5]))


def choose(rng: random.Random, client: Client, index: int, agents: int, n: int
           ) -> tuple[str, Any]:
    """One call (its op, and a function making it) of agent ``index``: 25% read and
    10% stat of any agent's file, 15% replace and 17% sed edit of its own file, 10%
    append to a shared log, 5% list, 18% search."""
    own = f"team/agents/{index}.md"
    other = f"team/agents/{rng.randrange(agents)}.md"
    roll = rng.random()
    if roll < 0.25:
        return "read", lambda: client.read(other)
    if roll < 0.35:
        return "stat", lambda: client.stat(other)
    if roll < 0.50:
        return "replace", lambda: client.write(own, f"v{n} of agent {index}\nnotes\n")
    if roll < 0.60:
        return "append", lambda: client.write("team/shared.log", f"{index} {n}\n", append=True)
    if roll < 0.65:
        return "list", lambda: client.list("team/**")
    if roll < 0.82:
        return "sed", lambda: client.edit(own, [f"1s/.*/v{n} of agent {index}, edited/"])
    return "search", lambda: client.search(["-l", "-e", f"agent {rng.randrange(agents)}",
                                            "team"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=16_000, help="calls in all")
    parser.add_argument("--agents", type=int, default=10, help="agent processes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-jail-runs", type=int, default=None,
                        help="[limits] max_jail_runs of each daemon (default: the default)")
    args = parser.parse_args()
    base = public_tmpdir("memfs-stress-")
    daemons = [Daemon(team_config(base, d, args.agents, args.max_jail_runs)).start()
               for d in range(DAEMONS)]
    try:
        with connect_as(FIRST_UID, daemons[0].socket) as first:
            for index in range(args.agents):
                first.write(f"team/agents/{index}.md", f"v0 of agent {index}\nnotes\n")
            first.write("team/shared.log", "start\n")
        results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
        per = args.calls // args.agents
        workers = [multiprocessing.Process(
            target=agent,
            args=(i, args.agents, str(daemons[i % DAEMONS].socket), per, args.seed, results))
            for i in range(args.agents)]
        start = time.monotonic()
        for worker in workers:
            worker.start()
        outcomes: Counter[tuple[str, str]] = Counter()
        errors: list[str] = []
        for _ in workers:
            counted, failed = results.get(timeout=3600)
            outcomes.update(counted)
            errors += failed
        for worker in workers:
            worker.join()
        elapsed = time.monotonic() - start
    finally:
        for daemon in daemons:
            daemon.stop()
    total = sum(outcomes.values())
    busy = {op: count for (op, outcome), count in sorted(outcomes.items()) if outcome == "busy"}
    other = {f"{op} {outcome}": count for (op, outcome), count in sorted(outcomes.items())
             if outcome not in ("ok", "busy", "conflict")}
    jailed = sum(count for (op, _), count in outcomes.items() if op in ("sed", "search"))
    by_op = f" {busy}" if busy else ""
    print(f"{total} calls ({jailed} sed edits and searches) by {args.agents} agent processes "
          f"through {DAEMONS} daemons in {elapsed:.1f} s: {sum(busy.values())} busy{by_op}, "
          f"other errors: {other or 'none'} (goal: 0 busy, no errors)")
    if errors:
        print(f"  first errors: {errors[:3]}")


if __name__ == "__main__":
    main()
