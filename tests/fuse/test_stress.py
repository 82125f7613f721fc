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
it does not test less. Likewise a reader's write-back being accepted at all is not
left to speed (under emulation, alice changed the file before every one of 80
write-backs): each reader's last round is a quiet window, in which alice waits between
two writes and the other reader's write-backs wait, so that write-back must succeed.
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
    # A reader's quiet window: `window` is held by the reader for its last round (and by
    # every reader write-back, so none lands inside another's window); alice, asked by
    # `want`, parks between two writes (`parked`) until `resume`.
    window = threading.Lock()
    want, parked, resume = threading.Event(), threading.Event(), threading.Event()

    first = make("A0", "-", 1000)
    with connect_as(UID_A, mounted.socket) as client:
        client.write(REL, first, force=True)  # the only forced write: the start
    accepted["A0"] = "-"
    clients = {UID_A: connect_as(UID_A, mounted.socket)}
    # A new connection for each write-back, so that it is checked against what cat
    # recorded, not against the connection's own last write; made now, since
    # connect_as switches the whole process's euid, which a thread's run_as must not see.
    fresh = {uid: [connect_as(uid, mounted.socket) for _ in range(READS)]
             for uid in (UID_B, UID_D)}

    def alice() -> None:
        client = clients[UID_A]
        last, n = "A0", 0
        while not (readers_done.is_set() and counts["alice"] >= WRITES):
            if want.is_set():
                parked.set()
                resume.wait()
                resume.clear()
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
        for n in range(1, READS + 1):
            quiet = n == READS
            if quiet:  # park alice, keep the other reader's write-backs out
                window.acquire()
                parked.clear()
                want.set()
                parked.wait()
            try:
                if not read_and_write_back(uid, name, n, quiet):
                    return
            finally:
                if quiet:
                    want.clear()
                    resume.set()
                    window.release()

    def read_and_write_back(uid: int, name: str, n: int, quiet: bool) -> bool:
        """One round; False (with a failure noted) when the reader must stop."""
        done = run_as(uid, ["sh", "-c", f"cat {mounted.path(REL)} && "
                            f"getfattr --absolute-names --only-values -n user.memfs.seen "
                            f"{mounted.path(REL)} >&2"])
        if done.returncode != 0:
            failures.append(f"{name}: cat failed: {done.stderr[-200:]!r}")
            return False
        data = done.stdout
        try:
            read_tag, _ = parse(data)
        except ValueError as error:
            failures.append(f"{name}: {error}")
            return False
        if done.stderr.decode() != blake3.blake3(data).hexdigest():
            failures.append(f"{name}: seen {done.stderr[:16]!r} is not the digest of "
                            f"the {len(data)} bytes read ({read_tag})")
            return False
        tag = f"{name}{n}"
        try:
            if not quiet:
                window.acquire()  # not inside another reader's quiet window
            try:
                with fresh[uid][n - 1] as client:
                    client.write(REL, make(tag, read_tag, len(data) % 5000 + 10))
            finally:
                if not quiet:
                    window.release()
        except ConflictError:
            if quiet:
                failures.append(f"{name}: refused in its quiet window, where nobody wrote")
            with lock:
                counts["reader_conflicts"] += 1
        else:
            with lock:
                accepted[tag] = read_tag
                counts["reader_accepted"] += 1
        with lock:
            counts["reads"] += 1
        return True

    threads = [threading.Thread(target=alice),
               threading.Thread(target=reader, args=(UID_B, "B")),
               threading.Thread(target=reader, args=(UID_D, "D"))]
    for thread in threads:
        thread.start()
    for thread in threads[1:]:
        thread.join()
    readers_done.set()
    threads[0].join()
    for client in [*clients.values(), *fresh[UID_B], *fresh[UID_D]]:
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
    assert counts["reader_accepted"] >= 2, counts  # at least each quiet window's
    print(counts)
