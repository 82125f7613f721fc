"""Sessions, the start-of-session brief, tasks with leases and decision records: the
structured part of a ``structured = true`` store, built on the engine's locked,
recorded commits (`Engine.update`). One module per concept (`sessions`, `brief`,
`tasks`, `decisions`), their text forms in `records`, the parsed records of a folder
in `folders`, their exceptions in `errors`; `Memory` (`model`) bundles them. It uses
memfs.store and the config, never control nor the mount.
"""
