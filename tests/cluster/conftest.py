"""Fixtures for the multi-host tests: a real GlusterFS volume served from one network
namespace and mounted by three client "hosts" (namespaces), brought up once for this
package's tests with scripts/cluster and torn down after them, even after a failure.

Each memfs daemon of a test runs on one host: its root is a directory on *that host's*
Gluster mount, and it runs inside the host's network namespace (`nsenter --net`, which
keeps the file system view: its FUSE mount and Unix socket are visible to the test).
The daemon itself needs no network; running it there makes what it does over the
network (its start-up check of the volume's options with the gluster CLI) use the
host's network, as on a real machine. What stays per host: the socket, the FUSE mount
point and the sed jail root (a local directory per host, built once per session).

The cluster uses its own state directory and namespace prefix, so a cluster a
developer brought up by hand with scripts/cluster is never touched. Not root: skipped
(namespaces and mounts need it). Root but the cluster cannot be brought up: the
tests fail, loudly, with the script's output.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, Daemon, daemon_ids, public_tmpdir

SCRIPT = REPO / "scripts" / "cluster"
STATE_DIR = Path(os.environ.get("MEMFS_TEST_CLUSTER_DIR", "/var/tmp/memfs-cluster-test"))
PREFIX = "memfs-ct"
HOSTS = 3
ENV = {**os.environ, "MEMFS_CLUSTER_DIR": str(STATE_DIR), "MEMFS_CLUSTER_PREFIX": PREFIX,
       "MEMFS_CLUSTER_HOSTS": str(HOSTS), "MEMFS_CLUSTER_VOLUME": "memfs"}
VOLUME = "memfs"

# Agents of the cluster tests: workers (read_write) and uid 0 as a reading agent, so
# that test threads (root) can read through the mounts without switching uids.
FIRST_UID = 2300
WORKERS = 6


@dataclass
class Host:
    name: str
    netns: str
    gluster_mount: Path
    sed_root: Path

    @property
    def wrapper(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}"]


@dataclass
class Cluster:
    hosts: list[Host]
    up_seconds: float
    daemons: list[Daemon] = field(default_factory=list)

    def gluster(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The gluster CLI against the test cluster's glusterd."""
        return subprocess.run(
            ["gluster", f"--glusterd-sock={STATE_DIR}/run/glusterd.socket", "--mode=script",
             f"--log-file={STATE_DIR}/log/cli.log", *args],
            capture_output=True, text=True, timeout=timeout, check=False)


def cluster_script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _log_tail() -> str:
    out = []
    for log in sorted((STATE_DIR / "log").glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-15:]
        out.append(f"--- {log.name}\n" + "\n".join(lines))
    return "\n".join(out)


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    """The cluster, up for the tests of this package only (its ~100 MB and its
    processes are gone before the rest of the suite runs)."""
    if os.geteuid() != 0:
        pytest.skip("the cluster tests need root (network namespaces, Gluster and FUSE mounts)")
    started = time.monotonic()
    done = cluster_script("up")
    if done.returncode != 0:
        output = done.stdout + done.stderr
        logs = _log_tail()
        cluster_script("down")
        pytest.fail(f"scripts/cluster up failed (exit {done.returncode}):\n{output}\n{logs}",
                    pytrace=False)
    up_seconds = time.monotonic() - started
    sed_base = public_tmpdir("memfs-cluster-sed-")
    os.chown(sed_base, *daemon_ids())  # each daemon builds its host's sed root here
    hosts = [Host(f"h{n}", f"{PREFIX}-h{n}", STATE_DIR / "mnt" / f"h{n}", sed_base / f"h{n}")
             for n in range(1, HOSTS + 1)]
    running = Cluster(hosts, up_seconds)
    try:
        yield running
    finally:
        for daemon in running.daemons:  # whatever a failed test left running
            stop_daemon(daemon)
        done = cluster_script("down")
        shutil.rmtree(sed_base, ignore_errors=True)
        assert done.returncode == 0, done.stdout + done.stderr


def host_config(host: Host, base: Path, root_name: str, *, agents: int = WORKERS,
                stores: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A daemon on ``host``: root on the host's Gluster mount, everything else local.
    ``stores`` (default: ``notes``, with history) are read_write for every worker."""
    stores = stores if stores is not None else {"notes": {}}
    config: dict[str, Any] = {
        "root": str(host.gluster_mount / root_name),
        "mount": str(base / f"{host.name}-memory"),
        "socket": str(base / f"{host.name}.sock"),
        "delegates": [0],
        "stores": stores,
        "agents": {f"worker{i}": {"uid": FIRST_UID + i,
                                  "stores": dict.fromkeys(stores, "read_write")}
                   for i in range(agents)},
        "jail": {"sed_root": str(host.sed_root)},
    }
    config["agents"]["reader"] = {"uid": 0, "stores": dict.fromkeys(stores, "read")}
    return config


def start_daemons(cluster: Cluster, hosts: Sequence[Host], *, mount: bool = True,
                  stores: dict[str, dict[str, Any]] | None = None,
                  ) -> tuple[Path, list[Daemon]]:
    """One daemon per host, all on one new root on the volume (each through its own
    host's mount); returns the scratch directory and the running daemons."""
    base = public_tmpdir("memfs-cluster-")
    root_name = f"root-{secrets.token_hex(4)}"
    daemons = []
    for host in hosts:
        daemon = Daemon(host_config(host, base, root_name, stores=stores), mount=mount,
                        wrapper=host.wrapper)
        cluster.daemons.append(daemon)
        daemons.append(daemon.start(timeout=60))
    return base, daemons


def mounted(point: Path) -> bool:
    """Whether something is mounted at ``point``, per /proc/self/mounts: a dead FUSE
    daemon's mount answers ENOTCONN, which os.path.ismount reports as not mounted."""
    with open("/proc/self/mounts") as mounts:
        return any(line.split(" ")[1] == str(point) for line in mounts)


def stop_daemon(daemon: Daemon) -> None:
    """Stop a daemon and never leave its FUSE mount behind (also a killed one's)."""
    if daemon.alive():
        try:
            daemon.stop(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    if daemon.mount and mounted(daemon.mountpoint):
        subprocess.run(["umount", "-l", str(daemon.mountpoint)], check=False)


def stop_all(cluster: Cluster, daemons: Sequence[Daemon]) -> None:
    for daemon in daemons:
        stop_daemon(daemon)
        if daemon in cluster.daemons:
            cluster.daemons.remove(daemon)
