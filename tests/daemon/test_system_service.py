"""The system service (docs/operate/install.md, "As a system service"): the unit
scripts/install writes
scores at most 3.0 in ``systemd-analyze security`` and verifies; the daemon it runs
(``memfs serve --await-mount``), in a mount namespace of its own and under the unit's
seccomp filters, serves a mount that root attaches from outside (``memfs attach``)
and that agents on the host use, and ``memfs detach`` leaves no mount once it is dead.
``memfs attach`` refuses any process but such a daemon, and anyone but root."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import (
    MEMFS,
    PYTHON,
    REPO,
    UID_A,
    Daemon,
    connect_as,
    daemon_ids,
    public_tmpdir,
    run_as,
    scaled,
    standard_config,
)

SANDBOX = Path(__file__).resolve().parent / "unit_sandbox.py"
NO_CAPABILITIES = "0000000000000000"
# What of the unit's namespace a test can mirror without systemd: a mount namespace
# (slave, as systemd makes it), /proc showing processes only (ProcSubset=pid), /usr
# and /etc read-only (ProtectSystem=); the root stays in /tmp, so no PrivateTmp=.
NAMESPACE = ('mount -t proc -o subset=pid proc /proc && mount --bind -o ro /usr /usr '
             '&& mount --bind -o ro /etc /etc && exec "$@"')


def install_unit(where: Path) -> Path:
    """The unit scripts/install writes, its commands pointing at this checkout's memfs."""
    done = subprocess.run(
        ["scripts/install", "--unit-only", "--unitdir", str(where), "--bindir",
         str(REPO / ".venv" / "bin"), "--sysconfdir", str(where)],
        capture_output=True, text=True, cwd=REPO, timeout=scaled(60))
    assert done.returncode == 0, done.stderr
    return where / "memfs.service"


def analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd)")
    return found


def test_the_installed_unit_scores_at_most_3_and_verifies(tmp_path: Path) -> None:
    unit = install_unit(tmp_path)
    text = unit.read_text()
    assert f"ExecStart={REPO}/.venv/bin/memfs serve --await-mount --config " \
        f"{tmp_path}/memfs.toml" in text
    assert f"ExecStartPost=+{REPO}/.venv/bin/memfs attach --config {tmp_path}/memfs.toml " \
        "--pid $MAINPID" in text
    assert "\nUser=memfs\n" in text and "\nCapabilityBoundingSet=\n" in text
    security = subprocess.run([analyze(), "security", "--offline=true", str(unit)],
                              capture_output=True, text=True, timeout=scaled(120))
    found = re.search(r"Overall exposure level for memfs\.service: (\d+\.\d+)",
                      security.stdout)
    assert found is not None, security
    assert float(found.group(1)) <= 3.0, security.stdout
    verify = subprocess.run([analyze(), "verify", str(unit)], capture_output=True, text=True,
                            timeout=scaled(120))
    assert verify.returncode == 0 and not verify.stdout.strip() \
        and not verify.stderr.strip(), verify


def status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return dict(line.partition(":\t")[::2] for line in text.splitlines())


def mount_type(path: Path) -> str | None:
    from memfs.fuse.mount import mount_type

    return mount_type(path)


def memfs_root(*args: str) -> subprocess.CompletedProcess[str]:
    """``memfs attach`` or ``memfs detach`` as root, in the host's mount namespace."""
    return subprocess.run([*MEMFS, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=scaled(60))


@pytest.mark.parametrize("as_memfs", [pytest.param(False, id="drops-root"),
                                      pytest.param(True, id="as-memfs")])
def test_the_service_mount_is_attached_from_outside(as_memfs: bool) -> None:
    """Started as the unit starts it (the memfs user, no_new_privs) or as root, which
    then drops to the memfs user."""
    unit = install_unit(public_tmpdir())  # readable by the daemon's user
    config = standard_config(public_tmpdir())
    uid, gid = daemon_ids()
    user: list[str] = []
    if as_memfs:
        os.chown(Path(config["root"]).parent, uid, gid)  # it makes its root and socket
        user = ["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups",
                "--no-new-privs"]
    wrapper = ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", NAMESPACE,
               "sh", *user, PYTHON, str(SANDBOX), str(unit), "--"]
    daemon = Daemon(config, await_mount=True, wrapper=wrapper)
    config_path = str(daemon.config_path)
    # only root, and only for a daemon of the service user with a session to mount
    # (asked before the daemon starts: it waits ATTACH_SECONDS for its attach, which
    # three CLI runs under emulation can take)
    refused = run_as(UID_A, [*MEMFS, "attach", "--config", config_path, "--pid",
                             str(os.getpid())], cwd=REPO)
    assert refused.returncode == 1 and b"must run as root" in refused.stderr, refused
    refused_ = memfs_root("attach", "--config", config_path, "--pid", str(os.getpid()))
    assert refused_.returncode == 1 and "does not run as the service user" in \
        refused_.stderr, refused_.stderr
    daemon.start()
    try:
        assert daemon.proc is not None
        pid = daemon.proc.pid
        assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        assert mount_type(daemon.mountpoint) is None  # it mounts nothing itself

        attached = memfs_root("attach", "--config", config_path, "--pid", str(pid))
        assert attached.returncode == 0, attached.stderr
        assert mount_type(daemon.mountpoint) == "fuse.memfs"
        again = memfs_root("attach", "--config", config_path, "--pid", str(pid))
        assert again.returncode == 1 and "mounted already" in again.stderr, again.stderr

        with connect_as(UID_A, daemon.socket) as alice:
            alice.write("notes/served.md", "attached from outside\n")
            assert alice.search(["attached", "notes"])["exit_code"] == 0  # jailed rg
            alice.edit("notes/served.md", ["s/outside/the host/"])  # jailed sed
        path = daemon.mountpoint / "notes" / "served.md"
        shown = run_as(UID_A, ["cat", str(path)])
        assert shown.stdout == b"attached from the host\n", shown
        digest = run_as(UID_A, [PYTHON, "-c", "import os, sys; print(os.getxattr(sys.argv[1], "
                                "'user.memfs.digest').decode())", str(path)], cwd=REPO)
        with connect_as(UID_A, daemon.socket) as alice:
            assert digest.stdout.decode().strip() == alice.stat("notes/served.md")["digest"]
            # the read through the mount counted: a write on it is no conflict
            alice.write("notes/served.md", "read, then written\n")

        mine = status(pid)
        assert mine["Uid"].split() == [str(uid)] * 4 and mine["Gid"].split() == [str(gid)] * 4
        for capabilities in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            assert mine[capabilities] == NO_CAPABILITIES, (capabilities, mine[capabilities])
        assert mine["NoNewPrivs"] == "1" and mine["Seccomp"] == "2"
        assert "killed" not in daemon.log()

        daemon.kill()  # the mount outlives its daemon, dead, until `memfs detach`
        assert mount_type(daemon.mountpoint) == "fuse.memfs"
        detached = memfs_root("detach", "--config", config_path)
        assert detached.returncode == 0 and "unmounted" in detached.stderr, detached.stderr
        assert mount_type(daemon.mountpoint) is None
        assert memfs_root("detach", "--config", config_path).returncode == 0  # nothing there
    finally:
        if daemon.alive():
            daemon.kill()
        if mount_type(daemon.mountpoint) is not None:
            os.system(f"umount -l {daemon.mountpoint}")


def test_detach_leaves_a_mount_that_is_not_memfs_alone() -> None:
    config = standard_config(public_tmpdir())
    daemon = Daemon(config)  # writes the config; not started
    point = daemon.mountpoint
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "other", str(point)], check=True)
    try:
        done = memfs_root("detach", "--config", str(daemon.config_path))
        assert done.returncode == 1 and "a tmpfs mount, not memfs's" in done.stderr, done
        assert mount_type(point) == "tmpfs"
    finally:
        subprocess.run(["umount", str(point)], check=True)
