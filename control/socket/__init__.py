"""The control socket's server: a trio server on a Unix socket that identifies each
client by the kernel (SO_PEERCRED), reads one request per line within its limits and
answers through the dispatcher."""

from memfs.control.socket.server import (
    ConnectionTable,
    ControlServer,
    ServerLimits,
    SocketInUse,
    bind_listener,
    max_line_bytes,
    peer_uid,
    send_and_close,
)

__all__ = [
    "ConnectionTable",
    "ControlServer",
    "ServerLimits",
    "SocketInUse",
    "bind_listener",
    "max_line_bytes",
    "peer_uid",
    "send_and_close",
]
