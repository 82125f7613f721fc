"""Each store's history pushed to its mirrors in the background, against real remotes:
a bare repository through file:// and a real ``git daemon`` on loopback. A mirror that
is down, a push held in the middle, a daemon killed mid-push, a remote that diverged:
every write is acknowledged and committed whatever the mirror does, the mirror catches
up (commits behind back to 0, the remote's main the store's main), and a remote with
another history is reported and never overwritten."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.store.history.gitcheck import assert_valid_git, commits
from tests.store.mirror.remotes import (
    GitDaemon,
    HeldPush,
    as_owner,
    bare_repository,
    converged,
    fsck,
    local_main,
    log_of,
    main_of,
    mirror_status,
    mirrored,
    wait_for,
    write_many,
)
from tests.support import (
    UID_A,
    UID_B,
    UID_C,
    Daemon,
    connect_as,
    daemon_ids,
    memfs_as,
    named,
)


def test_commits_reach_the_mirror_and_status_says_so(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    config = mirrored(base, f"file://{remote}")
    with Daemon(config) as daemon:
        write_many(daemon, 5, "a")
        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/sub/deep.md", "deep\n")
            alice.delete("notes/a-0.md")
        status = wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")
        assert status[0]["url"] == f"file://{remote}" and status[0]["last_success"]
        assert main_of(remote) == local_main(daemon) == status[0]["head"]
        assert log_of(remote) == [f"{c.id} {c.author.name} {c.message.splitlines()[0]}"
                                  for c in commits(Path(config["root"]), "notes")]
        assert mirror_status(daemon.socket) == status  # the stores alice reads with mirrors
    fsck(remote)
    assert_valid_git(Path(config["root"]), "notes")
    with Daemon(config) as daemon:  # right after a restart, from the state file
        again = mirror_status(daemon.socket, "notes")
        assert again[0]["state"] == "ok" and again[0]["commits_behind"] == 0
        assert again[0]["last_success"] == status[0]["last_success"]


def test_a_mirror_down_for_a_while_catches_up_and_no_write_waits_for_it(base: Path) -> None:
    bare_repository(base / "served" / "notes.git")
    with GitDaemon(base / "served") as remote:
        config = mirrored(base, remote.url("notes.git"))
        with Daemon(config) as daemon:
            write_many(daemon, 1, "before")
            wait_for(lambda: converged(daemon.socket, "notes"), "the first push")
            remote.stop()
            made = write_many(daemon, 12, "down")  # each one acknowledged with its commit
            assert [str(c.id) for c in commits(Path(config["root"]), "notes")[:12]] \
                == made[::-1]

            def down() -> dict[str, Any] | None:
                found = mirror_status(daemon.socket, "notes")[0]
                return found if found["state"] == "down" and found["retry_at"] else None

            seen = wait_for(down, "a failed push")
            assert seen["commits_behind"] >= 1 and seen["last_error"]
            write_many(daemon, 3, "still-down")
            assert mirror_status(daemon.socket, "notes")[0]["commits_behind"] >= 3
            remote.start()
            wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")
            assert main_of(base / "served" / "notes.git") == local_main(daemon)
    fsck(base / "served" / "notes.git")


def test_writes_go_on_while_a_push_is_held_in_the_middle(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    held = HeldPush(remote)
    config = mirrored(base, f"file://{remote}")
    with Daemon(config) as daemon:
        write_many(daemon, 1, "first")
        held.wait_arrived()
        assert mirror_status(daemon.socket, "notes")[0]["pushing"]
        made = write_many(daemon, 20, "meanwhile")
        assert len(set(made)) == 20
        found = mirror_status(daemon.socket, "notes")[0]
        assert found["pushing"] and found["commits_behind"] == 21  # still the first push
        assert main_of(remote) is None
        held.release()
        wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")
        assert main_of(remote) == local_main(daemon) == made[-1]
        assert held.pushes() == 2  # the 20 commits made meanwhile went in one push
    fsck(remote)


def test_a_daemon_killed_mid_push_converges_after_a_restart(base: Path) -> None:
    bare_repository(base / "served" / "notes.git")
    remote_path = base / "served" / "notes.git"
    held = HeldPush(remote_path)
    with GitDaemon(base / "served") as remote:
        config = mirrored(base, remote.url("notes.git"))
        daemon = Daemon(config).start()
        try:
            write_many(daemon, 3, "before")
            held.wait_arrived()  # the pack is at the remote, main not yet moved there
            assert _pushes_to(remote.url("notes.git"))
            daemon.kill()  # SIGKILL, mid-push
            # the push dies with the daemon: no git of its is left running
            wait_for(lambda: not _pushes_to(remote.url("notes.git")),
                     "the killed daemon's git push to end")
        finally:
            if daemon.alive():
                daemon.kill()
        held.release()
        with Daemon(config) as daemon:
            write_many(daemon, 2, "after")
            wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")
            assert main_of(remote_path) == local_main(daemon)
    fsck(remote_path)
    assert_valid_git(Path(config["root"]), "notes")


def _pushes_to(url: str) -> list[int]:
    """Processes running ``git push`` to ``url`` (a test's own remote)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"push" in argv and url.encode() in argv:
            found.append(int(entry))
    return found


def test_a_remote_that_diverged_is_reported_and_never_overwritten(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    config = mirrored(base, f"file://{remote}")
    with Daemon(config) as daemon:
        write_many(daemon, 2, "ours")
        wait_for(lambda: converged(daemon.socket, "notes"), "the first push")
        theirs = _push_another_history(base, remote)
        write_many(daemon, 1, "after")

        def diverged() -> dict[str, Any] | None:
            found = mirror_status(daemon.socket, "notes")[0]
            return found if found["state"] == "diverged" else None

        found = wait_for(diverged, "the push to be refused")
        assert "never overwritten" in found["last_error"]
        assert found["remote_head"] == theirs  # learnt from the remote, not a commit of ours
        assert found["commits_behind"] == len(commits(Path(config["root"]), "notes"))
        assert main_of(remote) == theirs
        # asked for, the push is tried again: refused again, exit 7 (mirror_failed)
        done = memfs_as(UID_A, daemon.socket, "--json", "mirror", "push", "notes")
        assert done.returncode == 7, done.stderr
        assert b"mirror failed" in done.stderr and b"diverged" in done.stderr
        assert main_of(remote) == theirs
        assert "diverged" in daemon.log()
    fsck(remote)


def _push_another_history(base: Path, remote: Path) -> str:
    """Someone else force-pushes an unrelated history to the remote's main; its id."""
    work = base / "someone-else"
    work.mkdir()
    os.chown(work, *daemon_ids())
    as_owner("git", "init", "--quiet", "--initial-branch=main", str(work))
    (work / "theirs.md").write_text("another history\n")
    os.chown(work / "theirs.md", *daemon_ids())
    for argv in (["add", "theirs.md"],
                 ["-c", "user.name=someone", "-c", "user.email=s@example.org", "commit",
                  "--quiet", "-m", "another history"],
                 ["push", "--quiet", "--force", str(remote), "main:main"]):
        as_owner("git", "-C", str(work), *argv)
    theirs = main_of(remote)
    assert theirs is not None
    return theirs


def test_who_may_see_and_push(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    config = mirrored(base, f"file://{remote}")
    with Daemon(config) as daemon:
        write_many(daemon, 1, "x")
        wait_for(lambda: converged(daemon.socket, "notes"), "the first push")
        # carol reads notes: she sees its mirror, but may not push it (exit 4)
        assert [m["store"] for m in mirror_status(daemon.socket, uid=UID_C)] == ["notes"]
        assert memfs_as(UID_C, daemon.socket, "mirror", "push", "notes").returncode == 4
        assert memfs_as(UID_C, daemon.socket, "mirror", "push").returncode == 5  # none
        # bob writes notes: a push up to date is a success (exit 0)
        pushed = memfs_as(UID_B, daemon.socket, "--json", "mirror", "push")
        assert pushed.returncode == 0, pushed.stderr
        assert json.loads(pushed.stdout)["mirrors"][0]["state"] == "ok"
        # a store carol is not attached to is not found, as one that does not exist
        assert memfs_as(UID_C, daemon.socket, "mirror", "status", "secret").returncode == 5
        assert memfs_as(UID_A, daemon.socket, "mirror", "status", "ops").returncode == 5
        assert memfs_as(UID_A, daemon.socket, "mirror", "status", "nope").returncode == 5
        assert memfs_as(0, daemon.socket, "--as", "alice", "mirror", "push").returncode == 0


def test_two_daemons_on_one_root_never_push_at_once(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    overlaps = base / "overlaps"
    hook = remote / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    # a push that finds another one inside the hook notes it; each stays a moment
    hook.write_text(f"""#!/bin/sh
cat >/dev/null
if mkdir {remote}/in-push 2>/dev/null; then sleep 0.2; rmdir {remote}/in-push
else echo overlap >> {overlaps}; fi
exit 0
""")
    hook.chmod(0o755)
    os.chown(hook, *daemon_ids())
    first = mirrored(base, f"file://{remote}")
    second = {**first, "socket": str(base / "second.sock"), "mount": str(base / "memory2")}
    with Daemon(first) as one, Daemon(second) as two:
        for round_ in range(6):
            write_many(one, 2, f"one-{round_}")
            write_many(two, 2, f"two-{round_}")
        wait_for(lambda: converged(one.socket, "notes"), "the mirror to catch up")
        assert converged(two.socket, "notes")
        assert main_of(remote) == local_main(one)
    assert not overlaps.exists(), overlaps.read_text()
    fsck(remote)


def test_stopping_ends_a_push_under_way(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    held = HeldPush(remote)
    config = mirrored(base, f"file://{remote}")
    daemon = Daemon(config).start()
    try:
        write_many(daemon, 1, "x")
        held.wait_arrived()
        assert daemon.stop(signal.SIGTERM) == 0  # not held up by the push
    finally:
        held.release()
        if daemon.alive():
            daemon.kill()
    # a push the daemon ended is no failure of the mirror: nothing is recorded of it
    state = Path(config["root"]) / "state" / "mirrors" / "notes.json"
    assert not state.exists() or json.loads(state.read_text())["mirrors"][
        f"file://{remote}"]["failures"] == 0
    assert "is down" not in daemon.log()
    with Daemon(config) as daemon:  # the next start pushes it
        wait_for(lambda: converged(daemon.socket, "notes"), "the mirror to catch up")


def _refused(socket_path: Path) -> dict[str, Any] | None:
    found = mirror_status(socket_path, "notes")[0]
    return found if found["state"] == "refused" else None


def _daemon_user() -> str:
    import pwd
    uid = daemon_ids()[0]
    return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"


def _refused_for_access_then_fixed(base: Path, remote: Path, said: str, fix: Any) -> None:
    """A push to ``remote`` is refused for the daemon user's access: the state is
    refused (not down), the error says ``said`` first and names the daemon's user, the
    next try is minutes away and commits meanwhile do not bring it closer; once
    ``fix()`` ran, a push asked for brings the mirror up to date."""
    config = mirrored(base, f"file://{remote}")
    with Daemon(config) as daemon:
        write_many(daemon, 1, "x")
        found = wait_for(lambda: _refused(daemon.socket), "the push to be refused")
        assert found["last_error"].startswith(said), found["last_error"]
        assert f"the daemon's user {_daemon_user()}" in found["last_error"]
        assert found["retry_at"] - found["last_attempt"] >= 0.9 * 300  # not hammered
        write_many(daemon, 3, "meanwhile")  # each commit wakes the pusher: no retry
        wait_for(lambda: mirror_status(daemon.socket, "notes")[0]["commits_behind"] >= 4,
                 "the commits to be counted")
        time.sleep(2)  # a pusher woken would have pushed after a second
        assert mirror_status(daemon.socket, "notes")[0]["last_attempt"] \
            == found["last_attempt"]
        assert "refused" in daemon.log() and "is down" not in daemon.log()
        done = memfs_as(UID_A, daemon.socket, "mirror", "push", "notes")  # asked for
        assert done.returncode == 7 and said.encode() in done.stderr, done.stderr
        fix()
        done = memfs_as(UID_A, daemon.socket, "--json", "mirror", "push", "notes")
        assert done.returncode == 0, done.stderr
        assert main_of(remote) == local_main(daemon)
    fsck(remote)


def test_a_remote_owned_by_another_user_is_refused_and_says_whose_access(
        base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    other = named(UID_B)  # a real user of this machine, not the daemon's
    _chown_tree(remote, other, other)
    _refused_for_access_then_fixed(base, remote, "detected dubious ownership",
                                   lambda: _chown_tree(remote, *daemon_ids()))


def test_a_read_only_remote_is_refused_and_says_whose_access(base: Path) -> None:
    remote = bare_repository(base / "remotes" / "notes.git")
    subprocess.run(["chmod", "-R", "a-w", str(remote)], check=True)
    _refused_for_access_then_fixed(
        base, remote, "remote unpack failed: unable to create temporary object directory",
        lambda: subprocess.run(["chmod", "-R", "u+w", str(remote)], check=True))


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    subprocess.run(["chown", "-R", f"{uid}:{gid}", str(path)], check=True)
