"""A search through the mount is not a read (memfs/fuse/scans.py): opens by search
tools, and by a process opening many unread files at once, record nothing, so a stale
write stays a conflict; `cat` records as before, and `user.memfs.seen` tells the truth.
"""

from __future__ import annotations

import itertools

from tests.fuse.conftest import RG, UID_A, Mounted, digest, probe1
from tests.support import UID_B, run_as

_names = itertools.count()


def seen(m: Mounted, uid: int, rel: str) -> str:
    result = probe1(uid, "getxattr", m.path(rel), "user.memfs.seen")
    assert "ok" in result, result
    return str(result["ok"])


def search_everything(m: Mounted, uid: int, folder: str) -> None:
    """What an agent in a shell does all day: rg, grep -r and find + grep."""
    for argv in ([RG, "-l", "timeout", m.path(folder)],
                 ["grep", "-rl", "timeout", m.path(folder)],
                 ["find", m.path(folder), "-name", "*.md", "-exec", "grep", "-l", "timeout",
                  "{}", "+"]):
        done = run_as(uid, argv)
        assert done.returncode == 0, (argv, done.stderr)
        assert b".md" in done.stdout, argv


def test_search_never_makes_a_stale_write_acceptable(mounted: Mounted) -> None:
    folder = f"notes/scan-{next(_names)}"
    rel = f"{folder}/a.md"
    mounted.write(UID_B, rel, b"v0: timeout\n")
    search_everything(mounted, UID_A, folder)
    assert seen(mounted, UID_A, rel) == ""  # nothing recorded for alice
    mounted.write(UID_B, rel, b"v1: timeout, changed by bob\n")
    done = mounted.cli(UID_A, "write", rel, input=b"alice's edit of a copy\n")
    assert done.returncode == 3, done.stderr
    # a real read then makes the write acceptable
    assert run_as(UID_A, ["cat", mounted.path(rel)]).stdout == b"v1: timeout, changed by bob\n"
    assert seen(mounted, UID_A, rel) == digest(b"v1: timeout, changed by bob\n")
    done = mounted.cli(UID_A, "write", rel, input=b"alice after reading\n")
    assert done.returncode == 0, done.stderr


def test_search_after_a_read_keeps_the_old_record(mounted: Mounted) -> None:
    """alice read v0; bob wrote v1; alice's search opens v1 but does not record it:
    her write based on v0 is refused."""
    folder = f"notes/scan-{next(_names)}"
    rel = f"{folder}/b.md"
    mounted.write(UID_B, rel, b"v0: timeout\n")
    assert run_as(UID_A, ["cat", mounted.path(rel)]).returncode == 0
    mounted.write(UID_B, rel, b"v1: timeout by bob\n")
    search_everything(mounted, UID_A, folder)
    assert seen(mounted, UID_A, rel) == digest(b"v0: timeout\n")
    done = mounted.cli(UID_A, "write", rel, input=b"based on v0\n")
    assert done.returncode == 3, done.stderr
    with open(mounted.backing(rel), "rb") as handle:
        assert handle.read() == b"v1: timeout by bob\n"


def test_a_process_opening_many_files_becomes_a_scan(mounted: Mounted) -> None:
    """Not a known tool (python), but 200 unread files opened at once: the first ones
    are reads (up to [scans] max_opens_per_second, 64 by default), the rest a scan."""
    folder = f"notes/many-{next(_names)}"
    for n in range(200):
        mounted.write(UID_B, f"{folder}/{n:03}.md", f"file {n}\n".encode())
    script = ("import os, sys\nfor name in sorted(os.listdir(sys.argv[1])):\n"
              "    open(os.path.join(sys.argv[1], name), 'rb').read()\n")
    done = run_as(UID_A, ["python3", "-c", script, mounted.path(folder)])
    assert done.returncode == 0, done.stderr
    assert seen(mounted, UID_A, f"{folder}/000.md") == digest(b"file 0\n")
    assert seen(mounted, UID_A, f"{folder}/199.md") == ""
