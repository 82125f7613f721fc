"""View isolation survives warm kernel caches.

The kernel's dentry, attribute and page caches are shared by every uid. After an
agent attached to a store has listed, stat'ed, read, searched and even kept a
directory open in it, an agent that is not attached must still find nothing there:
store dentries are revalidated on every walk (entry/attr timeout 0) with a lookup
that carries the walker's uid.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.fuse.conftest import RG, Mounted, probe
from tests.support import UID_A, UID_B, UID_C, UID_UNKNOWN, run_as

MARKER = b"isolation-marker-7f3a"


@pytest.fixture(scope="module")
def warm(mounted: Mounted) -> Mounted:
    mounted.write(UID_A, "ops/runbook.md", b"ops only: " + MARKER + b"\n")
    mounted.write(UID_A, "ops/deep/er/file.md", MARKER + b"\n")
    mounted.write(UID_A, "notes/public.md", b"public\n")
    return mounted


def _warm_up(m: Mounted) -> None:
    """alice touches everything in ops: dentries, attrs, pages, readdir, xattrs."""
    for argv in (["ls", "-laR", m.path("ops")], ["cat", m.path("ops/runbook.md")],
                 ["stat", m.path("ops/deep/er/file.md")], ["find", m.path("ops")],
                 [RG, "-c", MARKER.decode(), m.path("ops")],
                 ["getfattr", "-d", m.path("ops/runbook.md")]):
        done = run_as(UID_A, argv)
        assert done.returncode == 0, (argv, done.stderr)
    assert MARKER in run_as(UID_A, ["cat", m.path("ops/deep/er/file.md")]).stdout


@pytest.mark.parametrize("uid", [UID_C, UID_UNKNOWN])
def test_unattached_agent_finds_nothing_after_warm_caches(warm: Mounted, uid: int) -> None:
    m = warm
    for _round in range(3):  # alternate, so every cache is as warm as it gets
        _warm_up(m)
        attempts = {
            "ls": ["ls", m.path("ops")],
            "ls deep": ["ls", m.path("ops/deep/er")],
            "stat": ["stat", m.path("ops/runbook.md")],
            "stat dir": ["stat", m.path("ops")],
            "cat": ["cat", m.path("ops/runbook.md")],
            "cat deep": ["cat", m.path("ops/deep/er/file.md")],
            "head": ["head", m.path("ops/runbook.md")],
            "find ops": ["find", m.path("ops")],
            "rg ops": [RG, MARKER.decode(), m.path("ops")],
            "getfattr": ["getfattr", "-d", m.path("ops/runbook.md")],
            "relative": ["sh", "-c", f"cd {m.mount} && cat ops/runbook.md"],
            "dotdot": ["cat", m.path("notes/../ops/runbook.md")]
            if uid == UID_C else ["cat", m.path("ops/runbook.md")],
        }
        for name, argv in attempts.items():
            done = run_as(uid, argv)
            assert done.returncode != 0, (name, done)
            assert MARKER not in done.stdout, name
            assert b"runbook" not in done.stdout, name
        # searching the whole mount: only its own stores, and no error about others
        done = run_as(uid, ["find", str(m.mount)])
        assert done.returncode == 0
        assert b"ops" not in done.stdout
        done = run_as(uid, [RG, "-l", MARKER.decode(), str(m.mount)])
        assert done.returncode == 1 and done.stdout == b"", done
        done = run_as(uid, ["ls", "-a", str(m.mount)])
        assert b"ops" not in done.stdout
        results = probe(uid, [["stat", m.path("ops")], ["listdir", m.path("ops")],
                              ["read", m.path("ops/runbook.md")],
                              ["getxattr", m.path("ops/runbook.md"), "user.memfs.digest"]])
        assert results == [{"errno": "ENOENT"}] * 4


def test_denied_lookup_does_not_hide_it_from_the_attached_agent(warm: Mounted) -> None:
    m = warm
    for _round in range(3):
        assert run_as(UID_C, ["cat", m.path("ops/runbook.md")]).returncode != 0
        assert MARKER in run_as(UID_A, ["cat", m.path("ops/runbook.md")]).stdout
        assert MARKER in run_as(UID_B, ["cat", m.path("ops/runbook.md")]).stdout  # bob: read


def test_open_directory_of_another_agent_gives_no_way_in(warm: Mounted) -> None:
    """alice keeps a shell sitting in /memory/ops; carol still cannot get in."""
    m = warm
    holder = subprocess.Popen(["sh", "-c", "cd ops/deep && sleep 5"], cwd=str(m.mount),
                              user=UID_A, group=UID_A, extra_groups=[])
    try:
        time.sleep(0.3)
        _warm_up(m)
        done = run_as(UID_C, ["cat", m.path("ops/deep/er/file.md")])
        assert done.returncode != 0 and MARKER not in done.stdout
        done = run_as(UID_C, ["ls", f"/proc/{holder.pid}/cwd/"])
        assert done.returncode != 0  # another uid's cwd link is not followable
    finally:
        holder.kill()
        holder.wait()
