"""`StoreHistory`: the repository of one store, with its three roles joined: writing
(memfs/store/history/writer.py), packing (maintenance.py) and reading (reader.py), over
one opened repository (repo.py)."""

from __future__ import annotations

from memfs.store.history.maintenance import HistoryMaintenance
from memfs.store.history.reader import HistoryReader
from memfs.store.history.writer import HistoryWriter


class StoreHistory(HistoryWriter, HistoryMaintenance, HistoryReader):
    """The repository of one store. Writes (`blob`, `commit`, `recover`) are made by
    the engine under the store lock, through one Repository object; packing runs in a
    worker thread outside it; reads use one Repository object per thread."""
