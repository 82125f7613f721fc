"""The parts of an `Engine` (memfs/store/engine.py), built from the config by whoever
composes the program (the daemon's composition root, memfs/daemon/serve.py; a test; a
benchmark) and handed to it: the root's folders made, each store opened, the seen
records, the staging area, and identity and access. The engine builds only the views
of them it passes calls to: its reads, its writes (with each store's batch queue) and
its history and unrecorded reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from memfs.config import Config
from memfs.store.access.access import Access
from memfs.store.fs import backing
from memfs.store.history.gitobjects import on_shared_filesystem
from memfs.store.read.seen import SeenRecords
from memfs.store.write.staging import Staging
from memfs.store.write.store import Store


@dataclass(frozen=True)
class Parts:
    """What an engine is made of (`build`)."""

    stores: dict[str, Store]
    seen: SeenRecords
    staging: Staging
    access: Access


def build(config: Config) -> Parts:
    """Make the root's folders (ROOT and ROOT/state private; ROOT/stores readable
    through fds by the jailed tools) and open every store of ``config``, with its lock,
    landing folder, intent file and history."""
    root = config.root
    state = root / "state"
    for directory in (root, state, state / "staging", state / "locks"):
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    # ROOT is private (0700); store content is o+r so jailed tools can read it via fds.
    os.chmod(root, 0o700)
    stores_dir = root / "stores"
    stores_dir.mkdir(mode=backing.DIR_MODE, exist_ok=True)
    seen = SeenRecords(state / "seen")
    shared = on_shared_filesystem(str(state))
    stores: dict[str, Store] = {}
    for name, spec in config.stores.items():
        history = state / "history" / f"{name}.git" if spec.history else None
        stores[name] = Store(name, stores_dir / name, state / "locks" / f"{name}.lock",
                             state / "landing" / name, history, seen,
                             intents=state / "intents" / name, shared=shared)
    return Parts(stores, seen, Staging(state / "staging"), Access.of(config))
