"""The mount's guardian (see `memfs.fuse.mount.Mount`), run as its own small process:
``python -S guardian.py MOUNTPOINT HELPER_PID FUSERMOUNT3`` with the daemon's end of fusermount3's
auto_unmount socket among its descriptors and a pipe from the daemon on stdin.

It guarantees that once the daemon is gone (stopped or killed) no mount of it stays:
it waits until the daemon closes the pipe (at stop, or the kernel when the daemon
dies), then until the FUSE connection is dead (a statfs waits while the connection
outlives its server), then lets go of the socket (so fusermount3 looks only now), waits
for fusermount3 to exit, and if its mount is still there (the topmost at the mount
point: a daemon started since mounts over a dead one) unmounts it with
``fusermount3 -u -z``: fusermount3's own check leaves a mount without ``allow_other``
(its probe of the mount is refused instead of finding the connection gone). It knows
its mount by the mount's id, and holds a reference on the mount (an O_PATH descriptor)
all along: a freed mount's id is reused, and a daemon started meanwhile must never be
taken for it. Standard library only, no site packages: it starts in a few milliseconds."""

import contextlib
import os
import subprocess
import sys
import time

_ESCAPED = {ord("\\"): b"\\134", ord(" "): b"\\040", ord("\t"): b"\\011", ord("\n"): b"\\012"}


def mounts_at(path: bytes) -> list[bytes]:
    """The ids of the mounts at ``path``, the topmost last (mountinfo lists a mount
    after its parent, and escapes four characters in paths)."""
    target = b"".join(_ESCAPED.get(byte, bytes([byte])) for byte in path)
    with open("/proc/self/mountinfo", "rb") as info:
        return [fields[0] for fields in (line.split(b" ") for line in info)
                if fields[4] == target]


def main(mountpoint: str, helper: int, fusermount3: str) -> None:
    path = os.fsencode(mountpoint)
    ours = mounts_at(path)[-1:]  # started once the mount is up: the topmost is ours
    # Held until the end: a mount's id is reused once the mount is freed, and a daemon
    # started meanwhile could get ours; this reference keeps our mount, and its id, alive.
    hold = os.open(mountpoint, os.O_PATH | os.O_CLOEXEC)
    sys.stdin.buffer.read()
    with contextlib.suppress(OSError):
        os.statvfs(mountpoint)
    # the socket: fusermount3 unmounts, or gives up, now
    os.closerange(3, hold)
    os.closerange(hold + 1, 1 << 16)
    while os.path.exists(f"/proc/{helper}"):
        time.sleep(0.005)
    # only our own mount, and only while it is the topmost: a daemon started since has
    # cleared it (memfs.fuse.mount.prepare_mountpoint) and mounted its own
    if ours and mounts_at(path)[-1:] == ours:
        subprocess.run([fusermount3, "-u", "-z", "-q", mountpoint], check=False)
    os.close(hold)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
