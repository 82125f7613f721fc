"""The store engine: versioned files with blake3 digests, per-agent seen records,
atomic durable commits, symlink-proof access to the backing directory, and git
history. `engine.Engine` is the way in, with its parts ``engine.history``
(`history_reads`: log, old versions and diffs for an agent) and ``engine.unrecorded``
(`unrecorded`: the web view's reads, which record nothing); below it `store` (one
store: its lock, and landing a change), `staging`, `versions`, `seen`, `backing`,
`paths`, `globs`, `pages`, `planted` and `generation`; `history`, `gitobjects` and
`packs` keep the git history; `agents` and `statefile` the state files; `shared_root`
checks a GlusterFS root, `crashpoints` lets tests cut a change short, `errors` holds
what they raise. Nothing here imports upward (no FUSE, no control, no memory model),
and this ``__init__`` imports nothing, so that ``memfs.store.paths`` stays cheap for
the client CLI.
"""
