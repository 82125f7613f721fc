"""``memfs mount URL MOUNTPOINT --token-file FILE``: mount, serve in the foreground until
SIGTERM or SIGINT (or an unmount from outside), unmount.

Mounting goes through the setuid ``fusermount3`` as the local daemon's does
(memfs/fuse/mount.py `mount_operations`: ``ro``, ``auto_unmount``, no ``allow_other``),
with its guardian: a mount whose process is killed leaves no mount behind. The token is
read from its file (0600, control/client/tokenfile.py) and kept in memory only: never
in argv, never in the environment of a child (fusermount3, the guardian).
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import pyfuse3
import trio

from memfs.config import SEARCH_TOOLS
from memfs.control.client.client import InvalidError
from memfs.control.client.remote.cache import CONTENT_BYTES, Cache
from memfs.control.client.remote.http import Daemon, Refused, Unreachable
from memfs.control.client.remote.ops import RemoteView
from memfs.control.client.remote.stream import ChangeStream, wait_connected
from memfs.control.client.tokenfile import TokenFileError, read_token_file, token_file_path
from memfs.fuse.mount import (
    MAX_TASKS,
    MIN_TASKS,
    MOUNT_OPTIONS,
    MountError,
    _install_fast_wait,
    mount_operations,
    prepare_mountpoint,
)
from memfs.fuse.scans import ScanDetector

log = logging.getLogger("memfs.remote")

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DENIED = 0, 1, 2, 4
MAX_OPENS_PER_SECOND = 64  # the [scans] default (memfs/config.py)
FIRST_STREAM_SECONDS = 10.0  # how long mounting waits for the change stream


def run(url: str, mountpoint: str, token_file: str | None, *, stale_ok: float = 0.0,
        wait: float = 5.0, cafile: str | None = None,
        cache_bytes: int = CONTENT_BYTES) -> int:
    """Mount, serve until stopped, unmount; the exit code (errors said on stderr)."""
    def fail(code: int, message: str) -> int:
        print(f"memfs mount: {message}", file=sys.stderr)
        return code

    path = token_file_path(token_file)
    if path is None:
        return fail(EXIT_USAGE, "give --token-file FILE (or MEMFS_TOKEN_FILE): a file, mode "
                    "0600, holding a token from `memfs token create AGENT` on the daemon's host")
    try:
        daemon = Daemon(url, read_token_file(path), wait=wait, cafile=cafile)
    except (TokenFileError, InvalidError) as error:
        return fail(EXIT_USAGE, str(error))
    except OSError as error:  # the CA file
        return fail(EXIT_USAGE, f"{cafile}: {error.strerror or error}")
    try:
        reply = daemon.request("GET", "/v1/stores")
    except Refused:
        return fail(EXIT_DENIED, f"the daemon at {daemon.url} refuses the token in {path} "
                    "(revoked, expired or unknown)")
    except Unreachable as error:
        return fail(EXIT_ERROR, str(error))
    if reply.status != 200:
        return fail(EXIT_ERROR, f"{daemon.url}/v1/stores answered {reply.status}: is this a "
                    "memfs daemon's [http] listener?")
    cache = Cache(cache_bytes)
    view = RemoteView(daemon, cache, ScanDetector(SEARCH_TOOLS, MAX_OPENS_PER_SECOND),
                      stale_ok=stale_ok)
    target = Path(mountpoint)
    try:
        prepare_mountpoint(target)
        mounted = mount_operations(view, target, set(MOUNT_OPTIONS))
    except MountError as error:
        return fail(EXIT_ERROR, str(error))
    stream = ChangeStream(daemon, cache)
    stream.start()
    try:
        if not wait_connected(stream, FIRST_STREAM_SECONDS):
            log.warning("no change stream from %s yet: every request asks the daemon "
                        "until it is up", daemon.url)
        log.info("mounted %s at %s (read-only, remote)", daemon.url, target)
        print(f"memfs mount: {daemon.url} mounted at {target} (read-only); stop with "
              "Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
        trio.run(_serve, mounted.fuse_fd)
    except KeyboardInterrupt:
        pass
    finally:
        stream.stop()
        mounted.close()
        daemon.close()
    return EXIT_OK


async def _serve(fuse_fd: int) -> None:
    restore = _install_fast_wait(fuse_fd)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            await pyfuse3.main(min_tasks=MIN_TASKS, max_tasks=MAX_TASKS)
            log.info("unmounted from outside")
            nursery.cancel_scope.cancel()
    finally:
        restore()


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _signal in signals:
            scope.cancel()
            return
