"""The remote mount: ``memfs mount URL MOUNTPOINT --token-file FILE``.

A normal user's process (no root, no daemon: ``fusermount3`` and this package) mounts a
token's agent's view of the memory read-only, speaking only the daemon's HTTP API
(REST, control/http/files.py and control/http/mounts.py). One module per role:

* `control.client.remote.http`: the daemon over HTTP(S): a small pool of keep-alive
  connections, the bearer token, errors as exceptions (unreachable, refused token).
* `control.client.remote.cache`: the inode table, the folder listings and file
  contents cached, and what a change invalidates.
* `control.client.remote.ops`: the pyfuse3 request handlers (read-only).
* `control.client.remote.stream`: the one long-lived change stream (``/v1/events``)
  that keeps the cache and the kernel's caches fresh, reconnecting with backoff.
* `control.client.remote.mount`: mounting, serving and unmounting.

It never imports the daemon's server stack (control/http/app.py and what it serves).
"""
