"""Lease rules as a table: who does what to a task in which state, and the code each
row must get (through the real socket, real uids, real time with short TTLs)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memfs.control.client import Client, MemfsClientError
from tests.memory.conftest import memory_config
from tests.support import UID_A, UID_B, UID_C, Daemon, connect_as, public_tmpdir, scaled

_ids = itertools.count()


class Team:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.alice = connect_as(UID_A, daemon.socket)
        self.bob = connect_as(UID_B, daemon.socket)
        self.carol = connect_as(UID_C, daemon.socket)
        self.root_as_bob = connect_as(0, daemon.socket, as_agent="bob")

    def new_task(self) -> str:
        task = f"t-{next(_ids)}"
        self.alice.call("task_add", store="team", task=task, title=f"task {task}")
        return task


@pytest.fixture(scope="module")
def team() -> Iterator[Team]:
    with Daemon(memory_config(public_tmpdir())) as daemon:
        yield Team(daemon)


def call(client: Client, op: str, task: str, **fields: Any) -> str:
    try:
        client.call(op, store="team", task=task, **fields)
    except MemfsClientError as error:
        return error.code
    return "ok"


# state setups: (team) -> task id, in the state the row names
def open_task(t: Team) -> str:
    return t.new_task()


def held_by_alice(t: Team) -> str:
    task = t.new_task()
    assert call(t.alice, "task_claim", task, ttl="10m") == "ok"
    return task


def expired_alice(t: Team) -> str:
    task = t.new_task()
    assert call(t.alice, "task_claim", task, ttl="1s") == "ok"
    time.sleep(1.2)
    return task


def reclaimed_by_bob(t: Team) -> str:
    task = expired_alice(t)
    assert call(t.bob, "task_claim", task, ttl="10m") == "ok"
    return task


def released_by_alice(t: Team) -> str:
    task = held_by_alice(t)
    assert call(t.alice, "task_release", task) == "ok"
    return task


def completed_by_alice(t: Team) -> str:
    task = held_by_alice(t)
    assert call(t.alice, "task_complete", task, note="done") == "ok"
    return task


Row = tuple[Callable[[Team], str], str, str, dict[str, Any], str]
ROWS: list[Row] = [
    (open_task, "alice", "task_claim", {}, "ok"),
    (held_by_alice, "bob", "task_claim", {}, "lease_held"),
    (held_by_alice, "alice", "task_claim", {"ttl": "2h"}, "ok"),  # extends her own
    (expired_alice, "bob", "task_claim", {}, "ok"),
    (expired_alice, "alice", "task_checkpoint", {"note": "still on it"}, "ok"),
    (held_by_alice, "alice", "task_checkpoint", {"note": "progress"}, "ok"),
    (held_by_alice, "bob", "task_checkpoint", {"note": "me too"}, "lease_held"),
    (held_by_alice, "bob", "task_complete", {}, "lease_held"),
    (held_by_alice, "bob", "task_release", {}, "lease_held"),
    (open_task, "alice", "task_checkpoint", {"note": "unclaimed"}, "lease_lost"),
    (reclaimed_by_bob, "alice", "task_checkpoint", {"note": "late"}, "lease_lost"),
    (reclaimed_by_bob, "alice", "task_complete", {}, "lease_lost"),
    (reclaimed_by_bob, "alice", "task_release", {}, "lease_lost"),
    (reclaimed_by_bob, "alice", "task_claim", {}, "lease_held"),
    (released_by_alice, "alice", "task_checkpoint", {"note": "after release"}, "lease_lost"),
    (released_by_alice, "bob", "task_claim", {}, "ok"),
    (completed_by_alice, "alice", "task_checkpoint", {"note": "after done"}, "lease_lost"),
    (completed_by_alice, "bob", "task_claim", {}, "closed"),
    (held_by_alice, "alice", "task_complete", {"note": "shipped"}, "ok"),
    (held_by_alice, "alice", "task_release", {}, "ok"),
    (held_by_alice, "bob", "task_release", {"force": True}, "permission_denied"),
    (held_by_alice, "delegate", "task_release", {"force": True}, "ok"),
    (open_task, "carol", "task_claim", {}, "permission_denied"),  # read-only on team
    (open_task, "alice", "task_claim", {"ttl": "forever"}, "invalid"),
    (open_task, "alice", "task_claim", {"ttl": "0s"}, "invalid"),
]


@pytest.mark.parametrize(("setup", "actor", "op", "fields", "expected"), ROWS,
                         ids=[f"{s.__name__}-{a}-{o}-{e}" for s, a, o, _, e in ROWS])
def test_lease_table(team: Team, setup: Callable[[Team], str], actor: str, op: str,
                     fields: dict[str, Any], expected: str) -> None:
    task = setup(team)
    client = {"alice": team.alice, "bob": team.bob, "carol": team.carol,
              "delegate": team.root_as_bob}[actor]
    before = team.alice.call("task_show", store="team", task=task)
    assert call(client, op, task, **fields) == expected
    after = team.alice.call("task_show", store="team", task=task)
    if expected != "ok":
        # (what is left of a lease is a countdown: the clock may tick between the two
        # reads, a second or more on a slow machine; the lease's end is compared whole)
        left_before, left_after = before.pop("lease_seconds_left", None), \
            after.pop("lease_seconds_left", None)
        assert after == before, "a refused operation must change nothing"
        assert (left_before is None) == (left_after is None)
        if left_before is not None:
            assert 0 <= left_before - left_after <= scaled(2)


def test_errors_name_the_holder(team: Team) -> None:
    task = held_by_alice(team)
    with pytest.raises(MemfsClientError) as caught:
        team.bob.call("task_claim", store="team", task=task)
    assert caught.value.code == "lease_held"
    assert caught.value.details["holder"] == "alice"
    assert "alice" in caught.value.message and caught.value.details["expires_at"]


def test_unknown_and_existing_tasks(team: Team) -> None:
    assert call(team.alice, "task_claim", "no-such-task") == "not_found"
    task = team.new_task()
    assert call(team.bob, "task_add", task, title="again") == "conflict"
    assert call(team.alice, "task_add", "Bad Id!", title="x") == "invalid"


def test_status_is_derived_from_the_clock(team: Team) -> None:
    task = expired_alice(team)
    shown = team.alice.call("task_show", store="team", task=task)
    assert shown["status"] == "expired" and shown["lease_seconds_left"] == 0
    listed = team.alice.call("task_list", store="team", status="expired")["tasks"]
    assert task in [t["id"] for t in listed]


def test_a_claim_names_only_an_open_session_of_its_own(team: Team) -> None:
    mine = team.alice.call("session_start", store="team", goal="claims")["id"]
    bobs = team.bob.call("session_start", store="team", goal="his")["id"]
    closed = team.alice.call("session_start", store="team", goal="over")["id"]
    team.alice.call("session_handoff", store="team", session=closed, summary="s", next="n")
    task = team.new_task()
    before = team.alice.call("task_show", store="team", task=task)
    for session, code in ((bobs, "permission_denied"),
                          ("2026-01-01-alice-ffff", "permission_denied"),
                          (closed, "closed"), ("not an id", "invalid")):
        assert call(team.alice, "task_claim", task, session=session) == code, session
    assert team.alice.call("task_show", store="team", task=task) == before  # unchanged
    assert call(team.alice, "task_claim", task, session=mine) == "ok"
    lease = team.alice.call("task_show", store="team", task=task)["lease"]
    assert (lease["agent"], lease["session"]) == ("alice", mine)
