"""Jail runs beyond ``max_jail_runs`` wait their turn (jail/slots.py) through a real
daemon: while looping sed edits hold every slot, searches and edits of several agents
are queued and all succeed once a slot frees; a flood from one agent beyond its
queue's bound gets ``busy`` while another agent's run is still served."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from memfs.control.client import BusyError, Client, InvalidError
from tests.support import (
    UID_A,
    UID_B,
    UID_C,
    Daemon,
    connect_as,
    public_tmpdir,
    scaled,
    standard_config,
)

HOLD_SECONDS = 10  # the jail's time limit: how long a looping sed edit holds its slot


def queue_config(max_jail_runs: int, per_uid: int) -> dict[str, Any]:
    return standard_config(
        public_tmpdir(), jail={"timeout_seconds": HOLD_SECONDS},
        limits={"max_jail_runs": max_jail_runs, "jail_queue_per_uid": per_uid,
                "jail_queue_seconds": 60})  # far more than the hold: waits never run out


def running_tools(daemon: Daemon) -> int:
    """How many jailed rg or sed processes run under ``daemon`` now."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        name, _, rest = stat.partition("(")[2].rpartition(")")
        parents[int(entry.name)] = int(rest.split()[1])
        names[int(entry.name)] = name
    assert daemon.proc is not None

    def under_daemon(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == daemon.proc.pid:  # type: ignore[union-attr]
                return True
        return False

    return sum(1 for pid, name in names.items() if name in ("sed", "rg") and under_daemon(pid))


def hold_slots(daemon: Daemon, count: int, stopped: list[str]) -> list[threading.Thread]:
    """``count`` sed edits of alice's that loop until the jail stops them, each
    holding a slot meanwhile; returns once all of them run. Each one's error goes to
    ``stopped``."""
    clients = [connect_as(UID_A, daemon.socket) for _ in range(count)]

    def loop(client: Client) -> None:
        with client:
            try:
                client.edit("notes/loop.md", [":a;ba"], force=True)
            except InvalidError as error:
                stopped.append(error.message)

    threads = [threading.Thread(target=loop, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + scaled(HOLD_SECONDS / 2)
    while running_tools(daemon) < count:
        assert time.monotonic() < deadline, "the looping edits never ran"
        time.sleep(0.01)
    return threads


def start_all(calls: list[tuple[Client, Any]]) -> tuple[list[object], list[threading.Thread]]:
    """Make each (client, call) on a thread of its own; the list their results or
    errors fill in as each ends (None until then), and the threads."""
    outcomes: list[object] = [None] * len(calls)

    def run(n: int) -> None:
        client, call = calls[n]
        try:
            outcomes[n] = call(client)
        except Exception as error:
            outcomes[n] = error

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    return outcomes, threads


def concurrently(calls: list[tuple[Client, Any]]) -> list[object]:
    """Make each (client, call) on a thread of its own; their results or errors."""
    outcomes, threads = start_all(calls)
    for thread in threads:
        thread.join()
    return outcomes


def test_runs_beyond_the_limit_from_several_agents_wait_and_all_succeed() -> None:
    with Daemon(queue_config(max_jail_runs=2, per_uid=4)) as daemon:
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/loop.md", "x\n")
            alice.write("notes/find-me.md", "needle\n")
            for who in ("alice", "bob"):
                for n in range(2):
                    alice.write(f"notes/{who}-{n}.md", f"{who} {n}\n")
        stopped: list[str] = []
        holders = hold_slots(daemon, 2, stopped)
        calls: list[tuple[Client, Any]] = []
        for uid, who in ((UID_A, "alice"), (UID_B, "bob")):
            for n in range(2):
                client = connect_as(uid, daemon.socket)
                client.read(f"notes/{who}-{n}.md")
                calls.append((client, lambda c, w=who, n=n: c.edit(
                    f"notes/{w}-{n}.md", [f"s/{w} {n}/{w} {n} edited/"])["digest"]))
            calls.append((connect_as(uid, daemon.socket),
                          lambda c: c.search(["-l", "needle"])["output"]))
        for _ in range(3):  # carol reads notes only: searches
            calls.append((connect_as(UID_C, daemon.socket),
                          lambda c: c.search(["-l", "needle"])["output"]))
        assert running_tools(daemon) == 2  # every slot was still held when they came
        outcomes = concurrently(calls)
        for holder in holders:
            holder.join()
        for client, _ in calls:
            client.close()
        assert [type(o) for o in outcomes if not isinstance(o, str)] == [], outcomes
        assert outcomes.count("notes/find-me.md\n") == 5
        assert len(stopped) == 2 and all("was stopped" in text for text in stopped), stopped
        with connect_as(UID_A, daemon.socket) as alice:
            for who in ("alice", "bob"):
                for n in range(2):
                    assert alice.read(f"notes/{who}-{n}.md")["text"] == f"{who} {n} edited\n"


def test_a_flood_from_one_agent_past_its_queue_is_busy_while_another_agent_is_served(
        ) -> None:
    with Daemon(queue_config(max_jail_runs=1, per_uid=2)) as daemon:
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/loop.md", "x\n")
            alice.write("notes/find-me.md", "needle\n")
        stopped: list[str] = []
        holders = hold_slots(daemon, 1, stopped)
        search = lambda c: c.search(["-l", "needle"])["output"]  # noqa: E731
        flood = [(connect_as(UID_A, daemon.socket), search) for _ in range(6)]
        other = [(connect_as(UID_B, daemon.socket), search)]
        flooded, threads = start_all(flood)
        deadline = time.monotonic() + scaled(60)
        while sum(isinstance(o, BusyError) for o in flooded) < 4:  # refused at once...
            assert time.monotonic() < deadline, flooded
            time.sleep(0.01)
        assert running_tools(daemon) == 1  # ...while the slot is still held
        served, others = start_all(other)  # bob still gets his turn
        for thread in [*threads, *others, *holders]:
            thread.join()
        for client, _ in flood + other:
            client.close()
        busy = [o for o in flooded if isinstance(o, BusyError)]
        assert len(busy) == 4, flooded
        assert all("2 more of yours are waiting" in error.message for error in busy), busy
        assert flooded.count("notes/find-me.md\n") == 2, flooded
        assert served == ["notes/find-me.md\n"], served
        assert len(stopped) == 1, stopped
