"""Decisions: recorded, superseded in chains with links both ways in one commit, never
deleted or edited; a supersede cut in half by a crash reads consistently and is
repaired at the next start."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.control.client import ClosedError, NotFoundError
from memfs.memory import decisions
from tests.memory.conftest import memory_config
from tests.store.history.gitcheck import commits, introduced
from tests.support import UID_A, UID_B, Daemon, connect_as, public_tmpdir


def record(client, title: str, supersedes: str | None = None) -> str:  # type: ignore[no-untyped-def]
    return str(client.call("decision_record", store="team", title=title,
                           decision=f"we do {title}", reason="because",
                           supersedes=supersedes)["id"])


def test_supersede_chain(daemon: Daemon, root: Path) -> None:
    with connect_as(UID_A, daemon.socket) as alice, connect_as(UID_B, daemon.socket) as bob:
        first = record(alice, "Use MySQL for tests")
        second = record(bob, "Use SQLite for tests", supersedes=first)
        head = commits(root, "team")[0]
        assert head.message.startswith(f"decision: {second} supersedes {first}")
        assert set(introduced(head)) == {f"decisions/{first}.md", f"decisions/{second}.md"}
        third = record(alice, "Use SQLite in memory for tests", supersedes=second)
        with pytest.raises(ClosedError):  # already superseded: supersede the newest
            record(bob, "Use Postgres", supersedes=first)
        with pytest.raises(NotFoundError):
            record(bob, "Orphan", supersedes="2020-01-01-nothing")
        accepted = [d["id"] for d in alice.call("decision_list", store="team")["decisions"]]
        assert third in accepted and first not in accepted and second not in accepted
        shown = {d: alice.call("decision_show", store="team", decision=d)
                 for d in (first, second, third)}
    assert (shown[first]["status"], shown[first]["superseded_by"]) == ("superseded", second)
    assert (shown[second]["supersedes"], shown[second]["superseded_by"]) == (first, third)
    assert (shown[third]["status"], shown[third]["supersedes"]) == ("accepted", second)
    assert shown[third]["reason"] == "because"
    text = (root / "stores" / "team" / "decisions" / f"{first}.md").read_text()
    assert "status: superseded" in text and f"superseded_by: {second}" in text


def test_same_title_twice_gets_two_records(daemon: Daemon) -> None:
    with connect_as(UID_A, daemon.socket) as alice:
        one, two = record(alice, "Cache nothing"), record(alice, "Cache nothing")
    assert one != two and two.startswith(one)


def test_a_half_done_supersede_reads_consistently_and_is_repaired() -> None:
    """The state a crash between the two renames of a supersede left (memfs before its
    landing intents): the new record landed, the old one was not marked yet."""
    config = memory_config(public_tmpdir())
    root = Path(config["root"])
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        old = record(alice, "Deploy on Fridays")
    folder = root / "stores" / "team" / "decisions"
    new_id = old.replace("deploy-on-fridays", "never-deploy-on-fridays")
    (folder / f"{new_id}.md").write_bytes(decisions.recorded(
        "Never deploy on Fridays", "no", "weekends", None, None, "bob", 0.0, new_id, old))
    with Daemon(config) as daemon, connect_as(UID_B, daemon.socket) as bob:
        view = bob.call("decision_show", store="team", decision=old)
        assert (view["status"], view["superseded_by"]) == ("superseded", new_id)
        assert old not in [d["id"] for d in bob.call("decision_list", store="team")["decisions"]]
    text = (folder / f"{old}.md").read_text()
    assert "status: superseded" in text and f"superseded_by: {new_id}" in text
    assert commits(root, "team")[0].message.startswith(f"decision: {old} superseded by")


def test_a_link_to_a_missing_successor_is_ignored_and_mended() -> None:
    """The other half a crash left (memfs before its landing intents, when the old
    record sorted first): the old record says superseded_by NEW, and NEW does not exist.
    Readers take it as accepted, the chain moves on from it, and the next start mends
    the record; once stuck for good (show NEW: not found, supersede OLD: refused)."""
    config = memory_config(public_tmpdir())
    root = Path(config["root"])
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        old = record(alice, "Deploy on Fridays")
    path = root / "stores" / "team" / "decisions" / f"{old}.md"
    ghost = old.replace("deploy-on-fridays", "never-deploy-on-fridays")
    path.write_text(path.read_text().replace("status: accepted", "status: superseded")
                    .replace("superseded_by: null", f"superseded_by: {ghost}"))
    with Daemon(config) as daemon, connect_as(UID_B, daemon.socket) as bob:
        view = bob.call("decision_show", store="team", decision=old)
        assert (view["status"], view["superseded_by"]) == ("accepted", None)
        assert commits(root, "team")[0].message.startswith(
            f"decision: {old} accepted again (its successor {ghost} does not exist)")
        assert "superseded_by: null" in path.read_text()
        newer = record(bob, "Never deploy on Fridays", supersedes=old)
        assert bob.call("decision_show", store="team", decision=old)["superseded_by"] == newer


def test_titles_and_goals_that_look_like_numbers_stay_text(daemon: Daemon) -> None:
    """A title "0" was written as a bare number in the front matter, read back as one,
    and the record was unreadable: an internal error for the writer (found by
    schemathesis)."""
    with connect_as(UID_A, daemon.socket) as alice:
        made = alice.call("decision_record", store="team", title="0", decision="0",
                          reason="00")
        assert made["title"] == "0"
        shown = alice.call("decision_show", store="team", decision=made["id"])
        assert (shown["title"], shown["decision"]) == ("0", "0")
        session = alice.call("session_start", store="team", goal="42")
        assert alice.call("session_show", store="team", session=session["id"])["goal"] == "42"
