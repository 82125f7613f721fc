"""The store engine: versioned files with blake3 digests, per-agent seen records,
atomic durable commits, symlink-proof access to the backing directory, and git
history. Its folders follow a change through the pipeline:

* `engine` (``Engine``): the way in, a facade that passes each call on (its docstring
  maps where): who is asking and what they may do to its ``access``
  (`access.access`), an agent's reads to its ``reads`` (`read.reads`), its changes to
  its ``writes`` (`write.writes`); its views ``engine.history`` (`history.view`) and
  ``engine.unrecorded`` (`read.unrecorded`) are reads of their own. `parts` builds
  what an engine is made of (the stores, seen records, staging, access), for the
  daemon's composition root to hand it.
* `access/`: who is asking and what they may touch (`access.access`), and a personal
  memory's agents (`access.agents`).
* `write/`: a change on its way in: taken from an agent, or from the memory model as
  one step of several files (`write.writes`), queued and batched (`write.batch`),
  checked against what the writer saw and landed (`write.landing`), its bytes staged
  (`write.staging`), its intent kept for crash recovery (`write.intents`), the store's
  lock and the last step of a landing (`write.store`), and the store's change counter
  (`write.generation`).
* `read/`: an agent's reads, recorded as seen (`read.reads`), a file's version
  (`read.versions`), where a read is recorded (`read.seen`), pages of lines
  (`read.pages`), the web view's reads that record nothing (`read.unrecorded`), the
  names a `NotFound` suggests (`read.near`), and their cache (`read.lru`).
* `history/`: the git history: a store's repository (`history.store_history`) with its
  roles, writing commits (`history.writer`), packing (`history.maintenance`) and
  reading (`history.reader`) over what they share (`history.repo`), an agent's log,
  old versions and diffs (`history.view`), objects and packs on disk
  (`history.gitobjects`, `history.packs`), revision syntax (`history.revs`), mirrors
  and restore (`history.mirror`, `history.restore`, `history.gitcli`).
* `fs/`: the backing directory, opened without following symlinks (`fs.backing`),
  memory paths and globs (`fs.paths`, `fs.globs`), entries never shown
  (`fs.planted`), libc calls (`fs.syscalls`), the state files (`fs.statefile`), and
  the check of a shared GlusterFS root (`fs.shared_root`).
* `errors` holds what they all raise; `crashpoints` lets tests kill the daemon between
  two steps of a change.

Nothing here imports upward (no FUSE, no control, no memory model), and no
``__init__`` here imports anything, so that ``memfs.store.fs.paths`` stays cheap for the
client CLI.
"""
