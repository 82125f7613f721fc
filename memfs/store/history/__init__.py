"""The git history of each store: one bare repository per store, one commit per
accepted change, written in process with pygit2; packed, mirrored and restored.

* `store_history`: `StoreHistory`, a store's repository with its three roles joined:
  * `writer` (`HistoryWriter`): blobs and commits under the store lock, a batch's
    commits as one pack, `recover`, `sync` (durability);
  * `maintenance` (`HistoryMaintenance`): packing and merging packs, outside the lock
    (`PACK_AFTER`, `MERGE_GRACE` and the other knobs);
  * `reader` (`HistoryReader`): `resolve`, `log`, `content`, `versions`, any thread.
* `repo`: what the roles share: the opened repository (`Repository`), the commit
  message and its trailers (`message_for`, `named_path`, `delegated`,
  `current_delegate`, `SINGLE_PATH_OPS`), `parse_time`, and what it raises
  (`HistoryError`, `HistoryFull`); `Change`, `Planned`, `Entry`.
* `view`: the history read on an agent's behalf: log, an old version, a diff, with the
  agent's read access (`HistoryReads`, `Diff`).
* `gitobjects`: loose objects, packs and the ref written to disk safely, on local and
  shared file systems (`write_pack`, `write_ref`, `intact`, `on_shared_filesystem`).
* `packs`: packing loose objects and merging packs geometrically (`rollup`, `merge`,
  `tidy`).
* `revs`: how a caller names a revision or a time (regular expressions, no I/O).
* `mirror`: pushing each store's history to git remotes in the background
  (`Mirrors`, `StoreMirror`, `MirrorStatus`).
* `restore`: a store brought back from a mirror (`restore_store`,
  `restore_from_mirrors`).
* `gitcli`: the ``git`` program, for talking to remotes (`GitRunner`).

This ``__init__`` imports nothing: import the module you need.
"""
