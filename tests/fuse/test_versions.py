"""What you read is what is recorded, and the mount is fresh after every write.

Writes go through the control socket; reads through the mount. Covers the read-then-
write flows (accepted / conflict), freshness right after a commit (writer and other
agents, warm page cache and attributes, size changes, deletes, new files), a change
made by another daemon on the same root (no invalidation reaches this mount), a
handle held open across a commit (it keeps returning its pinned version) and the
``user.memfs.digest`` / ``user.memfs.seen`` extended attributes.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.store.read.versions import APPENDING
from tests.fuse.conftest import UID_D, Mounted, cat, digest, probe, probe1
from tests.support import PYTHON, UID_A, UID_B, UID_C, Daemon, connect_as, plant, run_as


def size(m: Mounted, uid: int, rel: str) -> int:
    done = run_as(uid, ["stat", "-c", "%s", m.path(rel)])
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def stat_fields(m: Mounted, uid: int, rel: str) -> dict[str, str]:
    done = m.cli(uid, "stat", rel)
    assert done.returncode == 0, done.stderr
    return dict(line.split(": ", 1) for line in done.stdout.decode().splitlines())


# -- read through the mount, write through the socket ----------------------------------

def test_read_then_write_is_accepted(mounted: Mounted) -> None:
    mounted.write(UID_A, "notes/flow1.md", b"first\n")
    assert cat(mounted, UID_B, "notes/flow1.md") == b"first\n"
    done = mounted.cli(UID_B, "write", "notes/flow1.md", input=b"bob's edit\n")
    assert done.returncode == 0, done.stderr
    assert cat(mounted, UID_A, "notes/flow1.md") == b"bob's edit\n"


def test_write_after_someone_else_wrote_is_a_conflict(mounted: Mounted) -> None:
    mounted.write(UID_A, "notes/flow2.md", b"first\n")
    assert cat(mounted, UID_B, "notes/flow2.md") == b"first\n"
    assert cat(mounted, UID_A, "notes/flow2.md") == b"first\n"
    done = mounted.cli(UID_A, "write", "notes/flow2.md", input=b"alice was quicker\n")
    assert done.returncode == 0, done.stderr
    done = mounted.cli(UID_B, "write", "notes/flow2.md", input=b"bob's stale edit\n")
    assert done.returncode == 3, done
    assert b"changed since you last read it" in done.stderr
    assert cat(mounted, UID_B, "notes/flow2.md") == b"alice was quicker\n"
    # having read the new version through the mount, bob may write again
    done = mounted.cli(UID_B, "write", "notes/flow2.md", input=b"bob, rebased\n")
    assert done.returncode == 0, done.stderr


def test_writing_an_unread_existing_file_is_a_conflict(mounted: Mounted) -> None:
    mounted.write(UID_A, "notes/flow3.md", b"never read by bob\n")
    done = mounted.cli(UID_B, "write", "notes/flow3.md", input=b"blind\n")
    assert done.returncode == 3
    assert run_as(UID_B, ["head", "-c", "5", mounted.path("notes/flow3.md")]).returncode == 0
    assert mounted.cli(UID_B, "write", "notes/flow3.md", input=b"seen\n").returncode == 0


def test_python_open_records_what_it_read(mounted: Mounted) -> None:
    mounted.write(UID_A, "notes/flow4.md", b"via python\n")
    assert probe1(UID_D, "read", mounted.path("notes/flow4.md")) == {"ok": "via python\n"}
    assert mounted.cli(UID_D, "write", "notes/flow4.md", input=b"dave\n").returncode == 0


# -- freshness ---------------------------------------------------------------------------

@pytest.mark.parametrize("reader", [UID_A, UID_B, UID_C])
def test_write_is_visible_to_an_immediate_cat(mounted: Mounted, reader: int) -> None:
    rel = f"notes/fresh-{reader}.md"
    sizes = [10, 5000, 3, 200_000, 0, 70_000, 1]  # grow and shrink, across page sizes
    for round_, n in enumerate(sizes):
        data = (f"round {round_} ".encode() * (n // 8 + 1))[:n]
        mounted.write(UID_A, rel, data)  # alice writes through the socket
        # cat by the writer and by another agent, warm after the first round
        assert cat(mounted, UID_A, rel) == data
        assert cat(mounted, reader, rel) == data
        assert size(mounted, reader, rel) == n
        assert probe1(reader, "read", mounted.path(rel)) == {"ok": data.decode()}
        assert cat(mounted, reader, rel) == data  # again: page cache kept, still right


def test_stat_is_fresh_after_a_write_without_any_open(mounted: Mounted) -> None:
    rel = "notes/stat-fresh.md"
    mounted.write(UID_A, rel, b"x" * 10)
    assert size(mounted, UID_C, rel) == 10
    for n in (20, 5, 4096, 1):
        mounted.write(UID_A, rel, b"y" * n)
        assert size(mounted, UID_C, rel) == n  # attrs invalidated by the commit


def test_delete_and_create_are_visible_at_once(mounted: Mounted) -> None:
    rel = "notes/comes-and-goes.md"
    assert run_as(UID_C, ["cat", mounted.path(rel)]).returncode == 1  # negative lookup
    mounted.write(UID_A, rel, b"here\n")
    assert cat(mounted, UID_C, rel) == b"here\n"
    assert b"comes-and-goes.md" in run_as(UID_C, ["ls", mounted.path("notes")]).stdout
    mounted.delete(UID_A, rel)
    for argv in (["cat", mounted.path(rel)], ["stat", mounted.path(rel)]):
        done = run_as(UID_C, argv)
        assert done.returncode == 1 and b"No such file" in done.stderr, argv
    assert b"comes-and-goes.md" not in run_as(UID_C, ["ls", mounted.path("notes")]).stdout
    mounted.write(UID_A, rel, b"back\n")
    assert cat(mounted, UID_C, rel) == b"back\n"


@pytest.fixture
def other_daemon(mounted: Mounted) -> Iterator[Path]:
    """A second daemon on the same root, without a mount: its commits fire no
    listener in the mounting daemon."""
    config = dict(mounted.daemon.config)
    config["socket"] = str(mounted.base / "other.sock")
    other = Daemon(config, config_path=mounted.base / "other.toml").start()
    try:
        yield Path(config["socket"])
    finally:
        other.stop()


def test_change_by_another_daemon_is_read_fresh(mounted: Mounted, other_daemon: Path) -> None:
    from tests.support import connect_as

    rel = "notes/other-daemon.md"
    mounted.write(UID_A, rel, b"short\n")
    assert cat(mounted, UID_C, rel) == b"short\n"  # warm pages and attrs
    assert size(mounted, UID_C, rel) == 6
    for data in (b"a much longer second version\n" * 100, b"v3\n", b"fourth!\n"):
        with connect_as(UID_A, other_daemon) as client:
            client.write(rel, data, force=True)
        # a new open always pins and serves the current version, whole
        assert cat(mounted, UID_C, rel) == data
        assert size(mounted, UID_C, rel) == len(data)  # the open refreshed the attrs


def test_held_handle_keeps_its_version(mounted: Mounted) -> None:
    """A reader that keeps the file open re-reads exactly the version it pinned (and
    recorded) while others see the new one, whole, even though the size changed."""
    rel = "notes/held.md"
    v1 = b"version one\n" * 1000
    v2 = b"version two is different and longer\n" * 2000
    mounted.write(UID_A, rel, v1)
    script = (
        "import sys, time, os\n"
        f"f = open({mounted.path(rel)!r}, 'rb')\n"
        "a = f.read(); print(len(a), flush=True)\n"
        "sys.stdin.readline()\n"
        "f.seek(0); b = f.read()\n"
        "print(len(b), a == b, os.getxattr(f.name, 'user.memfs.seen').decode(), flush=True)\n"
    )
    holder = subprocess.Popen([PYTHON, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, user=UID_B, group=UID_B, extra_groups=[])
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert int(holder.stdout.readline()) == len(v1)
        mounted.write(UID_A, rel, v2)
        assert cat(mounted, UID_C, rel) == v2  # bypasses the pages v1 owns
        assert cat(mounted, UID_A, rel) == v2
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        length, same, seen = holder.stdout.readline().decode().split()
        assert (int(length), same) == (len(v1), "True")
        assert seen == digest(v1)  # bob recorded exactly what his handle returns
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)  # the release reaches the daemon asynchronously
    assert cat(mounted, UID_B, rel) == v2
    assert size(mounted, UID_B, rel) == len(v2)


def test_held_handle_keeps_its_version_across_an_append(mounted: Mounted) -> None:
    """An append grows the file in place (the same inode): a reader holding it open
    still reads exactly the version it pinned, a new open the longer one."""
    rel = "notes/held-append.md"
    v1 = b"first part\n" * 500
    extra = b"appended later\n" * 300
    mounted.write(UID_A, rel, v1)
    script = (
        "import sys, os\n"
        f"f = open({mounted.path(rel)!r}, 'rb', buffering=0)\n"
        "a = f.read(100); print(len(a), flush=True)\n"
        "sys.stdin.readline()\n"
        "b = a + f.read(); f.seek(0); c = f.read()\n"
        "print(len(b), len(c), b == c, flush=True)\n"
    )
    holder = subprocess.Popen([PYTHON, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, user=UID_B, group=UID_B, extra_groups=[])
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert int(holder.stdout.readline()) == 100
        with connect_as(UID_A, mounted.socket) as alice:
            alice.write(rel, extra, append=True)
        assert cat(mounted, UID_C, rel) == v1 + extra
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        first, second, same = holder.stdout.readline().decode().split()
        assert (int(first), int(second), same) == (len(v1), len(v1), "True")
    finally:
        holder.kill()
        holder.wait()


def test_an_append_under_way_elsewhere_shows_the_recorded_version(mounted: Mounted) -> None:
    """Another daemon (another host on a shared root) is half way through an append
    in place: its bytes are in the file, its mark is on it. Opening, stat'ing and
    reading through the mount show exactly the recorded version, with its times.
    (Once failed: the pinned stat lost its nanosecond times and every stat of the
    held file answered EIO.)"""
    rel = "notes/append-elsewhere.md"
    v1 = b"settled\n" * 100
    mounted.write(UID_A, rel, v1)
    backing = mounted.backing(rel)
    os.setxattr(backing, APPENDING, str(len(v1)).encode())
    with open(backing, "ab") as handle:
        handle.write(b"half of another host's append\n")
    mtime_ns = backing.stat().st_mtime_ns
    script = (
        "import os, sys\n"
        f"fd = os.open({mounted.path(rel)!r}, os.O_RDONLY)\n"
        "data = os.read(fd, 1 << 20)\n"
        f"st = os.stat({mounted.path(rel)!r})\n"
        "print(len(data), os.fstat(fd).st_size, st.st_size, st.st_mtime_ns, flush=True)\n"
    )
    done = subprocess.run([PYTHON, "-c", script], capture_output=True, timeout=30,
                          user=UID_B, group=UID_B, extra_groups=[])
    assert done.returncode == 0, done.stderr.decode()
    read, fstat_size, stat_size, seen_mtime = map(int, done.stdout.split())
    assert (read, fstat_size, stat_size) == (len(v1), len(v1), len(v1))
    assert seen_mtime == mtime_ns


# -- extended attributes ------------------------------------------------------------------

def test_xattrs_digest_and_seen(mounted: Mounted) -> None:
    rel = "notes/xattr.md"
    mounted.write(UID_A, rel, b"xattr content\n")
    path = mounted.path(rel)
    # carol has not read it: seen is empty, digest is what a read would return now
    results = probe(UID_C, [["getxattr", path, "user.memfs.seen"],
                            ["getxattr", path, "user.memfs.digest"],
                            ["listxattr", path]])
    assert results == [{"ok": ""}, {"ok": digest(b"xattr content\n")},
                       {"ok": ["user.memfs.digest", "user.memfs.seen"]}]
    before = stat_fields(mounted, UID_C, rel)
    assert before["seen"] == "-" and before["digest"] == digest(b"xattr content\n")
    done = run_as(UID_C, ["getfattr", "-d", path])
    assert done.returncode == 0
    assert f'user.memfs.digest="{before["digest"]}"'.encode() in done.stdout
    assert b"user.memfs.seen" in done.stdout

    assert cat(mounted, UID_C, rel) == b"xattr content\n"
    after = stat_fields(mounted, UID_C, rel)
    done = run_as(UID_C, ["getfattr", "-d", path])
    assert f'user.memfs.digest="{after["digest"]}"'.encode() in done.stdout
    assert f'user.memfs.seen="{after["seen"]}"'.encode() in done.stdout
    assert after["seen"] == after["digest"] == digest(b"xattr content\n")
    # seen is per agent: bob still has none
    assert probe1(UID_B, "getxattr", path, "user.memfs.seen") == {"ok": ""}

    # someone else writes: digest moves on, carol's seen stays on what she read
    mounted.write(UID_A, rel, b"newer\n")
    results = probe(UID_C, [["getxattr", path, "user.memfs.seen"],
                            ["getxattr", path, "user.memfs.digest"]])
    later = stat_fields(mounted, UID_C, rel)
    assert results == [{"ok": later["seen"]}, {"ok": later["digest"]}]
    assert later["seen"] == digest(b"xattr content\n") and later["digest"] == digest(b"newer\n")
    assert later["changed_since_last_read"] == "yes"
    # writing through the socket records the written version as seen
    assert probe1(UID_A, "getxattr", path, "user.memfs.seen") == {"ok": digest(b"newer\n")}


def test_xattr_digest_of_a_file_planted_by_hand(mounted: Mounted) -> None:
    backing = plant(mounted.backing("notes/planted-xattr.md"), b"planted\n")
    try:
        assert probe1(UID_C, "getxattr", mounted.path("notes/planted-xattr.md"),
                      "user.memfs.digest") == {"ok": digest(b"planted\n")}
    finally:
        backing.unlink()
