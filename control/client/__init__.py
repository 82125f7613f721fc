"""The Python client of the control socket: `Client` and the exceptions it raises, one per
protocol error code. Standard library only and light to import (the `memfs` CLI starts
with it); `control.client.inproc` carries requests to a dispatcher in the same process,
`control.client.jsonlite` is its JSON, `control.client.localfiles` the local side of
download and upload."""

from control.client.client import (
    ABSENT,
    DEFAULT_SOCKET,
    BusyError,
    Client,
    ClosedError,
    ConflictError,
    ConnectionFailed,
    InternalError,
    InvalidError,
    LeaseHeldError,
    LeaseLostError,
    MemfsClientError,
    MirrorFailedError,
    NoSpaceError,
    NotFoundError,
    PermissionDeniedError,
    StrList,
    TooLargeError,
    default_socket,
    encode_request,
)

__all__ = [
    "ABSENT",
    "DEFAULT_SOCKET",
    "BusyError",
    "Client",
    "ClosedError",
    "ConflictError",
    "ConnectionFailed",
    "InternalError",
    "InvalidError",
    "LeaseHeldError",
    "LeaseLostError",
    "MemfsClientError",
    "MirrorFailedError",
    "NoSpaceError",
    "NotFoundError",
    "PermissionDeniedError",
    "StrList",
    "TooLargeError",
    "default_socket",
    "encode_request",
]
