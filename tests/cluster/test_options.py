"""The daemon's start-up check of a Gluster root: one info line when the volume's
options and the mount's kernel timeouts keep other hosts' changes fresh, one warning
naming each option that does not (read from the server with the gluster CLI, from
inside the host's network namespace, as on a real client host)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.cluster.conftest import (
    STATE_DIR,
    VOLUME,
    Cluster,
    host_config,
    stop_all,
)
from tests.support import Daemon, public_tmpdir

SERVER = "10.231.77.1"  # scripts/cluster's server address (inside the namespaces only)


def wait_for_line(daemon: Daemon, needle: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in daemon.log().splitlines():
            if needle in line:
                return line
        time.sleep(0.2)
    raise AssertionError(f"no log line with {needle!r}:\n{daemon.log()}")


def start_on(cluster: Cluster, root_mount: str, name: str) -> Daemon:
    host = cluster.hosts[2]
    base = public_tmpdir("memfs-cluster-")
    config = host_config(host, base, name)
    config["root"] = f"{root_mount}/{name}"
    daemon = Daemon(config, mount=False, wrapper=host.wrapper)
    cluster.daemons.append(daemon)
    return daemon.start(timeout=60)


@pytest.mark.slow
def test_start_up_check_of_the_volume_options(cluster: Cluster) -> None:
    good = start_on(cluster, str(cluster.hosts[2].gluster_mount), "root-options-good")
    daemons = [good]
    plain = public_tmpdir("memfs-cluster-plain-mount-")
    netns = f"--net=/run/netns/{cluster.hosts[2].netns}"
    try:
        line = wait_for_line(good, "is on GlusterFS volume")
        print(line)
        assert "keep other hosts' changes fresh" in line, line
        assert "WARNING" not in line and "could not" not in line, line

        # A mount with glusterfs's default kernel timeouts, a volume with md-cache on.
        done = subprocess.run(["nsenter", netns, "mount", "-t", "glusterfs", "-o",
                               f"log-file={STATE_DIR}/log/mnt-plain.log",
                               f"{SERVER}:/{VOLUME}", str(plain)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert cluster.gluster("volume", "set", VOLUME, "performance.stat-prefetch",
                               "on").returncode == 0
        bad = start_on(cluster, str(plain), "root-options-bad")
        daemons.append(bad)
        line = wait_for_line(bad, "is on GlusterFS volume")
        print(line)
        assert "performance.stat-prefetch is on" in line, line
        assert "attribute-timeout=1 (needs 0)" in line, line
        assert "entry-timeout=1 (needs 0)" in line, line
        assert "performance.open-behind" not in line, line  # that one is off
    finally:
        stop_all(cluster, daemons)
        cluster.gluster("volume", "set", VOLUME, "performance.stat-prefetch", "off")
        subprocess.run(["umount", "-l", str(plain)], check=False)
