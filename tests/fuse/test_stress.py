"""Invariants 1 and 2 under load, through the real mount and the real socket.

alice rewrites one file continuously through the socket; bob and dave (real ``cat``
processes on the mount) read it and write back content derived from exactly what
they read. Every version carries its own tag, the tag of the version its writer
meant to replace, and a body derived from both, so:

* a read that mixes two versions (or is cut short) does not parse: never allowed;
* right after each cat the reader's ``user.memfs.seen`` must be the blake3 of the
  bytes cat returned (invariant 2);
* the accepted writes, each claiming the version it replaced, must form one chain
  from the first version to the last with no fork and no orphan (invariant 1: every
  accepted non-forced write's base is the version it replaced).

The storm stops on counts (READS per reader; alice writes until both readers are done
and she has had WRITES accepted), not on a time budget: a slow machine takes longer,
it does not test less.
"""

from __future__ import annotations

import random
import threading

import blake3
import pytest

from memfs.control.client import ConflictError
from tests.fuse.conftest import UID_D, Mounted
from tests.support import UID_A, UID_B, connect_as, run_as

REL = "notes/stress.md"
READS = 40  # cat + write-back rounds per reader
WRITES = 40  # accepted writes alice needs at least


def make(tag: str, base: str, size: int) -> bytes:
    header = f"tag={tag}\nbase={base}\nsize={size}\n".encode()
    unit = f"<{tag}|{base}>".encode()
    body = (unit * (size // len(unit) + 1))[:size]
    return header + body


def parse(data: bytes) -> tuple[str, str]:
    """(tag, base) of a whole, unmixed version; raises ValueError otherwise."""
    head = data.split(b"\n", 3)
    if len(head) != 4 or not head[0].startswith(b"tag=") or not head[2].startswith(b"size="):
        raise ValueError(f"unparsable header {data[:80]!r}")
    tag, base = head[0][4:].decode(), head[1][5:].decode()
    if data != make(tag, base, int(head[2][5:])):
        raise ValueError(f"mixed or truncated version {tag} ({len(data)} bytes)")
    return tag, base


@pytest.mark.slow
def test_readers_and_writer_keep_the_invariants(mounted: Mounted) -> None:
    rng = random.Random(7)
    sizes = [rng.choice([50, 3000, 4096, 9000, 70_000, 140_000, 300_000]) for _ in range(64)]
    lock = threading.Lock()
    accepted: dict[str, str] = {}  # tag -> base, for every accepted write
    failures: list[str] = []
    counts = {"reads": 0, "reader_accepted": 0, "reader_conflicts": 0, "alice": 0}
    readers_done = threading.Event()

    first = make("A0", "-", 1000)
    with connect_as(UID_A, mounted.socket) as client:
        client.write(REL, first, force=True)  # the only forced write: the start
    accepted["A0"] = "-"
    clients = {uid: connect_as(uid, mounted.socket) for uid in (UID_A, UID_B, UID_D)}

    def alice() -> None:
        client = clients[UID_A]
        last, n = "A0", 0
        while not (readers_done.is_set() and counts["alice"] >= WRITES):
            n += 1
            tag = f"A{n}"
            try:
                client.write(REL, make(tag, last, sizes[n % len(sizes)]))
            except ConflictError:
                data, _meta = client.read_bytes(REL)  # records what she now saw
                last = parse(data)[0]
                continue
            with lock:
                accepted[tag] = last
                counts["alice"] += 1
            last = tag

    def reader(uid: int, name: str) -> None:
        client = clients[uid]
        n = 0
        while n < READS:
            n += 1
            done = run_as(uid, ["sh", "-c", f"cat {mounted.path(REL)} && "
                                f"getfattr --absolute-names --only-values -n user.memfs.seen "
                                f"{mounted.path(REL)} >&2"])
            if done.returncode != 0:
                failures.append(f"{name}: cat failed: {done.stderr[-200:]!r}")
                return
            data = done.stdout
            try:
                read_tag, _ = parse(data)
            except ValueError as error:
                failures.append(f"{name}: {error}")
                return
            if done.stderr.decode() != blake3.blake3(data).hexdigest():
                failures.append(f"{name}: seen {done.stderr[:16]!r} is not the digest of "
                                f"the {len(data)} bytes read ({read_tag})")
                return
            tag = f"{name}{n}"
            try:
                client.write(REL, make(tag, read_tag, len(data) % 5000 + 10))
            except ConflictError:
                with lock:
                    counts["reader_conflicts"] += 1
            else:
                with lock:
                    accepted[tag] = read_tag
                    counts["reader_accepted"] += 1
            with lock:
                counts["reads"] += 1

    threads = [threading.Thread(target=alice),
               threading.Thread(target=reader, args=(UID_B, "B")),
               threading.Thread(target=reader, args=(UID_D, "D"))]
    for thread in threads:
        thread.start()
    for thread in threads[1:]:
        thread.join()
    readers_done.set()
    threads[0].join()
    for client in clients.values():
        client.close()
    assert not failures, failures

    final = run_as(UID_B, ["cat", mounted.path(REL)]).stdout
    final_tag, _ = parse(final)
    # One chain: each version replaced by at most one accepted write, all reached.
    successor: dict[str, str] = {}
    for tag, base in accepted.items():
        if base == "-":
            continue
        assert base in accepted, f"{tag} claims to replace {base}, never accepted"
        assert base not in successor, (
            f"{base} replaced twice: by {successor[base]} and {tag}: a lost update")
        successor[base] = tag
    chain, tag = ["A0"], "A0"
    while tag in successor:
        tag = successor[tag]
        chain.append(tag)
    assert chain[-1] == final_tag
    assert len(chain) == len(accepted), "some accepted write is not in the history"
    assert counts["reads"] == 2 * READS and counts["alice"] >= WRITES, counts
    assert counts["reader_accepted"] >= 1, counts
    print(counts)
