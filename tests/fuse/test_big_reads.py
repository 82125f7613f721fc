"""Big sequential reads through the mount: a cold read (the mount's pages dropped)
returns exactly the version pinned at open, even when a new version is committed
halfway through, and records exactly that version.
"""

from __future__ import annotations

import hashlib
import os
import subprocess

from tests.fuse.conftest import Mounted, cat, digest
from tests.support import PYTHON, UID_A, UID_B

BIG = 8 * 1024 * 1024

# Reads the file as an agent with the mount's cached pages of it dropped first: half,
# then (after a line on stdin) the rest; prints length, sha256 and the seen record.
COLD_READ = r"""
import hashlib, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
half = int(sys.argv[2]) // 2
first = b""
while len(first) < half:
    first += os.read(fd, min(1 << 20, half - len(first)))
print("half", flush=True)
sys.stdin.readline()
rest = b""
while chunk := os.read(fd, 1 << 20):
    rest += chunk
data = first + rest
print(len(data), hashlib.sha256(data).hexdigest(),
      os.getxattr(sys.argv[1], "user.memfs.seen").decode(), flush=True)
"""


def test_cold_big_read_returns_the_pinned_version_whole(mounted: Mounted) -> None:
    rel = "notes/big-cold.bin"
    v1 = os.urandom(BIG)
    v2 = os.urandom(BIG + 12345)
    mounted.write(UID_A, rel, v1)
    assert cat(mounted, UID_A, rel) == v1  # its pages are cached now: dropped below
    reader = subprocess.Popen([PYTHON, "-c", COLD_READ, mounted.path(rel), str(len(v1))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              user=UID_B, group=UID_B, extra_groups=[])
    assert reader.stdout is not None and reader.stdin is not None
    try:
        assert reader.stdout.readline() == b"half\n"
        mounted.write(UID_A, rel, v2)  # committed halfway through the read
        reader.stdin.write(b"go\n")
        reader.stdin.flush()
        length, sha, seen = reader.stdout.readline().decode().split()
        assert (int(length), sha) == (len(v1), hashlib.sha256(v1).hexdigest())
        assert seen == digest(v1)  # recorded exactly what the handle returned
    finally:
        reader.kill()
        reader.wait()
    assert cat(mounted, UID_B, rel) == v2
