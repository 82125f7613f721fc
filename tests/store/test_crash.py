"""Crash safety: SIGKILL the daemon at random moments during a write storm (after a
random number of acknowledged changes, never after a time), many times, and at each
step of the history's writing (memfs/store/crashpoints.py). After each restart every
acknowledged write is present byte for byte (or a later write that was in flight), no
partial file is visible and no staging leftovers remain; the history's tree equals the
files, every acknowledged change has its commit (or a `recover:` commit holding its
content), `git fsck --strict` is clean and `git gc` works (invariant 9)."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memfs.control.client import Client, MemfsClientError
from memfs.store import crashpoints
from memfs.store.history.maintenance import MERGE_RECORD
from tests.store.history.gitcheck import (
    assert_valid_git,
    commits,
    head_files,
    introduced,
    loose_files,
    pack_ids,
    repo_path,
    store_files,
    trailers,
    tree_files,
)
from tests.support import (
    UID_A,
    Acks,
    Daemon,
    connect_as,
    public_tmpdir,
    scaled,
    standard_config,
)

WRITERS = 4
FILES_PER_WRITER = 3
ROUNDS = 12
# Each round kills the daemon once this many changes (a random number in the range)
# were acknowledged: at least 12 * 5 in all, which check_history requires (50).
KILL_AFTER = (5, 60)


class Writer(threading.Thread):
    """Writes whole files and appends; remembers what was acknowledged and what was
    in flight when the connection died."""

    def __init__(self, index: int, client: Client, rng: random.Random, acks: Acks) -> None:
        super().__init__()
        self.index = index
        self.acks = acks
        self.client = client
        self.rng = rng
        self.acked: dict[str, bytes] = {}
        self.in_flight: dict[str, bytes] = {}
        self.appended: list[bytes] = []
        self.append_in_flight: bytes | None = None
        self.log_path = f"notes/crash/w{index}.log"
        self.acked_digests: list[tuple[str, str]] = []  # (rel in the store, digest)

    def run(self) -> None:
        seq = 0
        try:
            while True:
                seq += 1
                if seq % 3 == 0:
                    line = f"w{self.index} line {seq}\n".encode()
                    self.append_in_flight = line
                    result = self.client.write(self.log_path, line, append=True)
                    self.acked_digests.append((self.log_path[6:], result["digest"]))
                    self.appended.append(line)
                    self.append_in_flight = None
                    self.acks.add()
                    continue
                path = f"notes/crash/w{self.index}-{seq % FILES_PER_WRITER}.bin"
                size = self.rng.choice([1, 100, 4096, 70000, 300000])
                unit = f"<{self.index}:{seq}>".encode()
                content = (unit * (size // len(unit) + 1))[:size]
                self.in_flight[path] = content
                result = self.client.write(path, content, force=True)
                if not result["unchanged"]:  # a round may repeat a write: no commit then
                    self.acked_digests.append((path[6:], result["digest"]))
                self.acked[path] = content
                del self.in_flight[path]
                self.acks.add()
        except MemfsClientError:
            return  # the daemon died under us


@pytest.mark.slow
@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
def test_acknowledged_writes_survive_sigkill(history: bool) -> None:
    rng = random.Random(20261129)
    base = public_tmpdir()
    config = standard_config(base)
    config["stores"]["notes"] = {"history": history}
    daemon = Daemon(config)
    root = Path(daemon.config["root"])
    state: dict[int, Writer] = {}
    acked: list[tuple[str, str]] = []
    try:
        for _ in range(ROUNDS):
            daemon.start()
            # An in-flight write may or may not have committed: settle it from what the
            # restarted daemon serves (an append in place cut short is truncated back at
            # start, so the raw files of a killed daemon are not yet the truth), having
            # validated it first; the next round checks against it.
            check_state(root, state, settle=True)
            if history:
                assert head_files(root, "notes") == store_files(root, "notes")
            writers = []
            acks = Acks()
            for index in range(WRITERS):
                writer = Writer(index, connect_as(UID_A, daemon.socket), rng, acks)
                if index in state:  # carry over what survived, to check it next round
                    writer.acked = dict(state[index].acked)
                    writer.appended = list(state[index].appended)
                writers.append(writer)
            for writer in writers:
                writer.start()
            acks.wait_for(rng.randint(*KILL_AFTER),
                          alive=lambda ws=writers: any(w.is_alive() for w in ws))
            daemon.kill()
            for writer in writers:
                writer.join(10)
                writer.client.close()
            state = {w.index: w for w in writers}
            for writer in writers:
                acked += writer.acked_digests
                writer.acked_digests = []
        daemon.start()
        check_state(root, state, settle=True)
        check_state(root, state)
        assert sum(len(w.acked) for w in state.values()) > 0
        if history:
            check_history(root, acked)
            daemon.stop()
            assert_valid_git(root, "notes")
    finally:
        if daemon.alive():
            daemon.kill()


def wait_until(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + scaled(seconds)
    while not condition():
        assert time.monotonic() < deadline, f"not so after {scaled(seconds)} s"
        time.sleep(0.05)


def write_until_killed(daemon: Daemon) -> list[tuple[str, str]]:
    """Writes (and appends) from one client until the daemon dies; the acknowledged
    ones as (rel in the store, digest)."""
    acked = []
    with contextlib.suppress(MemfsClientError), connect_as(UID_A, daemon.socket) as alice:
        for n in range(10_000):
            rel = f"crash/step-{n % 7}.md"
            data = f"write {n}\n" * (n % 50 + 1)
            if n % 5 == 4:
                result = alice.write(f"notes/{rel}", data, append=True)
            else:
                result = alice.write(f"notes/{rel}", data, force=True)
            if not result["unchanged"]:  # the same bytes again commit nothing
                acked.append((rel, result["digest"]))
    daemon.proc.wait()  # type: ignore[union-attr]
    return acked


# Each step of writing the history, and of packing it, where a kill used to leave (or
# could leave) something git refuses: an object file created but not yet written, a
# commit written but not yet on main, a pack written but its loose objects not yet
# removed, a merged pack in place but the packs it replaces not yet removed.
HISTORY_STEPS = ["history.object-open@40", "history.commit-written@9", "history.packed",
                 "history.packs-merged"]


@pytest.mark.parametrize("step", HISTORY_STEPS)
def test_a_kill_at_each_step_of_the_history_leaves_valid_git(step: str) -> None:
    config = standard_config(public_tmpdir())
    root = Path(config["root"])
    acked: list[tuple[str, str]] = []
    if step.startswith("history.pack"):
        # Each daemon leaves objects loose, packed by the next one at its start: the
        # third packs the second one's, then merges that pack with the first.
        for run in range(1 if step == "history.packed" else 2):
            with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
                wait_until(lambda: not loose_files(root, "notes"))  # packed at start
                for n in range(30):
                    rel = f"crash/pack-{n}.md"
                    data = f"run {run}, {n}\n" * n
                    result = alice.write(f"notes/{rel}", data, force=True)
                    if not result["unchanged"]:  # the same bytes again commit nothing
                        acked.append((rel, result["digest"]))
        Daemon(config, env={crashpoints.ENV: step}).run_until_killed()
    else:
        daemon = Daemon(config, env={crashpoints.ENV: step}).start()
        acked += write_until_killed(daemon)
    with Daemon(config) as daemon, connect_as(UID_A, daemon.socket) as alice:
        # What the kill left: packed, or the merge finished.
        merging = repo_path(root, "notes") / MERGE_RECORD
        wait_until(lambda: not loose_files(root, "notes") and not merging.exists())
        acked.append(("crash/after.md", alice.write("notes/crash/after.md", "after\n")["digest"]))
    check_history(root, acked, at_least=5)
    packed = [oid for ids in pack_ids(root, "notes") for oid in ids]
    assert len(packed) == len(set(packed)), "an object is in two packs"
    assert_valid_git(root, "notes")


def check_history(root: Path, acked: list[tuple[str, str]], *, at_least: int = 50) -> None:
    """Every acknowledged change has its own commit (its digest trailer), or its content
    was recorded by a recover: commit; the tree of main equals the files."""
    history = commits(root, "notes")
    assert tree_files(history[0]) == store_files(root, "notes")
    recorded: set[tuple[str, str]] = set()
    for commit in history:
        found = trailers(commit)
        if found["Memfs-Op"] == "recover":
            recorded.update(introduced(commit).items())
        elif "Memfs-Digest" in found:  # "write notes/PATH": one file per change
            rel = commit.message.split("\n", 1)[0].split(" ", 1)[1].removeprefix("notes/")
            recorded.add((rel, found["Memfs-Digest"]))
    missing = [item for item in acked if item not in recorded]
    assert not missing, f"{len(missing)} acknowledged changes have no commit: {missing[:3]}"
    assert len(acked) >= at_least
    own = [c for c in history if trailers(c)["Memfs-Op"] != "recover"]
    assert len(own) >= len(acked), "an acknowledged change has no commit of its own"
    assert {c.author.name for c in own} == {"alice"}
    assert [p.name for p in (root / "state" / "history").iterdir()
            if ".broken-" in p.name] == [], "the history was rebuilt: commits were lost"


def check_state(root: Path, state: dict[int, Writer], *, settle: bool = False) -> None:
    stores = root / "stores" / "notes" / "crash"
    expected_names = set()
    for writer in state.values():
        for path, content in writer.acked.items():
            name = path.rsplit("/", 1)[1]
            expected_names.add(name)
            on_disk = (stores / name).read_bytes()
            pending = writer.in_flight.get(path)
            assert on_disk in (content, pending), f"{path}: lost or partial"
            if settle:
                writer.acked[path] = on_disk
        for path, pending in writer.in_flight.items():
            name = path.rsplit("/", 1)[1]
            if path not in writer.acked and (stores / name).exists():
                assert (stores / name).read_bytes() == pending, f"{path}: partial"
                expected_names.add(name)
                if settle:
                    writer.acked[path] = pending
        if settle:
            writer.in_flight = {}
        log_name = writer.log_path.rsplit("/", 1)[1]
        if (stores / log_name).exists():
            expected_names.add(log_name)
            on_disk = (stores / log_name).read_bytes()
            acked = b"".join(writer.appended)
            candidates = {acked}
            if writer.append_in_flight is not None:
                candidates.add(acked + writer.append_in_flight)
            assert on_disk in candidates, f"{writer.log_path}: an acknowledged append was lost"
            if settle and on_disk != acked:
                writer.appended.append(writer.append_in_flight or b"")
        else:
            assert not writer.appended
    if stores.exists():
        assert set(os.listdir(stores)) <= expected_names, "a staged or partial file is visible"
    # After a restart, only the live daemon's staging directory remains, empty.
    staging = root / "state" / "staging"
    if staging.exists():
        assert len([e for e in staging.iterdir() if e.is_dir()]) == 1
        for entry in staging.iterdir():
            if entry.is_dir():
                assert os.listdir(entry) == [], f"staging leftovers in {entry}"
