"""Ranked recall: "did we solve this before?" asked in words that need not appear in
the notes in that order or form. A BM25 keyword index per store (tantivy: English
stemming, case and accent folding), derived from the files and rebuildable from them
at any time: the files stay the source of truth. `Recall` (service.py) keeps the
indexes up to date from the engine's commit listener on a thread of its own, catches
up at start and after other daemons' changes, rebuilds a missing or corrupt index, and
answers queries for an agent from the stores it may read, without recording a read.
``text.py`` turns files and queries into words, ``index.py`` is one store's index.

It uses memfs/store (and memfs/memory's front matter reader); nothing below it imports
it: the composition root (memfs/daemon/serve.py) builds it and hands it to the
dispatcher.
"""

from memfs.recall.errors import BadQuery, RecallError
from memfs.recall.service import Hit, Recall

__all__ = ["BadQuery", "Hit", "Recall", "RecallError"]
