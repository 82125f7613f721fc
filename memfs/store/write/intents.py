"""The intent of a store's landing under way, kept in one file per store,
``ROOT/state/intents/STORE``, so that whoever takes the store lock next (this daemon
after a crash, or another daemon on the root) can finish what a kill interrupted.

The file holds at most one intent, written in one ``pwrite`` at offset 0 before the
landing's first rename: a header line ``memfs-intent LENGTH CHECKSUM HEAD`` and a JSON
body of LENGTH bytes whose blake3 starts with CHECKSUM. HEAD is the head of the store's
history the landing started from (``-`` without history): once ``main`` has moved on,
the intent is finished, and nothing needs to be written to say so; without history a
finished intent is truncated away. A header or body that does not check out (a torn
write after a power loss) is no intent: the landing it would have named had not begun
its renames, which start only after the write returned.

(Older versions kept the intent as the xattr ``user.memfs.pending`` of the store's lock
file, which held 4 KiB at most: a batch's intent is longer. Start-up still finishes one
found there: memfs/store/write/store.py.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import blake3

from memfs.store.errors import refused_when_full

MAGIC = b"memfs-intent "
FIRST_READ = 4096  # bytes read first; a longer intent is read again whole
NO_HEAD = "-"


class IntentFile:
    """One store's intent file, open for the daemon's life."""

    def __init__(self, path: Path, *, shared: bool) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._shared = shared  # fsync each write: another host may finish it
        self._length = -1  # bytes written last by this daemon (-1: unknown)

    def close(self) -> None:
        os.close(self._fd)

    def write(self, intent: dict[str, Any], head: str | None) -> None:
        """Set ``intent`` (a JSON object), started from history head ``head``. Raises
        NoSpace when the disk is full (then the previous one may be torn: it was
        finished, or this landing would not have begun)."""
        body = json.dumps(intent, separators=(",", ":")).encode()
        checksum = blake3.blake3(body).hexdigest()[:32]
        data = b"%s%d %s %s\n%s" % (MAGIC, len(body), checksum.encode(),
                                    (head or NO_HEAD).encode(), body)
        with refused_when_full("the landing's intent cannot be written"):
            view, offset = memoryview(data), 0
            while offset < len(data):
                offset += os.pwrite(self._fd, view[offset:], offset)
            if self._shared:
                os.fsync(self._fd)
        self._length = len(data)

    def clear(self) -> None:
        """No intent any more (a landing without history finished)."""
        if self._length != 0:
            os.ftruncate(self._fd, 0)
            if self._shared:
                os.fsync(self._fd)
            self._length = 0

    def read(self, head: str | None, *, any_head: bool = False) -> dict[str, Any] | None:
        """The intent in the file if it is unfinished: it names ``head`` as the head
        it started from (``any_head``: whatever head it names, when the history cannot
        be read), and it checks out; else None."""
        raw = os.pread(self._fd, FIRST_READ, 0)
        if not raw:
            self._length = 0
            return None
        line, newline, rest = raw.partition(b"\n")
        fields = line.removeprefix(MAGIC).split(b" ")
        if not (newline and line.startswith(MAGIC) and len(fields) == 3
                and fields[0].isdigit()):
            return None
        length, checksum, named = int(fields[0]), fields[1].decode("ascii", "replace"), \
            fields[2].decode("ascii", "replace")
        if not any_head and named != (head or NO_HEAD):
            return None  # finished: main moved on from where it started
        if len(rest) < length and len(raw) == FIRST_READ:
            rest = os.pread(self._fd, length, len(line) + 1)
        body = rest[:length]
        if len(body) != length or blake3.blake3(body).hexdigest()[:32] != checksum:
            return None  # torn: its landing never began
        try:
            intent = json.loads(body)
        except ValueError:
            return None
        return intent if isinstance(intent, dict) else None
