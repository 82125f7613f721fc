"""The system service run by systemd itself: the unit scripts/install writes, started,
killed, restarted and stopped by systemd 252 as PID 1 of a pid, mount and cgroup
namespace of the test's own, on this machine's file system (what a machine booted with
systemd does; this one's PID 1 is not systemd).

Everything of the unit holds: User=, no capability, its seccomp filters and namespaces
(as systemd builds them, not as tests/daemon/unit_sandbox.py mirrors them), Type=notify,
ExecStartPost= attaching the mount as root, Restart=, ExecStopPost= detaching it. The
test adds one drop-in, for the test machine only: no default dependencies (sysinit.target's
units would act on the host: systemd-tmpfiles empties /tmp), the checkout and the test's
folder shown read-only at their paths in the service's private /tmp (an installed
memfs lives in /usr/local), and the service's output in a file (no journald here). The
namespace has a /run, an /etc/systemd/system and a /var/lib of its own."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.daemon.test_system_service import NO_CAPABILITIES, install_unit
from tests.support import MEMFS, REPO, UID_A, daemon_ids, dump_toml, public_tmpdir, scaled

SYSTEMD = Path("/lib/systemd/systemd")
# Units that would change the host's files from inside the namespace, masked there.
MASKED = ("systemd-tmpfiles-setup.service", "systemd-tmpfiles-setup-dev.service",
          "systemd-tmpfiles-clean.service", "systemd-tmpfiles-clean.timer",
          "systemd-sysusers.service", "systemd-journald.service", "systemd-journald.socket",
          "systemd-journald-dev-log.socket", "systemd-journal-flush.service",
          "systemd-update-utmp.service", "systemd-random-seed.service")
# In the namespace: every mount shared again (slave of the host's, so nothing goes
# back), as systemd sets a booted machine up: a mount `memfs attach` makes reaches the
# service's namespace only through a shared mount.
# Its cgroups: a cgroup2 file system mounted in the namespace (whose root is the test's
# cgroup), not the host's hierarchies, whose root is the host's.
BOOT = r"""
mount --make-rshared /
umount -l /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/systemd/system
cp -r "$1"/. /run/systemd/system/
if [ -d /etc/systemd/system ]; then mount -t tmpfs -o mode=0755 tmpfs /etc/systemd/system; fi
mount --bind "$2" /var/lib
exec env container=memfs-test "$3" --system --unit=memfs-test.target --log-target=console
"""
TARGET = "[Unit]\nDescription=the test's boot target: nothing\nDefaultDependencies=no\n"


class Systemd:
    """systemd as PID 1 of new pid, mount and cgroup namespaces (slave mounts of the
    host's), in a cgroup v2 of the test's; `close` kills it and everything in the
    namespace and removes the cgroups."""

    def __init__(self, units: Path, var_lib: Path, log: Path) -> None:
        unified = cgroup2()
        assert unified is not None  # the fixture skips without
        self.top = unified / f"memfs-systemd-test-{os.getpid()}"
        self.top.mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {self.top}/cgroup.procs && exec "$@"', "sh",
             "unshare", "--pid", "--fork", "--mount", "--cgroup", "--mount-proc",
             "--propagation", "slave", "--", "sh", "-c", BOOT, "sh", str(units), str(var_lib),
             str(SYSTEMD)],
            stdin=subprocess.DEVNULL, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        self.log = log
        self.pid = self._pid_one()
        deadline = time.monotonic() + scaled(60)
        while self.ctl("is-system-running").stdout.strip() not in ("running", "degraded"):
            assert time.monotonic() < deadline, "systemd did not come up"
            time.sleep(0.1)

    def _pid_one(self) -> int:
        """Our systemd's pid, as the host sees it (unshare's child, once it is systemd)."""
        deadline = time.monotonic() + scaled(30)
        while time.monotonic() < deadline:
            for pid in Path("/proc").iterdir():
                if not pid.name.isdigit():
                    continue
                with contextlib.suppress(OSError):
                    if (pid / "exe").resolve() == SYSTEMD.resolve() and \
                            self._in_our_group(pid):
                        return int(pid.name)
            time.sleep(0.05)
        raise AssertionError("systemd did not start")

    def _in_our_group(self, pid: Path) -> bool:
        return f"/{self.top.name}" in (pid / "cgroup").read_text()

    def inside(self, argv: Sequence[str], uid: int | None = None, input: str | None = None,
               ) -> subprocess.CompletedProcess[str]:
        """``argv`` in the namespace (its mounts and pids), as root or ``uid``."""
        user = [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={uid}",
                                       "--clear-groups"]
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "--", *user,
                               *argv], input=input, capture_output=True, text=True,
                              timeout=scaled(90),
                              cwd="/", env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
                                            "LC_ALL": "C.UTF-8", "PYTHONPATH": str(REPO)})

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.inside(["systemctl", *args])

    def main_pid(self) -> int:
        return int(self.ctl("show", "-p", "MainPID", "--value", "memfs.service").stdout)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # the namespace's PID 1: all of it ends
        self.proc.wait(timeout=scaled(30))
        deadline = time.monotonic() + scaled(30)
        for path in [*sorted(self.top.rglob("*/"), key=lambda p: -len(p.parts)), self.top]:
            while path.is_dir():
                try:
                    path.rmdir()
                except OSError:  # its processes are still being reaped
                    assert time.monotonic() < deadline, f"{path} stays busy"
                    time.sleep(0.05)


def cgroup2() -> Path | None:
    """Where this machine mounts the cgroup v2 hierarchy, if it does."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    return None


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[tuple[Systemd, Path]]:
    if not SYSTEMD.exists() or shutil.which("systemctl") is None:
        pytest.skip("systemd is not installed here (apt-get install systemd)")
    if cgroup2() is None:
        pytest.skip("no cgroup v2 hierarchy here: systemd needs one in its namespace")
    where = public_tmpdir()  # the unit's config and the mount point, readable by memfs
    unit = install_unit(where)
    config = {"root": "/var/lib/memfs", "mount": str(where / "memory"),
              "socket": "/run/memfs/control.sock", "stores": {"notes": {}},
              "agents": {"alice": {"uid": UID_A, "stores": {"notes": "read_write"}}}}
    (where / "memfs.toml").write_text(dump_toml(config))
    (where / "memory").mkdir()
    units = tmp_path / "units"
    (units / "memfs.service.d").mkdir(parents=True)
    shutil.copy(unit, units / "memfs.service")
    (units / "memfs-test.target").write_text(TARGET)
    (units / "memfs.service.d" / "test.conf").write_text(
        "[Unit]\nDefaultDependencies=no\n[Service]\n"
        f"BindReadOnlyPaths={REPO} {where}\n"
        f"StandardOutput=append:{where}/service.log\n"
        f"StandardError=append:{where}/service.log\n")
    for name in MASKED:
        (units / name).symlink_to("/dev/null")
    var_lib = tmp_path / "var-lib"
    var_lib.mkdir()
    box = Systemd(units, var_lib, tmp_path / "systemd.log")
    try:
        yield box, where
    finally:
        box.close()
        for log in (box.log, where / "service.log"):  # shown when the test failed
            if log.exists():
                print(f"--- {log.name}\n{log.read_text()[-4000:]}")


def status_of(box: Systemd, pid: int) -> dict[str, str]:
    text = box.inside(["cat", f"/proc/{pid}/status"]).stdout
    return dict(line.partition(":\t")[::2] for line in text.splitlines())


def test_systemd_runs_the_unit_unprivileged_attaches_restarts_and_detaches(
        systemd: tuple[Systemd, Path]) -> None:
    box, where = systemd
    started = box.ctl("start", "memfs.service")  # returns once READY=1 and attach ran
    assert started.returncode == 0, (started.stderr, box.ctl("status", "memfs.service").stdout)
    point = where / "memory"
    assert box.inside(["findmnt", "-n", "-o", "FSTYPE", str(point)]).stdout.strip() \
        == "fuse.memfs"
    pid = box.main_pid()
    found = status_of(box, pid)
    uid, gid = daemon_ids()
    assert found["Uid"].split() == [str(uid)] * 4 and found["Gid"].split() == [str(gid)] * 4
    for capabilities in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"):
        assert found[capabilities] == NO_CAPABILITIES, (capabilities, found[capabilities])
    assert found["NoNewPrivs"] == "1" and found["Seccomp"] == "2"

    memfs = [*MEMFS, "--socket", "/run/memfs/control.sock"]
    wrote = box.inside([*memfs, "write", "notes/boot.md"], uid=UID_A,
                       input="served by systemd\n")
    assert wrote.returncode == 0, wrote.stderr
    shown = box.inside(["cat", str(point / "notes" / "boot.md")], uid=UID_A)
    assert shown.stdout == "served by systemd\n", shown
    searched = box.inside([*memfs, "grep", "systemd", "notes"], uid=UID_A)  # jailed rg
    assert searched.returncode == 0 and "boot.md" in searched.stdout, searched
    edited = box.inside([*memfs, "edit", "notes/boot.md", "-e", "s/served/kept/"],
                        uid=UID_A)  # jailed sed
    assert edited.returncode == 0, edited.stderr

    # killed: systemd restarts it (Restart=on-failure) and attaches the new session
    box.ctl("kill", "--signal=SIGKILL", "memfs.service")
    deadline = time.monotonic() + scaled(60)
    while not (box.ctl("is-active", "memfs.service").stdout.strip() == "active"
               and box.main_pid() not in (0, pid)):
        assert time.monotonic() < deadline, box.ctl("status", "memfs.service").stdout
        time.sleep(0.2)
    shown = box.inside(["cat", str(point / "notes" / "boot.md")], uid=UID_A)
    assert shown.stdout == "kept by systemd\n", shown
    mounts = box.inside(["findmnt", "-n", "-o", "FSTYPE", str(point)]).stdout.split()
    assert mounts == ["fuse.memfs"], mounts  # the dead session's mount was detached

    stopped = box.ctl("stop", "memfs.service")
    assert stopped.returncode == 0, stopped.stderr
    assert box.inside(["findmnt", "-n", str(point)]).stdout == ""  # ExecStopPost detached
    assert box.ctl("is-active", "memfs.service").stdout.strip() == "inactive"
