"""A randomized, content-checked history across three hosts sharing one Gluster root:
no lost update, no lost append, no torn read, no internal error.

Six agents, two on each host's daemon, work on two kinds of file at random, in two
stores (one with git history, the default, and one without, see STORES):

* ledgers: every change adds one unique line at the end (a version-checked replace
  of what the agent read plus a line, an append, or a jailed sed ``$a`` edit), so
  each ledger's history is a chain of prefixes. At the end a ledger holds exactly the
  lines whose change was acknowledged (none lost, none invented), and everything any
  host ever returned for it (socket or mount) is a prefix of the final content
  (a torn or out-of-thin-air read is not).
* scratch files: forced writes of self-describing content of 10 B to 300 KB, reads,
  and version-checked and forced deletes. Every read returns NotFound or exactly one
  of the contents written (a torn read does not regenerate from its header).

Meanwhile root, mapped to a reading agent, reads both kinds through all three FUSE
mounts. Socket reads are checked against the digest the daemon recorded. At the end
the history store's git history is one linear ``main`` with one commit per accepted
change, from the agents of all three hosts.
The storm stops on counts, never after a time: once every kind of change (KINDS) has
happened MIN_EACH times, so that a slow machine proves as much as a fast one.
``MEMFS_CLUSTER_STORM_SECONDS`` keeps it going at least that long (to hunt rare races).
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import pygit2
import pytest

from memfs.control.client import (
    Client,
    ConflictError,
    MemfsClientError,
    NotFoundError,
)
from tests.cluster.conftest import FIRST_UID, WORKERS, Cluster, start_daemons, stop_all
from tests.store.history.gitcheck import repo_path
from tests.support import connect_as, scaled

# The storm ends once each of these has happened MIN_EACH times (a conflict needs two
# agents racing on one ledger: the rarest), and not before MIN_SECONDS.
KINDS = ("replace", "append", "sed", "conflict", "forced write", "mount read")
MIN_EACH = 10
MIN_SECONDS = float(os.environ.get("MEMFS_CLUSTER_STORM_SECONDS", "0"))
BUDGET = 600  # seconds (scaled): a storm short of a kind by then is stuck
# notes keeps a git history (the default): every commit there also writes git objects
# under the store lock, ~0.6 s on this Gluster volume, so most of the storm runs in
# `fast` (history = false) and notes gets one ledger, for the history check.
STORES = {"notes": {}, "fast": {"history": False}}
HISTORY_LEDGER = "notes/ledger/L0.txt"
LEDGERS = [HISTORY_LEDGER, "fast/ledger/L1.txt", "fast/ledger/L2.txt"]
SCRATCH = [f"fast/scratch/S{k}.bin" for k in range(2)]
SIZES = [10, 1000, 5000, 70000, 300000]


def header_line(path: str) -> bytes:
    return f"ledger {path}\n".encode()


def scratch_content(agent: str, seq: int, size: int) -> bytes:
    head = f"{agent} {seq} {size}\n".encode()
    unit = f"<{agent}:{seq}>".encode()
    return head + (unit * (size // len(unit) + 1))[:size]


def scratch_valid(data: bytes) -> bool:
    """True when ``data`` is exactly a content made by scratch_content."""
    head, _, _ = data.partition(b"\n")
    try:
        agent, seq, size = head.decode().split(" ")
        return data == scratch_content(agent, int(seq), int(size))
    except ValueError:
        return False


class Storm:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[str, set[bytes]] = {path: set() for path in LEDGERS}
        self.observed: dict[str, list[bytes]] = {path: [] for path in LEDGERS}
        self.bad: list[str] = []  # torn reads, wrong digests, internal errors
        self.counts: dict[str, int] = {}
        started = time.monotonic()
        self.not_before = started + MIN_SECONDS
        self.give_up = started + max(scaled(BUDGET), MIN_SECONDS)

    def going(self) -> bool:
        """The storm goes on until every kind of change happened MIN_EACH times (and
        MIN_SECONDS passed), or it ran out of its budget (the counts then fail it)."""
        now = time.monotonic()
        if now < self.not_before:
            return True
        with self.lock:
            enough = all(self.counts.get(kind, 0) >= MIN_EACH for kind in KINDS)
        return not enough and now < self.give_up

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def fail(self, message: str) -> None:
        with self.lock:
            self.bad.append(message)


def agent_worker(storm: Storm, client: Client, agent: str, seed: int) -> None:
    rng = random.Random(seed)
    seq = 0
    while storm.going():
        seq += 1
        roll = rng.random()
        try:
            if roll < 0.55:
                ledger_change(storm, client, agent, seq, rng)
            else:
                scratch_change(storm, client, agent, seq, rng)
        except MemfsClientError as error:
            storm.fail(f"{agent} #{seq}: {error.code}: {error}")


def ledger_change(storm: Storm, client: Client, agent: str, seq: int,
                  rng: random.Random) -> None:
    # The history store's lock is held ~10 times longer per commit: go there less.
    path = HISTORY_LEDGER if rng.random() < 0.15 else rng.choice(LEDGERS[1:])
    kind = rng.choice("RRAE")
    line = f"{kind} {agent} {seq}\n".encode()
    if kind == "A":
        client.write(path, line, append=True)
        storm.count("append")
    else:
        data, meta = client.read_bytes(path)
        if blake3.blake3(data).hexdigest() != meta["digest"]:
            storm.fail(f"{path}: read returned bytes whose digest is not the recorded one")
        with storm.lock:
            storm.observed[path].append(data)
        try:
            if kind == "R":
                client.write(path, data + line)
                storm.count("replace")
            else:
                client.edit(path, [f"$a {line.decode().strip()}"])
                storm.count("sed")
        except ConflictError:
            storm.count("conflict")
            return
    with storm.lock:
        storm.acked[path].add(line)


def scratch_change(storm: Storm, client: Client, agent: str, seq: int,
                   rng: random.Random) -> None:
    path = rng.choice(SCRATCH)
    roll = rng.random()
    try:
        if roll < 0.4:
            client.write(path, scratch_content(agent, seq, rng.choice(SIZES)), force=True)
            storm.count("forced write")
        elif roll < 0.8:
            data, meta = client.read_bytes(path)
            if not scratch_valid(data):
                storm.fail(f"{path}: torn or foreign content via socket ({len(data)} bytes)")
            if blake3.blake3(data).hexdigest() != meta["digest"]:
                storm.fail(f"{path}: read returned bytes whose digest is not the recorded one")
            storm.count("read")
            if roll < 0.6:
                client.delete(path)
                storm.count("delete")
        else:
            client.delete(path, force=True)
            storm.count("forced delete")
    except (ConflictError, NotFoundError):
        storm.count("conflict or not found")


def mount_reader(storm: Storm, mounts: list[Path], seed: int) -> None:
    """Reads through the FUSE mounts as root (the `reader` agent)."""
    rng = random.Random(seed)
    while storm.going():
        mount = rng.choice(mounts)
        path = rng.choice(LEDGERS + SCRATCH)
        try:
            with open(mount / path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            continue
        except OSError as error:
            storm.fail(f"mount read {mount}/{path}: {errno.errorcode.get(error.errno)}")
            continue
        storm.count("mount read")
        if path in storm.observed:
            with storm.lock:
                storm.observed[path].append(data)
        elif not scratch_valid(data):
            storm.fail(f"{path}: torn or foreign content via {mount} ({len(data)} bytes)")


def run_threads(targets: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(scaled(BUDGET), MIN_SECONDS) + 120)
        assert not thread.is_alive(), "a worker hung"


def check_git_history(root: Path, storm: Storm) -> None:
    """One linear history on ``main``, made under the store lock by all three hosts'
    daemons: one commit per accepted change, authored by agents of every host."""
    repo = pygit2.Repository(str(repo_path(root, "notes")))  # the memfs user's: see gitcheck
    head = repo.references["refs/heads/main"].target
    commits = list(repo.walk(head, pygit2.enums.SortMode.TOPOLOGICAL))
    assert all(len(commit.parents) <= 1 for commit in commits), "history is not linear"
    authors = {commit.author.name for commit in commits}
    assert {f"worker{i}" for i in range(WORKERS)} <= authors, authors
    accepted = 1 + len(storm.acked[HISTORY_LEDGER])  # its header, then one line each
    by_workers = [c for c in commits if c.author.name.startswith("worker")]
    assert len(by_workers) == accepted, (len(by_workers), accepted)


@pytest.mark.slow
def test_randomized_history_across_hosts(cluster: Cluster) -> None:
    _base, daemons = start_daemons(cluster, cluster.hosts, stores=STORES)
    try:
        clients = [connect_as(FIRST_UID + i, daemons[i % len(daemons)].socket)
                   for i in range(WORKERS)]
        for path in LEDGERS:
            clients[0].write(path, header_line(path))
        storm = Storm()
        for index, client in enumerate(clients):  # every agent, on every host, in history
            line = f"A worker{index} 0\n".encode()
            client.write(HISTORY_LEDGER, line, append=True)
            storm.acked[HISTORY_LEDGER].add(line)
        mounts = [daemon.mountpoint for daemon in daemons]
        targets: list[Callable[[], None]] = [
            (lambda c=client, i=index: agent_worker(storm, c, f"worker{i}", 1000 + i))
            for index, client in enumerate(clients)]
        targets += [(lambda s=seed: mount_reader(storm, mounts, s)) for seed in (1, 2)]
        run_threads(targets)
        print(f"history: {storm.counts}")
        assert not storm.bad, f"{len(storm.bad)} failures, first: {storm.bad[:5]}"
        for kind in KINDS:
            assert storm.counts.get(kind, 0) >= MIN_EACH, \
                f"only {storm.counts.get(kind, 0)} {kind} in {scaled(BUDGET)} s: the storm is stuck"

        for path in LEDGERS:
            final, _meta = clients[0].read_bytes(path)
            lines = final.splitlines(keepends=True)
            assert lines[0] == header_line(path)
            assert len(lines) == len(set(lines)), f"{path}: a line was written twice"
            missing = storm.acked[path] - set(lines[1:])
            assert not missing, f"{path}: acknowledged changes lost: {sorted(missing)[:5]}"
            extra = set(lines[1:]) - storm.acked[path]
            assert not extra, f"{path}: unacknowledged lines: {sorted(extra)[:5]}"
            torn = [data for data in storm.observed[path] if not final.startswith(data)]
            assert not torn, f"{path}: {len(torn)} reads were not a state of the file"
            # Every host returns the same final bytes, through its socket and its mount.
            for daemon in daemons:
                with connect_as(FIRST_UID, daemon.socket) as client:
                    assert client.read_bytes(path)[0] == final
                assert (daemon.mountpoint / path).read_bytes() == final
        for path in SCRATCH:
            contents = set()
            for daemon in daemons:
                with connect_as(FIRST_UID, daemon.socket) as client:
                    try:
                        contents.add(client.read_bytes(path)[0])
                    except NotFoundError:
                        contents.add(b"<missing>")
            assert len(contents) == 1, f"{path}: hosts disagree"
            data = contents.pop()
            assert data == b"<missing>" or scratch_valid(data)
        check_git_history(Path(daemons[0].config["root"]), storm)
        # rg runs on every host over the Gluster store (jailed, through the daemon's fds).
        for daemon in daemons:
            with connect_as(FIRST_UID, daemon.socket) as client:
                found = client.search(["-c", "^ledger ", "notes/ledger", "fast/ledger"])
            assert found["exit_code"] == 0, found
        for client in clients:
            client.close()
    finally:
        stop_all(cluster, daemons)
