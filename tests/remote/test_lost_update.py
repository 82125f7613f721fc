"""The lost-update scenario on "another machine" (issue 34): an agent reads through its
remote mount (``memfs mount URL``) and writes with the real CLI over HTTP (``memfs
--url URL --token-file FILE write``, a separate process each time). The daemon keeps
one record of what the agent read, whichever way it read: a ``cat`` through the mount
or ``memfs --url ... cat``; a write based on an older read is refused with the
conflict exit code (3, docs/reference/errors.md) and changes nothing; a scan through
the mount (rg, grep -r) records nothing, as on the local mount (tests/fuse/
test_scans.py). Everything runs as a real user made for the test, with only its
token files (0600)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memfs.daemon.serve import rg_binary
from tests.daemon.test_personal_user import User
from tests.remote.conftest import (
    RemoteMount,
    free_port,
    remote_config,
    remote_mount,
    token_file,
)
from tests.support import Daemon, public_tmpdir

RG = str(rg_binary())
CONFLICT = 3  # docs/reference/errors.md: conflict's exit code


class Agent:
    """One agent on the user's machine: its token file (0600) and, when it has one,
    its remote mount; it speaks to the daemon only over HTTP."""

    def __init__(self, user: User, daemon: Daemon, token: Path,
                 mount: RemoteMount | None = None) -> None:
        self.user, self.daemon, self.token, self.mount = user, daemon, token, mount

    def memfs(self, *args: str, input: bytes | None = None
              ) -> subprocess.CompletedProcess[bytes]:
        """``memfs --url URL --token-file FILE ARGS`` run by the user."""
        return self.user.memfs("--url", self.daemon.http_url, "--token-file",
                               str(self.token), *args, input=input)

    def write(self, rel: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
        return self.memfs("write", rel, input=data)

    def cat(self, rel: str) -> bytes:
        """A read through the remote mount with ``cat``: a recorded read."""
        assert self.mount is not None
        done = self.user.run(["cat", str(self.mount.mountpoint / rel)])
        assert done.returncode == 0, (done.stderr, self.mount.log())
        return done.stdout

    def seen(self, rel: str) -> str:
        """``user.memfs.seen`` through the remote mount: the digest the daemon recorded
        as this agent's last read of ``rel`` ("" for none)."""
        assert self.mount is not None
        done = self.user.run(["getfattr", "--only-values", "-n", "user.memfs.seen",
                              str(self.mount.mountpoint / rel)])
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    def digest(self, rel: str) -> str:
        assert self.mount is not None
        done = self.user.run(["getfattr", "--only-values", "-n", "user.memfs.digest",
                              str(self.mount.mountpoint / rel)])
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    def scan(self, folder: str, word: str) -> None:
        """What an agent in a shell does all day, over the remote mount: rg, grep -r,
        find + grep. Each must find ``word``."""
        assert self.mount is not None
        where = str(self.mount.mountpoint / folder)
        for argv in ([RG, "-l", word, where], ["grep", "-rl", word, where],
                     ["find", where, "-name", "*.md", "-exec", "grep", "-l", word, "{}",
                      "+"]):
            done = self.user.run(argv)
            assert done.returncode == 0, (argv, done.stderr)
            assert b".md" in done.stdout, (argv, done.stdout)


def ok(done: subprocess.CompletedProcess[bytes]) -> str:
    assert done.returncode == 0, (done.args[-3:], done.stdout, done.stderr)
    return done.stdout.decode()


def refused(done: subprocess.CompletedProcess[bytes]) -> None:
    """Exit 3 with the CLI's one line saying it is a conflict."""
    text = done.stderr.decode()
    assert done.returncode == CONFLICT, (done.returncode, text)
    assert text.startswith("memfs: ") and "conflict" in text, text


@pytest.fixture
def agents(user: User, daemon: Daemon) -> Iterator[tuple[Agent, Agent]]:
    """alice with a remote mount, bob with only his token file."""
    with remote_mount(user, daemon, "alice") as mounted:
        alice = Agent(user, daemon, mounted.token_path, mounted)
        bob = Agent(user, daemon, token_file(user, daemon.token("bob"), "token-bob"))
        yield alice, bob


def test_read_through_the_mount_write_through_url(agents: tuple[Agent, Agent],
                                                  daemon: Daemon) -> None:
    """bob writes; alice cats it through her mount; bob writes again; alice's write
    (based on her older read) is refused and the file keeps bob's; she cats again and
    the same write goes through."""
    alice, bob = agents
    rel = "notes/lost/plan.md"
    ok(bob.write(rel, b"v1 by bob\n"))
    assert alice.cat(rel) == b"v1 by bob\n"
    assert alice.seen(rel) == alice.digest(rel) and len(alice.seen(rel)) == 64
    ok(bob.write(rel, b"v2 by bob\n"))
    refused(alice.write(rel, b"v1 + alice\n"))
    assert ok(bob.memfs("cat", rel)) == "v2 by bob\n"
    assert alice.cat(rel) == b"v2 by bob\n"  # the mount shows bob's, and records it
    assert ok(alice.write(rel, b"v1 + alice\n")).startswith(f"wrote {rel}")
    assert alice.cat(rel) == b"v1 + alice\n"
    log = ok(alice.memfs("log", rel)).splitlines()
    assert len(log) == 3, log  # bob's two and alice's one: the refused one is not there


def test_read_through_url_write_through_url(agents: tuple[Agent, Agent]) -> None:
    """The mirror: alice reads with ``memfs --url ... cat``, bob writes, alice's write is
    refused (her mount tells the same: what she saw is not the current digest) until
    she reads again. Then crossed: bob changes what alice wrote, her write is refused
    until a cat through the mount. A read is the agent's, whichever way it came: one
    record at the daemon."""
    alice, bob = agents
    rel = "notes/lost/mirror.md"
    ok(bob.write(rel, b"v1 by bob\n"))
    assert ok(alice.memfs("cat", rel)) == "v1 by bob\n"
    assert alice.seen(rel) == alice.digest(rel)  # the CLI's read, seen on the mount
    ok(bob.write(rel, b"v2 by bob\n"))
    refused(alice.write(rel, b"v1 + alice\n"))
    assert "" != alice.seen(rel) != alice.digest(rel)
    assert ok(alice.memfs("cat", rel)) == "v2 by bob\n"
    ok(alice.write(rel, b"v2 + alice\n"))
    # crossed (bob reads alice's first: he is held to the same rule)
    assert ok(bob.memfs("cat", rel)) == "v2 + alice\n"
    ok(bob.write(rel, b"v3 by bob\n"))
    refused(alice.write(rel, b"stale\n"))
    assert alice.cat(rel) == b"v3 by bob\n"
    ok(alice.write(rel, b"v3 + alice\n"))
    assert alice.cat(rel) == b"v3 + alice\n"


def test_a_scan_through_the_mount_is_no_read(agents: tuple[Agent, Agent]) -> None:
    """As tests/fuse/test_scans.py on the local mount: alice never read bob's note, only
    searched the folder through her remote mount; her write is refused and changes
    nothing; a cat then makes it acceptable."""
    alice, bob = agents
    folder = "notes/scanned"
    rel = f"{folder}/a.md"
    ok(bob.write(rel, b"v0: timeout\n"))
    alice.scan(folder, "timeout")
    assert alice.seen(rel) == ""  # nothing recorded for alice
    ok(bob.write(rel, b"v1: timeout, changed by bob\n"))
    alice.scan(folder, "changed")
    assert alice.seen(rel) == ""
    refused(alice.write(rel, b"alice's edit of a copy\n"))
    assert ok(bob.memfs("cat", rel)) == "v1: timeout, changed by bob\n"
    assert alice.cat(rel) == b"v1: timeout, changed by bob\n"
    assert alice.seen(rel) == alice.digest(rel)
    ok(alice.write(rel, b"alice after reading\n"))


def test_a_scan_after_a_read_keeps_the_old_record(agents: tuple[Agent, Agent]) -> None:
    """alice cats v0 through the mount; bob writes v1; alice's rg through the mount sees
    v1 but records nothing: her write (based on v0) is refused, v1 stays."""
    alice, bob = agents
    folder = "notes/scanned-after"
    rel = f"{folder}/b.md"
    ok(bob.write(rel, b"v0: timeout\n"))
    assert alice.cat(rel) == b"v0: timeout\n"
    v0 = alice.seen(rel)
    ok(bob.write(rel, b"v1: timeout by bob\n"))
    alice.scan(folder, "bob")
    assert alice.seen(rel) == v0 != alice.digest(rel)
    refused(alice.write(rel, b"based on v0\n"))
    assert ok(bob.memfs("cat", rel)) == "v1: timeout by bob\n"


# -- several agents at once ---------------------------------------------------------------

WRITERS = ["alice", "bob", "dave", "erin"]
ROUNDS = 4


@pytest.fixture
def crowd(user: User) -> Iterator[tuple[Agent, list[Agent]]]:
    """The standard daemon with three more agents that may write notes; zed (with only
    a token file) and the four WRITERS, each with its own remote mount."""
    config = remote_config(public_tmpdir("memfs-remote-crowd-"), free_port())
    for n, name in enumerate(("dave", "erin", "zed")):
        config["agents"][name] = {"uid": 2011 + n, "stores": {"notes": "read_write"}}
    daemon = Daemon(config, mount=True).start()
    mounts = [RemoteMount(user, daemon.http_url, daemon.token(name)) for name in WRITERS]
    try:
        for mounted in mounts:
            mounted.start()
        zed = Agent(user, daemon, token_file(user, daemon.token("zed"), "token-zed"))
        yield zed, [Agent(user, daemon, m.token_path, m) for m in mounts]
    finally:
        for mounted in mounts:
            mounted.stop()
        if daemon.alive():
            daemon.stop()


def run_all(work: Callable[[str, Agent], None], crowd: list[Agent]) -> None:
    """``work(name, agent)`` for every writer at once, in threads; any exception of
    theirs fails the test."""
    failures: list[str] = []

    def guarded(name: str, agent: Agent) -> None:
        try:
            work(name, agent)
        except BaseException as error:  # reported below with the others
            failures.append(f"{name}: {error!r}")

    threads = [threading.Thread(target=guarded, args=(name, agent))
               for name, agent in zip(WRITERS, crowd, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def check_history(crowd: list[Agent], rel: str, acked: list[bytes], refused_: list[bytes]
                  ) -> bytes:
    """The file is the seed and then every acknowledged line, no refused one; its
    history has one entry per acknowledged write besides the seed's, and every mount
    shows that content."""
    final = ok(crowd[1].memfs("cat", rel)).encode()
    lines = final.splitlines(keepends=True)
    assert lines[0] == b"seed\n" and sorted(lines[1:]) == sorted(acked), (lines, acked)
    assert not set(refused_) & set(lines[1:])
    log = ok(crowd[2].memfs("log", rel)).splitlines()
    assert len(log) == 1 + len(acked), log
    for agent in crowd:
        assert agent.cat(rel) == final
    return final


def test_no_acknowledged_write_is_lost(crowd: tuple[Agent, list[Agent]]) -> None:
    """Four agents, each with its own remote mount, in rounds: all cat the shared file
    (seeded by a fifth) through their mounts, then all write it at once with ``memfs
    --url`` (what they read plus a line of their own). Every round exactly one write is
    acknowledged (all read the same version; the first to land makes the others' reads
    stale) and the rest are refused with exit 3. At the end the file holds every
    acknowledged line, in the order of the rounds, and no refused one; the history
    (``memfs log``) has one entry per acknowledged write and none for a refused one."""
    zed, writers = crowd
    rel = "notes/crowd/rounds.md"
    # seeded by an agent that takes no part: a writer's own last write is not what
    # makes it win the first round, its cat through the mount is
    ok(zed.write(rel, b"seed\n"))
    read_all = threading.Barrier(len(writers))
    outcomes: dict[str, list[tuple[int, bytes]]] = {name: [] for name in WRITERS}

    def work(name: str, agent: Agent) -> None:
        try:
            for round_ in range(ROUNDS):
                base = agent.cat(rel)
                read_all.wait(timeout=120)
                line = f"{name} round {round_}\n".encode()
                done = agent.write(rel, base + line)
                assert done.returncode in (0, CONFLICT), (done.returncode, done.stderr)
                outcomes[name].append((done.returncode, line))
                read_all.wait(timeout=120)  # all written before the next round's reads
        except BaseException:
            read_all.abort()  # the others stop waiting for this one
            raise

    run_all(work, writers)
    acked = [line for results in outcomes.values() for code, line in results if code == 0]
    lost = [line for results in outcomes.values() for code, line in results if code != 0]
    print(f"in rounds: {len(acked)} writes acknowledged, {len(lost)} refused "
          f"({len(WRITERS)} agents x {ROUNDS} rounds)")
    for round_ in range(ROUNDS):
        winners = [name for name in WRITERS if outcomes[name][round_][0] == 0]
        assert len(winners) == 1, (round_, winners)
    final = check_history(writers, rel, acked, lost)
    assert [int(line.split()[-1]) for line in final.splitlines()[1:]] == list(range(ROUNDS))


LINES = 3


def test_writers_that_reread_on_conflict_lose_nothing(crowd: tuple[Agent, list[Agent]]
                                                      ) -> None:
    """No lock-step: four agents each add LINES lines to one file as fast as they can,
    each a cat through its mount and a ``memfs --url`` write of that plus its line, and
    on exit 3 read again and retry. Every line lands exactly once, in each agent's
    order; the history holds exactly the acknowledged writes."""
    zed, writers = crowd
    rel = "notes/crowd/free.md"
    ok(zed.write(rel, b"seed\n"))
    acked: list[bytes] = []
    refusals: list[bytes] = []

    def work(name: str, agent: Agent) -> None:
        for n in range(LINES):
            line = f"{name} line {n}\n".encode()
            for _attempt in range(60):
                done = agent.write(rel, agent.cat(rel) + line)
                if done.returncode == 0:
                    acked.append(line)
                    break
                assert done.returncode == CONFLICT, (done.returncode, done.stderr)
                refusals.append(line)
            else:
                raise AssertionError(f"{name}: line {n} refused 60 times")

    run_all(work, writers)
    print(f"free-running: {len(acked)} writes acknowledged, {len(refusals)} refused "
          f"({len(WRITERS)} agents x {LINES} lines)")
    assert len(acked) == len(WRITERS) * LINES
    final = check_history(writers, rel, acked, [])
    for name in WRITERS:
        mine = [line for line in final.splitlines() if line.startswith(name.encode() + b" ")]
        assert mine == [f"{name} line {n}".encode() for n in range(LINES)], mine
