"""Benchmark of memfs on a GlusterFS root (issue 11); run as root:
`scripts/bench --cluster` or `.venv/bin/python scripts/bench_cluster.py`.

Brings up a one-host Gluster cluster of its own with scripts/cluster (state in
/var/tmp/memfs-cluster-bench, namespaces memfs-cb-*; torn down at the end), runs one
daemon whose root is on the host's Gluster mount (inside the host's network
namespace, as the cluster tests do) and prints medians, each next to its baseline
measured on the same Gluster mount in the same run, interleaved sample by sample:

* commit: a 4 KiB versioned replace through the socket, in a store with git history
  (the default) and in one without, vs a bare durable write (temp file + fsync +
  rename + fsync of the directory);
* read: a 4 KiB read through the socket (records the version) and `open`+`read`
  through the memfs mount vs a plain `open`+`read`+`close` on the Gluster mount;
* idle cost of watching the other daemons: the daemon's CPU time over 10 s idle
  (it reads the store's generation 4 times a second) vs the same daemon without a
  mount (which does not poll).
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import record, timed

from tests.support import REPO, Daemon, as_euid, connect_as, public_tmpdir

STATE = Path("/var/tmp/memfs-cluster-bench")
ENV = {**os.environ, "MEMFS_CLUSTER_DIR": str(STATE), "MEMFS_CLUSTER_PREFIX": "memfs-cb",
       "MEMFS_CLUSTER_HOSTS": "1"}
UID = 2001
PAYLOAD = os.urandom(4096)
N = 100


def cluster(*args: str) -> None:
    done = subprocess.run([str(REPO / "scripts" / "cluster"), *args], env=ENV,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"scripts/cluster {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


def bare_durable_write(directory: Path, name: str, data: bytes) -> None:
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, directory / name)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)


def plain_read(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.2f} ms"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    started = time.monotonic()
    cluster("up")
    print(f"cluster up: {time.monotonic() - started:.1f}s")
    gluster_mount = STATE / "mnt" / "h1"
    base = public_tmpdir("memfs-bench-cluster-")
    config = {
        "root": str(gluster_mount / f"root-{secrets.token_hex(4)}"),
        "mount": str(base / "memory"),
        "socket": str(base / "control.sock"),
        "stores": {"notes": {}, "plain": {"history": False}},
        "agents": {"alice": {"uid": UID, "stores": {"notes": "read_write",
                                                     "plain": "read_write"}}},
        "jail": {"sed_root": str(base / "sed-root")},
    }
    daemon = Daemon(config, mount=True, wrapper=["nsenter", "--net=/run/netns/memfs-cb-h1"])
    daemon.start(timeout=120)
    try:
        bare_dir = gluster_mount / "bare"
        bare_dir.mkdir(exist_ok=True)
        with connect_as(UID, daemon.socket) as client:
            client.write("notes/bench/file.bin", PAYLOAD)
            client.write("plain/bench/file.bin", PAYLOAD)
            bare_durable_write(bare_dir, "file.bin", PAYLOAD)
            ours, plain_store, bare = [], [], []
            for _ in range(N):
                ours.append(timed(lambda: client.write("notes/bench/file.bin", PAYLOAD)))
                plain_store.append(timed(lambda: client.write("plain/bench/file.bin", PAYLOAD)))
                bare.append(timed(lambda: bare_durable_write(bare_dir, "file.bin", PAYLOAD)))
            base_commit = statistics.median(bare)
            print(f"commit, 4 KiB replace via socket: median {ms(ours)} (store with git "
                  f"history), {ms(plain_store)} (history = false); bare durable write on the "
                  f"same Gluster mount: {ms(bare)}; ratios "
                  f"{statistics.median(ours) / base_commit:.2f} and "
                  f"{statistics.median(plain_store) / base_commit:.2f}")
            record("on GlusterFS: a 4 KiB replace over the socket, history on (median)",
                   ms(ours), baseline=f"a bare durable write on the same Gluster mount: "
                   f"{ms(bare)}", ratio=statistics.median(ours) / base_commit)
            socket_reads, mount_reads, plain = [], [], []
            via_mount = daemon.mountpoint / "notes" / "bench" / "file.bin"
            for _ in range(N):
                socket_reads.append(timed(lambda: client.read_bytes("notes/bench/file.bin")))
                with as_euid(UID):
                    mount_reads.append(timed(lambda: plain_read(via_mount)))
                plain.append(timed(lambda: plain_read(bare_dir / "file.bin")))
            base_ms = statistics.median(plain)
            print(f"read, 4 KiB via socket: median {ms(socket_reads)}; via the memfs mount: "
                  f"{ms(mount_reads)}; plain open+read on the same Gluster mount: "
                  f"{ms(plain)}; ratios {statistics.median(socket_reads) / base_ms:.2f} and "
                  f"{statistics.median(mount_reads) / base_ms:.2f}")
            record("on GlusterFS: a 4 KiB read through the memfs mount (median)",
                   ms(mount_reads), baseline=f"a plain open+read on the same Gluster mount: "
                   f"{ms(plain)}", ratio=statistics.median(mount_reads) / base_ms)
        # Baseline: the same daemon without a mount, which has no caches to keep
        # fresh and so does not poll.
        quiet = Daemon({**config, "socket": str(base / "quiet.sock")}, mount=False,
                       wrapper=daemon.wrapper)
        quiet.start(timeout=120)
        try:
            assert daemon.proc is not None and quiet.proc is not None
            time.sleep(2)
            before = cpu_seconds(daemon.proc.pid), cpu_seconds(quiet.proc.pid)
            time.sleep(10)
            idle = cpu_seconds(daemon.proc.pid) - before[0]
            idle_quiet = cpu_seconds(quiet.proc.pid) - before[1]
        finally:
            quiet.stop()
        print(f"idle CPU over 10 s, daemon with a mount (reads the store's generation 4/s): "
              f"{idle / 10 * 100:.2f}% of one CPU; without a mount (no polling): "
              f"{idle_quiet / 10 * 100:.2f}%")
    finally:
        daemon.stop()
        subprocess.run(["umount", "-l", str(daemon.mountpoint)], capture_output=True,
                       check=False)
        cluster("down")


if __name__ == "__main__":
    main()
