"""Who may do what on the mount: an allow/deny table of operations x agents, run with
real tools and with Python calls in a child process running as the agent's uid.

Agents (tests/support.standard_config): alice has read_write on notes, carol has read
on notes and nothing on ops, uid 2999 is no agent at all. Decisions: a store an agent
is not attached to does not exist for it (ENOENT, exactly like a missing store); an
unknown uid sees an empty root; every mutation fails with EROFS and changes nothing.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fuse.conftest import RG, Mounted, probe, snapshot
from tests.support import UID_A, UID_C, UID_UNKNOWN, plant, run_as

CONTENT = b"table marker: zebra-42\n"

# kind -> (uid, store the row targets)
KINDS = {
    "read_write": (UID_A, "notes"),
    "read": (UID_C, "notes"),
    "unattached": (UID_C, "ops"),
    "unknown_uid": (UID_UNKNOWN, "notes"),
}
VISIBLE = {"read_write", "read"}


@pytest.fixture(scope="module")
def table(mounted: Mounted) -> Iterator[Mounted]:
    for store in ("notes", "ops"):
        mounted.write(UID_A, f"{store}/table.md", CONTENT)
        mounted.write(UID_A, f"{store}/sub/deep.md", CONTENT)
    before = snapshot(mounted.root)
    yield mounted
    # Nothing any row tried changed the backing directory.
    assert snapshot(mounted.root) == before


# -- real tools ---------------------------------------------------------------------

READ_TOOLS: dict[str, Any] = {
    "ls": lambda m, s: ["ls", m.path(s)],
    "ls -l file": lambda m, s: ["ls", "-l", m.path(f"{s}/table.md")],
    "stat": lambda m, s: ["stat", m.path(f"{s}/table.md")],
    "cat": lambda m, s: ["cat", m.path(f"{s}/table.md")],
    "head": lambda m, s: ["head", "-n", "1", m.path(f"{s}/sub/deep.md")],
    "find": lambda m, s: ["find", m.path(s), "-type", "f"],
    "rg": lambda m, s: [RG, "-l", "zebra-42", m.path(s)],
    "getfattr": lambda m, s: ["getfattr", "-n", "user.memfs.digest", m.path(f"{s}/table.md")],
    "cd": lambda m, s: ["sh", "-c", f"cd {m.path(s)}/sub && cat deep.md"],
}

WRITE_TOOLS: dict[str, Any] = {
    "redirect": lambda m, s: ["sh", "-c", f"echo x > {m.path(s)}/table.md"],
    "append": lambda m, s: ["sh", "-c", f"echo x >> {m.path(s)}/table.md"],
    "touch new": lambda m, s: ["touch", m.path(f"{s}/new.md")],
    "touch existing": lambda m, s: ["touch", m.path(f"{s}/table.md")],
    "cp": lambda m, s: ["cp", "/etc/hostname", m.path(f"{s}/copied")],
    "mkdir": lambda m, s: ["mkdir", m.path(f"{s}/newdir")],
    "rm": lambda m, s: ["rm", m.path(f"{s}/table.md")],
    "rmdir": lambda m, s: ["rmdir", m.path(f"{s}/sub")],
    "mv": lambda m, s: ["mv", m.path(f"{s}/table.md"), m.path(f"{s}/moved.md")],
    "chmod": lambda m, s: ["chmod", "666", m.path(f"{s}/table.md")],
    "ln -s": lambda m, s: ["ln", "-s", "/etc/passwd", m.path(f"{s}/link")],
    "ln": lambda m, s: ["ln", m.path(f"{s}/table.md"), m.path(f"{s}/hard")],
    "truncate": lambda m, s: ["truncate", "-s", "0", m.path(f"{s}/table.md")],
    "mkfifo": lambda m, s: ["mkfifo", m.path(f"{s}/fifo")],
    "setfattr": lambda m, s: ["setfattr", "-n", "user.memfs.seen", "-v", "x",
                              m.path(f"{s}/table.md")],
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("tool", sorted(READ_TOOLS))
def test_read_tools(table: Mounted, kind: str, tool: str) -> None:
    uid, store = KINDS[kind]
    done = run_as(uid, READ_TOOLS[tool](table, store))
    if kind in VISIBLE:
        assert done.returncode == 0, done.stderr
        if tool in ("cat", "rg", "find", "head", "cd", "getfattr", "ls"):
            expected = {"cat": b"zebra-42", "head": b"zebra-42", "cd": b"zebra-42",
                        "rg": b"table.md", "find": b"deep.md", "ls": b"table.md",
                        "getfattr": b"user.memfs.digest="}[tool]
            assert expected in done.stdout
    else:
        assert done.returncode != 0
        assert b"zebra" not in done.stdout and b"table.md" not in done.stdout
        assert b"No such file or directory" in done.stderr or b"can't cd" in done.stderr


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("tool", sorted(WRITE_TOOLS))
def test_write_tools_fail(table: Mounted, kind: str, tool: str) -> None:
    uid, store = KINDS[kind]
    done = run_as(uid, WRITE_TOOLS[tool](table, store))
    assert done.returncode != 0, done
    if kind in VISIBLE:
        assert b"Read-only file system" in done.stderr, done.stderr
    else:  # dash says "Directory nonexistent" for ENOENT
        assert (b"No such file or directory" in done.stderr
                or b"nonexistent" in done.stderr), done.stderr


# -- Python calls -------------------------------------------------------------------

READ_CALLS = {
    "listdir": ("listdir", "{s}"),
    "listdir sub": ("listdir", "{s}/sub"),
    "stat": ("stat", "{s}/table.md"),
    "read": ("read", "{s}/table.md"),
    "read deep": ("read", "{s}/sub/deep.md"),
    "getxattr": ("getxattr", "{s}/table.md", "user.memfs.digest"),
    "listxattr": ("listxattr", "{s}/table.md"),
    "access_r": ("access_r", "{s}/table.md"),
}
WRITE_CALLS = {
    "open O_WRONLY": ("open_w", "{s}/table.md"),
    "open O_RDWR": ("open_rw", "{s}/table.md"),
    "open O_APPEND": ("open_append", "{s}/table.md"),
    "open O_TRUNC": ("open_trunc", "{s}/table.md"),
    "create": ("create", "{s}/created.md"),
    "truncate": ("truncate", "{s}/table.md"),
    "mkdir": ("mkdir", "{s}/made"),
    "rmdir": ("rmdir", "{s}/sub"),
    "unlink": ("unlink", "{s}/table.md"),
    "rename": ("rename", "{s}/table.md", "{s}/renamed.md"),
    "chmod": ("chmod", "{s}/table.md"),
    "chown": ("chown", "{s}/table.md"),
    "utime": ("utime", "{s}/table.md"),
    "symlink": ("symlink", "{s}/sym"),
    "link": ("link", "{s}/table.md", "{s}/hard"),
    "mkfifo": ("mkfifo", "{s}/fifo"),
    "setxattr": ("setxattr", "{s}/table.md"),
    "removexattr": ("removexattr", "{s}/table.md"),
}


def _call(mounted: Mounted, store: str, spec: tuple[str, ...]) -> list[str]:
    return [spec[0], *(str(mounted.mount) + "/" + a.format(s=store) for a in spec[1:2]),
            *(a if "{s}" not in a else str(mounted.mount) + "/" + a.format(s=store)
              for a in spec[2:])]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_python_calls(table: Mounted, kind: str) -> None:
    uid, store = KINDS[kind]
    names = [*READ_CALLS, *WRITE_CALLS]
    specs = [*READ_CALLS.values(), *WRITE_CALLS.values()]
    results = dict(zip(names, probe(uid, [_call(table, store, s) for s in specs]), strict=True))
    for name in READ_CALLS:
        result = results[name]
        if kind in VISIBLE:
            assert "ok" in result, (name, result)
        elif name == "access_r":  # os.access reports failure as False
            assert result == {"ok": False}
        else:
            assert result == {"errno": "ENOENT"}, (name, result)
    if kind in VISIBLE:
        assert results["read"]["ok"] == CONTENT.decode()
        assert results["listdir"]["ok"] == ["sub", "table.md"]
        assert results["stat"]["ok"]["size"] == len(CONTENT)
        assert int(results["stat"]["ok"]["mode"], 8) == stat.S_IFREG | 0o444
        assert results["listxattr"]["ok"] == ["user.memfs.digest", "user.memfs.seen"]
        assert len(results["getxattr"]["ok"]) == 64
    for name in WRITE_CALLS:
        expected = "EROFS" if kind in VISIBLE else "ENOENT"
        assert results[name] == {"errno": expected}, (name, results[name])


@pytest.mark.parametrize(("uid", "expected"), [
    (UID_A, ["notes", "ops"]),
    (UID_C, ["notes"]),
    (UID_UNKNOWN, []),
    (0, []),  # root is a delegate on the socket, not an agent: it sees nothing here
])
def test_root_lists_exactly_the_agents_stores(table: Mounted, uid: int,
                                              expected: list[str]) -> None:
    assert probe(uid, [["listdir", str(table.mount)]]) == [{"ok": expected}]
    # the secret store, attached to nobody, is never reachable
    assert probe(uid, [["stat", table.path("secret")]]) == [{"errno": "ENOENT"}]


def test_write_access_check(table: Mounted) -> None:
    results = probe(UID_A, [["access_w", table.path("notes/table.md")],
                            ["access_r", table.path("notes/table.md")]])
    assert results == [{"ok": False}, {"ok": True}]


def test_attributes(table: Mounted) -> None:
    st = probe(UID_C, [["stat", table.path("notes")], ["stat", table.path("notes/sub")],
                       ["stat", table.path("notes/table.md")]])
    assert [int(r["ok"]["mode"], 8) for r in st] == [
        stat.S_IFDIR | 0o555, stat.S_IFDIR | 0o555, stat.S_IFREG | 0o444]
    assert all(r["ok"]["uid"] == 0 for r in st)


def test_unknown_xattr_is_enodata(table: Mounted) -> None:
    results = probe(UID_A, [["getxattr", table.path("notes/table.md"), "user.other"],
                            ["listxattr", table.path("notes/sub")],
                            ["getxattr", table.path("notes/sub"), "user.memfs.digest"]])
    assert results == [{"errno": "ENODATA"}, {"ok": []}, {"errno": "ENODATA"}]


# -- things planted in the backing directory ----------------------------------------

def test_planted_specials_are_hidden_and_never_block(mounted: Mounted) -> None:
    store = mounted.backing("notes/planted")
    plant(store / "real.md", b"real\n")
    os.symlink("/etc/passwd", store / "passwd-link")
    os.symlink("../../ops", store / "ops-link")  # a symlinked directory to another store
    os.symlink(str(mounted.root / "state"), store / "state-link")
    os.mkfifo(store / "fifo")
    os.mknod(store / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(store / "sock"))
    sock.close()
    # hard links planted by root: to a file of another store and to a root-only file
    plant(mounted.backing("ops") / "linked.md", b"OPS-ONLY-CONTENT\n")
    private = mounted.base / "root-only"
    private.write_bytes(b"ROOT-ONLY-CONTENT\n")
    private.chmod(0o600)
    os.link(mounted.backing("ops") / "linked.md", store / "ops-hardlink")
    os.link(private, store / "private-hardlink")
    try:
        listing = probe(UID_C, [["listdir", mounted.path("notes/planted")]])
        assert listing == [{"ok": ["real.md"]}]
        names = ["passwd-link", "ops-link", "state-link", "fifo", "null", "sock",
                 "ops-hardlink", "private-hardlink"]
        results = probe(UID_C, [["read", mounted.path(f"notes/planted/{n}")] for n in names])
        assert results == [{"errno": "ENOENT"}] * len(names)
        # real tools: nothing outside the store, nothing blocks (run_as has a timeout)
        done = run_as(UID_C, ["find", mounted.path("notes/planted")], timeout=20)
        assert done.stdout.decode().split() == [mounted.path("notes/planted"),
                                                 mounted.path("notes/planted/real.md")]
        done = run_as(UID_C, [RG, "-L", "root:", mounted.path("notes")], timeout=20)
        assert done.returncode == 1 and b"root:" not in done.stdout
        done = run_as(UID_C, [RG, "-uuu", "ONLY-CONTENT", mounted.path("notes")], timeout=20)
        assert done.returncode == 1 and done.stdout == b""
        assert "user.memfs.version" not in os.listxattr(private)  # never stamped
        done = run_as(UID_C, ["cat", mounted.path("notes/planted/fifo")], timeout=20)
        assert done.returncode == 1
        done = run_as(UID_C, ["ls", "-R", str(mounted.mount)], timeout=20)
        assert b"seen" not in done.stdout and b"staging" not in done.stdout
        for hidden in ("state", "stores", "secret", "notes/../ops", "notes/planted/null"):
            assert probe(UID_C, [["stat", f"{mounted.mount}/{hidden}"]]) == [
                {"errno": "ENOENT"}], hidden
    finally:
        shutil.rmtree(store)
        (mounted.backing("ops") / "linked.md").unlink()


def test_dotdot_never_leaves_the_mount(mounted: Mounted) -> None:
    # ".." of the mount root is the directory holding the mount, as for any mount;
    # ".." of a store is the mount root, whose listing is still per agent.
    results = probe(UID_C, [["listdir", mounted.path("notes/..")],
                            ["stat", mounted.path("notes/../ops")]])
    assert results == [{"ok": ["notes"]}, {"errno": "ENOENT"}]
    assert errno.ENOENT  # documented choice: invisible stores are ENOENT
