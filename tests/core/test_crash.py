"""Crash safety: SIGKILL the daemon at random moments during a write storm, many
times. After each restart every acknowledged write is present byte for byte (or a
later write that was in flight), no partial file is visible and no staging leftovers
remain."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from control.client import Client, MemfsClientError
from tests.support import UID_A, Daemon, connect_as, public_tmpdir, standard_config

WRITERS = 4
FILES_PER_WRITER = 3
ROUNDS = 12


class Writer(threading.Thread):
    """Writes whole files and appends; remembers what was acknowledged and what was
    in flight when the connection died."""

    def __init__(self, index: int, client: Client, rng: random.Random) -> None:
        super().__init__()
        self.index = index
        self.client = client
        self.rng = rng
        self.acked: dict[str, bytes] = {}
        self.in_flight: dict[str, bytes] = {}
        self.appended: list[bytes] = []
        self.append_in_flight: bytes | None = None
        self.log_path = f"notes/crash/w{index}.log"

    def run(self) -> None:
        seq = 0
        try:
            while True:
                seq += 1
                if seq % 3 == 0:
                    line = f"w{self.index} line {seq}\n".encode()
                    self.append_in_flight = line
                    self.client.write(self.log_path, line, append=True)
                    self.appended.append(line)
                    self.append_in_flight = None
                    continue
                path = f"notes/crash/w{self.index}-{seq % FILES_PER_WRITER}.bin"
                size = self.rng.choice([1, 100, 4096, 70000, 300000])
                unit = f"<{self.index}:{seq}>".encode()
                content = (unit * (size // len(unit) + 1))[:size]
                self.in_flight[path] = content
                self.client.write(path, content, force=True)
                self.acked[path] = content
                del self.in_flight[path]
        except MemfsClientError:
            return  # the daemon died under us


@pytest.mark.slow
def test_acknowledged_writes_survive_sigkill() -> None:
    rng = random.Random(20261129)
    base = public_tmpdir()
    daemon = Daemon(standard_config(base))
    root = Path(daemon.config["root"])
    state: dict[int, Writer] = {}
    try:
        for _ in range(ROUNDS):
            daemon.start()
            check_state(root, state)
            writers = []
            for index in range(WRITERS):
                writer = Writer(index, connect_as(UID_A, daemon.socket), rng)
                if index in state:  # carry over what survived, to check it next round
                    writer.acked = dict(state[index].acked)
                    writer.appended = list(state[index].appended)
                writers.append(writer)
            for writer in writers:
                writer.start()
            time.sleep(rng.uniform(0.05, 0.5))
            daemon.kill()
            for writer in writers:
                writer.join(10)
                writer.client.close()
            state = {w.index: w for w in writers}
            # An in-flight write may or may not have committed: settle it from disk so
            # the next round checks against the truth, having validated it first.
            check_state(root, state, settle=True)
        daemon.start()
        check_state(root, state)
        assert sum(len(w.acked) for w in state.values()) > 0
    finally:
        if daemon.alive():
            daemon.kill()


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
    if not settle and staging.exists():
        assert len([e for e in staging.iterdir() if e.is_dir()]) == 1
        for entry in staging.iterdir():
            if entry.is_dir():
                assert os.listdir(entry) == [], f"staging leftovers in {entry}"
