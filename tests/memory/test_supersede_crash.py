"""A supersede (two files in one step) is all or nothing after a kill between any two of
its steps, whichever of its files sorts first: the daemon is SIGKILLed at each named
step in turn (memfs/store/crashpoints.py), and the next daemon finds both records as
before or both as after, the chain able to move on, and its history valid git."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.control.client import MemfsClientError
from memfs.memory import records
from tests.memory.conftest import memory_config
from tests.store.history.gitcheck import commits, git, store_files, tree_files
from tests.support import UID_A, Daemon, connect_as, killed_at, public_tmpdir

# The steps of a supersede, in order: the two files staged, the history commit
# prepared, the intent set, the two renames, the writer's records, main moved.
STEPS = ["stage@1", "stage@2", "land.prepared", "land.intent", "land.rename@1",
         "land.rename@2", "land.records", "land.commit"]
LANDS_FROM = STEPS.index("land.intent")  # killed at or after this step, it has landed


def record(client, title: str, supersedes: str | None = None) -> str:  # type: ignore[no-untyped-def]
    return str(client.call("decision_record", store="team", title=title,
                           decision=f"we do {title}", reason="because",
                           supersedes=supersedes)["id"])


def decision_file(root: Path, decision_id: str) -> Path:
    return root / "stores" / "team" / "decisions" / f"{decision_id}.md"


@pytest.mark.slow
@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
@pytest.mark.parametrize("order", ["old-first", "new-first"])
def test_a_supersede_killed_at_any_step_is_all_or_nothing(history: bool, order: str) -> None:
    config = memory_config(public_tmpdir())
    config["stores"]["team"]["history"] = history
    root = Path(config["root"])
    daemon = Daemon(config)

    def titles(index: int) -> tuple[str, str]:
        """(old, new): "old-first": alpha is superseded by beta, so the old record's file
        sorts first (the order that a crash once left stuck for good); "new-first": the
        reverse."""
        return (f"alpha {index}", f"beta {index}") if order == "old-first" \
            else (f"beta {index}", f"alpha {index}")

    with daemon, connect_as(UID_A, daemon.socket) as alice:
        old = record(alice, titles(0)[0])
    for index, step in enumerate(STEPS):
        new = f"{old[:10]}-{records.slugify(titles(index)[1])}"
        assert (old < new) == (order == "old-first")

        with killed_at(config, step) as crashing, connect_as(UID_A, crashing.socket) as alice, \
                pytest.raises(MemfsClientError):
            record(alice, titles(index)[1], supersedes=old)

        with daemon, connect_as(UID_A, daemon.socket) as alice:
            landed = decision_file(root, new).exists()
            assert landed == (index >= LANDS_FROM), f"killed after {step}: landed={landed}"
            shown = alice.call("decision_show", store="team", decision=old)
            old_text = decision_file(root, old).read_text()
            if landed:
                assert (shown["status"], shown["superseded_by"]) == ("superseded", new), step
                assert f"superseded_by: {new}" in old_text, step
                assert alice.call("decision_show", store="team",
                                  decision=new)["supersedes"] == old
            else:
                assert (shown["status"], shown["superseded_by"]) == ("accepted", None), step
                assert "superseded_by: null" in old_text, step
            # The chain moves on from its newest record.
            newest = record(alice, f"gamma {index}", supersedes=new if landed else old)
            assert alice.call("decision_show", store="team",
                              decision=newest)["status"] == "accepted"
            # The next step's old record, by this same daemon (a start fewer per step)
            following = record(alice, titles(index + 1)[0]) if index + 1 < len(STEPS) else ""
        assert list((root / "state" / "landing" / "team").iterdir()) == []
        if history:
            check_history(root, old, new, landed, step)
        old = following


def check_history(root: Path, old: str, new: str, landed: bool, step: str) -> None:
    """The tree of main is the files; a supersede that landed has its own commit by its
    agent (not an anonymous recover:); the repository passes git's strictest check."""
    log = commits(root, "team")
    assert tree_files(log[0]) == store_files(root, "team"), step
    own = [c for c in log if c.message.startswith(f"decision: {new} supersedes {old}")]
    assert len(own) == (1 if landed else 0), step
    if landed:
        assert own[0].author.name == "alice", step
    git(root, "team", "fsck", "--strict", "--no-dangling")
