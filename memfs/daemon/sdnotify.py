"""systemd's readiness protocol (sd_notify), without a library: one datagram to the
Unix socket named by ``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract
namespace). The daemon sends ``READY=1`` once the mount, the control socket and the
HTTP listener are all up, and ``STOPPING=1`` when it starts shutting down.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("memfs")


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``READY=1``) to the service manager; False when there is
    none (no NOTIFY_SOCKET) or the message could not be sent (logged). Never raises."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    elif not address.startswith("/"):
        log.warning("NOTIFY_SOCKET %r is not a Unix socket path: not notifying", address)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode("utf-8"))
    except OSError as error:
        log.warning("cannot notify the service manager (%s): %s", state.split("\n")[0], error)
        return False
    return True
