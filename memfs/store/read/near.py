"""The answer to a name that does not exist: `NotFound` with the names the agent may
have meant ("did you mean"), so that one mistake gets one answer whatever the command
or the way in. The names come only from what the agent can see: its own stores, the
entries memfs shows in the deepest folder of the path that exists; so an error never
reveals a store or a file the agent could not list."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence

from memfs.store.errors import NotFound
from memfs.store.fs.paths import MemPath

MAX_NEAR = 3  # names suggested at most


def closest(name: str, candidates: Sequence[str]) -> list[str]:
    """The candidates nearest to ``name`` (difflib's ratio 0.6 or more), best first."""
    return difflib.get_close_matches(name, candidates, n=MAX_NEAR)


def _quoted(name: str) -> str:
    """A name as a JSON string: letters as they are, but every character of a name
    that is not printable escaped (a name the caller typed may hold one)."""
    return json.dumps(name, ensure_ascii=not name.isprintable())


def _explained(what: str, notes: list[str], near: list[str]) -> str:
    if near:
        notes.append(f"did you mean {' or '.join(_quoted(name) for name in near)}?")
    return f"{what} ({'; '.join(notes)})" if notes else what


def no_store(store: str, mine: Sequence[str]) -> NotFound:
    """NotFound for a store the agent does not have (``mine``: the stores it has)."""
    near = closest(store, mine)
    return NotFound(_explained(f"no store named {_quoted(store)}", [], near), near)


def no_path(path: MemPath, found: int, names: Sequence[str]) -> NotFound:
    """NotFound for ``path``, of which the first ``found`` components below the store
    exist (folders) and the next does not; ``names``: what memfs shows in the last
    folder that exists, among which the near ones are suggested."""
    near = [str(MemPath(path.store, (*path.parts[:found], name)))
            for name in closest(path.parts[found], names)]
    notes = [] if found == len(path.parts) - 1 else \
        [f"no folder {_quoted(str(MemPath(path.store, path.parts[:found + 1])))}"]
    return NotFound(_explained(f"{path} does not exist", notes, near), near)
