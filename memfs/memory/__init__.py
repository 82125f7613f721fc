"""Sessions, the start-of-session brief, tasks with leases and decision records: the
structured part of a ``structured = true`` store, built on the engine's locked,
recorded commits (`Engine.update`). One module per concept; `Memory` bundles them.
"""
