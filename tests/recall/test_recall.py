"""Ranked recall through a real daemon: the socket op, the CLI (`memfs recall`,
`memfs reindex`) and what a recall promises: a change acknowledged before a recall
starts is found by it; results come only from the stores the agent may read; a recall
is not a read; deleted and replaced files leave the index with their change; a
superseded decision ranks below its replacement; bad queries are `invalid`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from memfs.control.client import (
    ConflictError,
    InvalidError,
    NotFoundError,
)
from tests.memory.conftest import memory_config
from tests.support import (
    UID_A,
    UID_B,
    UID_C,
    Daemon,
    connect_as,
    memfs_as,
    public_tmpdir,
)


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    config = memory_config(public_tmpdir("memfs-recall-"))
    config["recall"] = {"model": "packaged"}  # hybrid, as a daemon is by default
    with Daemon(config) as running:
        yield running


def paths(result: dict[str, Any]) -> list[str]:
    return [hit["path"] for hit in result["hits"]]


def test_a_change_acknowledged_before_a_recall_is_found_by_it(daemon: Daemon) -> None:
    """Freshness by construction: write, get the acknowledgement, recall at once; many
    times over, with replaces, appends and deletes, on two connections."""
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        for n in range(60):
            word = f"zebra{n}word"
            path = f"notes/fresh/note-{n % 7}.md"
            if n % 3 == 2:
                alice.write(path, f"- also {word}\n", append=True)
            else:
                alice.write(path, f"# Note {n}\n\nabout {word} and the retry queue\n",
                            force=True)
            found = bob.recall(word)
            assert path in paths(found), (n, found)
            if n % 5 == 4:
                alice.delete(path, force=True)
                assert path not in paths(bob.recall(word)), n
    # sixty commits of the index, merged meanwhile: none taken for a broken index
    assert "recall: the index" not in daemon.log()


def test_recall_ranks_reads_nothing_and_shows_lines_writer_and_time(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        alice.write("notes/rank/retry-queue-stuck.md",
                    "# Retry queue stuck\n\nConsumers crashed on a poison message.\n"
                    "Moved it to the dead-letter queue.\n")
        alice.write("notes/rank/lunch.md", "# Lunch\n\nThe queue at the canteen was long.\n")
        found = bob.recall("retry queues stopped draining")  # other forms, other order
        assert paths(found)[0] == "notes/rank/retry-queue-stuck.md"
        best = found["hits"][0]
        assert best["last_writer"] == "alice" and best["last_written_at"] > 0
        assert best["lines"][0] == {"line": 1, "text": "# Retry queue stuck"}
        assert best["score"] > 0 and found["terms"] == ["retri", "queue", "stop", "drain"]
        # not a read: bob never read the file, so a blind replace is still a conflict
        assert bob.stat("notes/rank/retry-queue-stuck.md")["seen"] is None
        with pytest.raises(ConflictError):
            bob.write("notes/rank/retry-queue-stuck.md", "mine\n")


def test_replaced_words_leave_the_index(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/replace/a.md", "an ocelot note\n")
        assert paths(alice.recall("ocelot")) == ["notes/replace/a.md"]
        alice.write("notes/replace/a.md", "a capybara note\n")
        assert paths(alice.recall("ocelot")) == []
        assert paths(alice.recall("capybara")) == ["notes/replace/a.md"]
        alice.edit("notes/replace/a.md", ["s/capybara/marmot/"])
        assert paths(alice.recall("marmots")) == ["notes/replace/a.md"]


def test_a_question_that_spells_out_an_acronym_finds_it(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/acro/purge.md", "# CDN purge\n\nPurge the CDN after a price change.\n")
        found = alice.recall("clear cached pages at the content delivery network")
        assert paths(found)[0] == "notes/acro/purge.md"  # it holds no word asked but "cdn"
        assert found["terms"][-1] == "cdn" and "ccp" not in found["terms"]  # not held
        assert found["hits"][0]["lines"][0] == {"line": 1, "text": "# CDN purge"}


def test_only_the_stores_the_agent_may_read(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_C, daemon.socket) as carol:
        alice.write("ops/hidden/wombat.md", "wombat runbook\n")
        alice.write("notes/open/wombat.md", "wombat note\n")
        assert set(paths(alice.recall("wombat"))) == {"ops/hidden/wombat.md",
                                                      "notes/open/wombat.md"}
        assert paths(carol.recall("wombat")) == ["notes/open/wombat.md"]  # no ops for carol
        with pytest.raises(NotFoundError):  # not attached: as if it did not exist
            carol.recall("wombat", store="ops")
        with pytest.raises(NotFoundError):
            carol.recall("wombat", store="nosuchstore")
        with pytest.raises(NotFoundError):
            carol.reindex("ops")
        assert paths(alice.recall("wombat", store="ops")) == ["ops/hidden/wombat.md"]


def test_pages(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        for n in range(5):
            alice.write(f"notes/pages/{n}.md", "okapi " * (n + 1) + "\n")
        first = alice.recall("okapi", limit=2)
        second = alice.recall("okapi", limit=2, page=2)
        third = alice.recall("okapi", limit=2, page=3)
        assert first["next_page"] == 2 and second["next_page"] == 3
        assert third["next_page"] is None and len(third["hits"]) == 1
        everything = paths(first) + paths(second) + paths(third)
        assert sorted(everything) == [f"notes/pages/{n}.md" for n in range(5)]
        assert everything == paths(alice.recall("okapi", limit=5))


@pytest.mark.parametrize("fields", [
    {"query": ""}, {"query": "x" * 1001},
    {"query": " ".join(["word"] * 33)}, {"query": "ok", "limit": 0},
    {"query": "ok", "limit": 101}, {"query": "ok", "page": 0}, {"query": "ok", "bogus": 1},
])
def test_bad_queries_are_invalid(daemon: Daemon, fields: dict[str, Any]) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        with pytest.raises(InvalidError):
            alice.call("recall", **fields)
        assert alice.recall("still works")["query"] == "still works"


def test_a_query_of_punctuation_finds_nothing(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        found = alice.recall(" ?! ")
    assert (found["hits"], found["terms"], found["next_page"]) == ([], [], None)


def test_a_superseded_decision_ranks_below_its_replacement(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        old = alice.call("decision_record", store="team", title="Test database: SQLite",
                         decision="Feature tests use in-memory SQLite for the test database.",
                         reason="Tests run in parallel; SQLite in memory is fast.")
        new = alice.call("decision_record", store="team", title="Test database: PostgreSQL",
                         decision="Tests use a PostgreSQL container.",
                         reason="SQLite behaved differently.", supersedes=old["id"])
        found = alice.recall("which database do the tests use", store="team")
        ranked = paths(found)
        assert ranked.index(f"team/decisions/{new['id']}.md") < \
            ranked.index(f"team/decisions/{old['id']}.md")
        assert [hit["superseded"] for hit in found["hits"][:2]] == [False, True]


def test_the_cli(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        alice.write("notes/cli/gateway.md", "# Gateway timeouts\n\nSet a read timeout.\n")
    done = memfs_as(UID_B, daemon.socket, "recall", "gateway timing out", "--store", "notes")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert "notes/cli/gateway.md  (alice, " in lines[0]
    assert lines[1].split() == ["1:", "#", "Gateway", "timeouts"]
    as_json = memfs_as(UID_B, daemon.socket, "--json", "recall", "gateway", "-n", "1")
    assert json.loads(as_json.stdout)["limit"] == 1
    nothing = memfs_as(UID_B, daemon.socket, "recall", "xylophonist")
    assert nothing.returncode == 1 and nothing.stdout == b""  # as grep: nothing found
    bad = memfs_as(UID_B, daemon.socket, "recall", "--")
    assert bad.returncode == 2
    rebuilt = memfs_as(UID_B, daemon.socket, "reindex", "notes")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.decode().startswith("reindexed notes: ")
    again = memfs_as(UID_B, daemon.socket, "recall", "gateway timing out")
    assert "notes/cli/gateway.md" in again.stdout.decode()
    denied = memfs_as(UID_C, daemon.socket, "reindex", "ops")
    assert denied.returncode == 5, denied.stderr  # a store carol cannot see
