"""The mount of a personal memory: one view per agent, ``MOUNT/AGENT/STORE/...``. The
owner's uid runs every agent, so the path says who reads: a read through claude's view
is claude's (its seen record, its "changed since"), never codex's; a search through
it is still no read; no other uid sees anything (memfs/fuse/view.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.control.client import Client
from tests.daemon.test_personal import personal_config
from tests.fuse.conftest import RG, digest, probe
from tests.support import (
    UID_A,
    UID_B,
    Daemon,
    connect_as,
    memfs_as,
    public_tmpdir,
    run_as,
    scaled,
)


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(personal_config(public_tmpdir("memfs-personal-mount-")), mount=True) as running:
        yield running


def mount(daemon: Daemon) -> Path:
    return Path(daemon.config["mount"])


def agent(daemon: Daemon, name: str) -> Client:
    return connect_as(UID_A, daemon.socket, as_agent=name)


def seen(daemon: Daemon, view: str, rel: str) -> str:
    (result,) = probe(UID_A, [["getxattr", str(mount(daemon) / view / rel),
                               "user.memfs.seen"]])
    assert "ok" in result, result
    return str(result["ok"])


def test_the_root_lists_the_agents_and_each_holds_every_store(daemon: Daemon) -> None:
    for name in ("view-a", "view-b"):
        with agent(daemon, name) as client:
            client.list()
    listing, stores, missing = probe(UID_A, [
        ["listdir", str(mount(daemon))], ["listdir", str(mount(daemon) / "view-a")],
        ["listdir", str(mount(daemon) / "never-used")]])
    assert {"view-a", "view-b"} <= set(listing["ok"])
    assert stores == {"ok": ["notes"]}
    assert missing == {"errno": "ENOENT"}  # a lookup registers nothing


def test_a_read_through_an_agents_view_is_that_agents_read(daemon: Daemon) -> None:
    with agent(daemon, "reader") as reader, agent(daemon, "other") as other:
        reader.write("notes/shared.md", b"v1\n")
        other.list()
        other.read("notes/shared.md")
        other.write("notes/shared.md", b"v2 by other\n")
        # reader's copy is stale; reading it through *other*'s view changes nothing
        assert run_as(UID_A, ["cat", str(mount(daemon) / "other/notes/shared.md")]
                      ).stdout == b"v2 by other\n"
        assert seen(daemon, "reader", "notes/shared.md") == digest(b"v1\n")
        done = memfs_as(UID_A, daemon.socket, "--agent", "reader", "write", "notes/shared.md",
                        input=b"v3 by reader\n")
        assert done.returncode == 3, done.stderr
        # through its own view it is reader's read: the write is accepted
        assert run_as(UID_A, ["cat", str(mount(daemon) / "reader/notes/shared.md")]
                      ).stdout == b"v2 by other\n"
        assert seen(daemon, "reader", "notes/shared.md") == digest(b"v2 by other\n")
        done = memfs_as(UID_A, daemon.socket, "--agent", "reader", "write", "notes/shared.md",
                        input=b"v3 by reader\n")
        assert done.returncode == 0, done.stderr


def test_a_search_through_a_view_is_no_read(daemon: Daemon) -> None:
    with agent(daemon, "searcher") as searcher, agent(daemon, "writer") as writer:
        writer.write("notes/scan/a.md", b"timeout one\n")
        searcher.list()
    done = run_as(UID_A, [RG, "-l", "timeout", str(mount(daemon) / "searcher/notes/scan")])
    assert done.returncode == 0 and b"a.md" in done.stdout, done.stderr
    assert seen(daemon, "searcher", "notes/scan/a.md") == ""
    blind = memfs_as(UID_A, daemon.socket, "--agent", "searcher", "write", "notes/scan/a.md",
                     input=b"overwrite\n")
    assert blind.returncode == 3, blind.stderr


def test_a_commit_is_seen_at_once_through_every_view(daemon: Daemon) -> None:
    with agent(daemon, "fresh-a") as one, agent(daemon, "fresh-b") as other:
        one.write("notes/fresh.md", b"first\n")
        other.list()
        for view in ("fresh-a", "fresh-b"):  # both views cache the file now
            assert run_as(UID_A, ["cat", str(mount(daemon) / view / "notes/fresh.md")]
                          ).stdout == b"first\n"
        one.write("notes/fresh.md", b"second, longer\n")
        for view in ("fresh-a", "fresh-b"):
            path = str(mount(daemon) / view / "notes/fresh.md")
            assert run_as(UID_A, ["cat", path]).stdout == b"second, longer\n"
            (size,) = probe(UID_A, [["stat", path]])
            assert size["ok"]["size"] == len(b"second, longer\n")


def test_no_other_uid_sees_anything(daemon: Daemon) -> None:
    with agent(daemon, "private") as client:
        client.write("notes/private.md", b"mine\n")
    root, view, file = probe(UID_B, [
        ["listdir", str(mount(daemon))], ["listdir", str(mount(daemon) / "private")],
        ["read", str(mount(daemon) / "private/notes/private.md")]])
    # the mount is the owner's alone (no allow_other): the kernel refuses every other uid
    assert root == view == file == {"errno": "EACCES"}
    listed = run_as(0, ["ls", str(mount(daemon))])
    assert listed.returncode != 0 and listed.stdout == b"", listed


def fuse_lookups(url: str, token: str) -> float:
    """memfs_fuse_requests_total{handler="lookup"} (the daemon's own count)."""
    import httpx

    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"},
                     timeout=scaled(60)).text
    for line in text.splitlines():
        if line.startswith('memfs_fuse_requests_total{handler="lookup"}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(text)


def test_the_owners_walks_through_an_agents_view_are_cached() -> None:
    """Mounted for the owner alone (no allow_other), an agent's directory is cached by
    the kernel like anything deeper: reading one file again and again sends no LOOKUP
    of it (in system mode a store's directory is looked up on every walk, per uid)."""
    base = public_tmpdir("memfs-personal-cached-")
    config = personal_config(base, http={"listen": "127.0.0.1:0"})
    with Daemon(config, mount=True) as running:
        with agent(running, "walker") as client:
            client.write("notes/walked.md", b"walk\n")
        made = memfs_as(UID_A, running.socket, "token", "create", "walker")
        assert made.returncode == 0, made.stderr
        token = made.stdout.decode().strip()
        path = str(Path(config["mount"]) / "walker" / "notes" / "walked.md")
        assert run_as(UID_A, ["cat", path]).stdout == b"walk\n"  # the walk, once
        before = fuse_lookups(running.http_url, token)
        for _ in range(20):
            assert run_as(UID_A, ["cat", path]).stdout == b"walk\n"
        assert fuse_lookups(running.http_url, token) - before < 5
