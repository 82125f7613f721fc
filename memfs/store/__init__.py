"""The store engine: versions, digests, per-agent seen records, atomic durable commits,
symlink-proof access to the backing directory, and git history.

Nothing here imports upward (no FUSE, no control socket, no memory model). Kept free of
imports so that ``memfs.store.paths`` stays cheap for the client CLI.
"""
