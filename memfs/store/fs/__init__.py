"""The backing file system: the only code that touches a store's directory by name,
and does it without following a symlink out of it.

* `backing`: files and folders opened beneath a store's directory (``openat2``
  ``RESOLVE_BENEATH``), what memfs keeps and shows (`is_kept`, `open_beneath`,
  `open_regular`, `walk_files`, `shown_names`, `read_all`).
* `paths`: a memory path parsed and checked (`MemPath`, `parse_path`, `nameable`,
  `check_component`) and the patterns the protocol states.
* `globs`: glob patterns compiled to regular expressions (`compile_glob`,
  `literal_prefix`).
* `planted`: the entries memfs never shows, for the jailed ripgrep to skip
  (`PlantedIndex`).
* `syscalls`: ``syncfs`` and ``getxattr`` through libc.
* `statefile`: small JSON files of ``ROOT/state``, changed under an flock and written
  atomically (`read_text`, `locked`, `write_atomically`).
* `shared_root`: the start-up check of a root on GlusterFS (`check_root`, `mount_of`).

This ``__init__`` imports nothing: ``memfs.store.fs.paths`` stays cheap for the client
CLI.
"""
