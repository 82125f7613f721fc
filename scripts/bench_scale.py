"""Scale (issue 14): a store of N files in N/100 folders, N = 1,000, 10,000 and (with
--big) 100,000. For each N, whole processes, medians of a few runs: `memfs ls`,
`memfs grep`, `ls -R` and `rg` through the mount (next to the same on the backing
folder), the latency of one versioned 4 KiB replace (with history and without), and
the daemon's resident memory after all that. Run as root:
`.venv/bin/python scripts/bench_scale.py [--big]` (`scripts/bench --scale` runs it;
`--scale=big` passes --big).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchlib import record  # noqa: E402

from memfs.daemon.serve import rg_binary  # noqa: E402
from tests.support import UID_A, Daemon, connect_as, public_tmpdir  # noqa: E402

RUNS = 3
MEMFS = str(Path(sys.executable).parent / "memfs")


def plant(root: Path, store: str, files: int) -> None:
    """N small files in N/100 folders, written straight into the backing folder (the
    daemon hashes and records them when it meets them)."""
    top = root / "stores" / store
    for folder in range(max(1, files // 100)):
        path = top / f"d{folder:04d}"
        path.mkdir(parents=True, exist_ok=True)
        for n in range(100 if files >= 100 else files):
            (path / f"f{n:03d}.md").write_text(f"note {folder}/{n}\nneedle {n % 7}\n")


def timed(argv: list[str], *, uid: int | None = None, env: dict[str, str] | None = None,
          runs: int = RUNS) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=False, capture_output=True, env=env, user=uid, group=uid,
                       extra_groups=[] if uid is not None else None)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def commit_ms(daemon: Daemon, store: str, n: int = 50) -> float:
    data = os.urandom(4096)
    with connect_as(UID_A, daemon.socket) as client:
        client.write(f"{store}/d0000/commit.bin", data, force=True)
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            client.write(f"{store}/d0000/commit.bin", data)
            samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def one_size(files: int) -> None:
    base = public_tmpdir("memfs-bench-scale-")
    config = {
        "root": str(base / "root"), "mount": str(base / "memory"),
        "socket": str(base / "control.sock"), "delegates": [0],
        "stores": {"big": {}, "flat": {"history": False}},
        "agents": {"alice": {"uid": UID_A, "stores": {"big": "read_write",
                                                      "flat": "read_write"}}},
    }
    root = Path(config["root"])
    try:
        for store in ("big", "flat"):
            plant(root, store, files)
        start = time.perf_counter()
        daemon = Daemon(config, mount=True).start(timeout=3600)
        started = time.perf_counter() - start
        try:
            env = {**os.environ, "MEMFS_SOCKET": str(daemon.socket)}
            mount = Path(config["mount"]) / "big"
            backing = root / "stores" / "big"
            rg = str(rg_binary())
            ls = timed([MEMFS, "ls", "big/**"], uid=UID_A, env=env)
            grep = timed([MEMFS, "grep", "-c", "needle 3", "big"], uid=UID_A, env=env)
            ls_r = timed(["ls", "-R", str(mount)], uid=UID_A)
            ls_r_base = timed(["ls", "-R", str(backing)])
            rg_mount = timed([rg, "-c", "needle 3", str(mount)], uid=UID_A)
            rg_base = timed([rg, "-c", "needle 3", str(backing)])
            history = commit_ms(daemon, "big")
            flat = commit_ms(daemon, "flat")
            assert daemon.proc is not None
            memory = rss_mb(daemon.proc.pid)
        finally:
            daemon.stop()
        print(f"{files:>7} files: start {started:6.1f} s | memfs ls {ls * 1e3:7.0f} ms | "
              f"memfs grep {grep * 1e3:7.0f} ms | ls -R mount {ls_r * 1e3:7.0f} ms "
              f"(backing {ls_r_base * 1e3:5.0f}) | rg mount {rg_mount * 1e3:7.0f} ms "
              f"(backing {rg_base * 1e3:5.0f}) | commit {history:5.2f} ms with history, "
              f"{flat:5.2f} ms without | daemon RSS {memory:5.0f} MB"
              + (" (goal <= 150 MB)" if files >= 100_000 else ""))
        record(f"a store of {files:,} files: `rg -c` through the mount", f"{rg_mount * 1e3:.0f} ms",
               baseline=f"`rg -c` on the backing folder: {rg_base * 1e3:.0f} ms",
               ratio=rg_mount / rg_base)
        record(f"a store of {files:,} files: the daemon's RSS", f"{memory:.0f} MB",
               goal="<= 150 MB" if files >= 100_000 else "",
               met=memory <= 150 if files >= 100_000 else None)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    sizes = [1000, 10_000] + ([100_000] if "--big" in sys.argv else [])
    for files in sizes:
        one_size(files)


if __name__ == "__main__":
    main()
