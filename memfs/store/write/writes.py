"""An agent's changes to the files of its stores (the engine's ``writes``): write,
edit, restore and delete, each version-checked and landed in its store's next batch
(write/batch.py, write/landing.py), and the memory model's `update`, several files
landed together under the store lock (write/store.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pygit2

from memfs.config import Config
from memfs.store.errors import (
    InvalidInput,
    NotAFolder,
    NotFound,
    PathTaken,
    TooLarge,
    refused_when_full,
)
from memfs.store.fs import backing
from memfs.store.fs.paths import MemPath
from memfs.store.history.repo import SINGLE_PATH_OPS, current_delegate
from memfs.store.read.reads import Reads, mem_path, reserved
from memfs.store.read.seen import SeenRecords
from memfs.store.read.versions import Version, version_at
from memfs.store.write.batch import APPEND, DELETE, REPLACE, Queue, Request, Ticket
from memfs.store.write.landing import BatchLanding, check_version
from memfs.store.write.staging import Staging
from memfs.store.write.store import Landing, Store


@dataclass(frozen=True)
class Committed:
    """An accepted change: the new version's digest and size, the digest of the
    version it replaced (None: the file was created), and its history commit (None:
    the store keeps no history, or ``unchanged``: the file already held exactly this,
    so nothing was landed or committed)."""

    path: MemPath
    digest: str
    size: int
    previous: str | None
    commit: str | None = None
    unchanged: bool = False

    @property
    def created(self) -> bool:
        return self.previous is None


@dataclass(frozen=True)
class Plan:
    """What an `Engine.update` step does: files to write (bytes) or delete (None),
    keyed by path below the store, the history op and summary, a result for the
    caller, and whether it overrides another agent's claim (``forced``: its commit
    says ``Memfs-Forced: yes``)."""

    writes: dict[str, bytes | None]
    op: str
    summary: str
    result: object = None
    forced: bool = False


Reader = Callable[[str], bytes | None]  # path below a store -> its bytes, None if missing
# A caller's own condition on the current version (HTTP's If-Match / If-None-Match):
# the current digest (None: no file) -> whether the change may be made.
Precondition = Callable[[str | None], bool]


class CheckAccess(Protocol):
    """PermissionDenied or NotFound unless ``agent`` may use ``store`` (with ``write``:
    write there): `Access.check_access` (memfs/store/access/access.py)."""

    def __call__(self, agent: str, store: str, *, write: bool = False) -> None: ...


# (agent, path, rev) -> the commit id and the bytes ``path`` had at ``rev`` (history/view.py).
VersionAt = Callable[[str, MemPath, str], tuple[str, bytes]]


class Writes:
    """The writes of `Engine` (memfs/store/engine.py): built from the stores, the
    staging area, the seen records, the reads (for the current bytes and the NotFound
    of a missing file), the access check and a read of an old version. It builds each
    store's batch queue, and calls ``commit_listeners`` with the path of every change
    landed."""

    def __init__(self, config: Config, stores: Mapping[str, Store], staging: Staging,
                 seen: SeenRecords, reads: Reads, *,
                 check_access: CheckAccess, version_at: VersionAt) -> None:
        self._config = config
        self._stores = stores
        self._staging = staging
        self._seen = seen
        self._reads = reads
        self._check_access = check_access
        self._version_at = version_at
        self.commit_listeners: list[Callable[[MemPath], None]] = []
        # Each store's single-file changes land in batches (memfs/store/write/batch.py).
        self._queues = {name: Queue(BatchLanding(store, staging,
                                                 check_size=self._check_size,
                                                 notify=self._notify))
                        for name, store in stores.items()}

    def write(self, agent: str, path: MemPath, data: bytes, *, append: bool = False,
              force: bool = False, expected: str | None = None,
              precondition: Precondition | None = None) -> Committed:
        """Replace (or create) the file with ``data``, or append ``data`` to it.

        Replace is accepted only if the agent's seen digest equals the current one, or
        the file does not exist and the agent's record does not say it saw a version
        (no record, or ABSENT), or ``force``; otherwise Conflict. ``expected``, when
        given, is what the caller's own connection last saw (a digest, or ABSENT: "I
        saw no file here"), and must be current too: it tells apart two processes of
        one agent, which share the agent's record. Append needs no prior read and
        never loses data. A replace that passes the check with the bytes the file
        already holds (also an edit or restore that gives them, or an empty append)
        changes nothing: the result says ``unchanged``, with no commit, and a replace
        records the version as seen by the writer. ``precondition``, when given, must
        hold for the current version, checked under the store lock like the rest, also
        with ``force`` and for an append (else ConditionFailed). Raises
        PermissionDenied, InvalidInput, TooLarge, Conflict.
        """
        self._check_access(agent, path.store, write=True)
        self._plain_write(path)
        self._check_size(len(data))
        if append:
            return self._append(agent, path, data, precondition)
        return self._replace(agent, path, data, expected=expected, force=force, op="write",
                             precondition=precondition)

    def edit(self, agent: str, path: MemPath, transform: Callable[[bytes], bytes], *,
             force: bool = False, expected: str | None = None,
             precondition: Precondition | None = None) -> Committed:
        """Apply ``transform`` (e.g. a jailed sed) to the current bytes and commit the
        result through the same version check as ``write`` (``expected`` and
        ``precondition`` too). The check is made before the transform runs and again at
        commit; a transform error changes nothing."""
        self._check_access(agent, path.store, write=True)
        self._plain_write(path)
        base, data = self._reads.read_current(path)
        self._check(agent, path, base, expected, precondition, force=force)
        new = transform(data)
        self._check_size(len(new))
        return self._replace(agent, path, new, expected=base.digest, force=force, op="edit",
                             precondition=precondition)

    def restore(self, agent: str, path: MemPath, rev: str, *, force: bool = False,
                expected: str | None = None,
                precondition: Precondition | None = None) -> Committed:
        """Write the content ``path`` had at ``rev`` back, as a new commit naming that
        revision: an ordinary version-checked replace (``expected`` and
        ``precondition`` too). Restoring a deleted file recreates it (nothing is
        overwritten; a ``precondition`` must still hold). Raises PermissionDenied,
        NotFound (no history, no such revision, no such file then), InvalidInput,
        Conflict."""
        self._check_access(agent, path.store, write=True)
        self._plain_write(path)
        commit, data = self._version_at(agent, path, rev)
        self._check_size(len(data))
        return self._replace(agent, path, data, expected=expected, force=force, op="restore",
                             summary=f"restore {path} to {commit[:7]}", create_freely=True,
                             precondition=precondition)

    def delete(self, agent: str, path: MemPath, *, force: bool = False,
               expected: str | None = None,
               precondition: Precondition | None = None) -> Committed:
        """Remove the file; version-checked like a replace (``expected`` and
        ``precondition`` too). Raises NotFound, Conflict."""
        self._check_access(agent, path.store, write=True)
        self._plain_write(path)
        ticket = Ticket(Request(DELETE, agent, self._email(agent), path, "delete",
                                f"delete {path}", expected=expected, force=force,
                                precondition=precondition, delegate=current_delegate()))
        self._submit(ticket, create=False)
        return self._committed(ticket)

    def update(self, agent: str | None, store: str,
               decide: Callable[[Reader], Plan]) -> tuple[Any, str | None]:
        """One indivisible step under the store lock, for the memory model: ``decide``
        reads the current files (``read(rel)``: bytes, or None when missing) and
        returns a Plan; its files are staged and landed together, as one history
        commit. It records no seen version for the writer (see below). ``agent``
        None: memfs itself (a repair; no access check). Returns (the plan's result,
        the commit id). Raises PermissionDenied,
        whatever ``decide`` raises (then nothing changed), TooLarge, InvalidInput."""
        if agent is not None:
            self._check_access(agent, store, write=True)
        author = agent or "memfs"
        handles = self._stores[store]
        landings: list[Landing] = []
        with contextlib.ExitStack() as cleanup:
            with handles.locked():
                plan = decide(lambda rel: self._reads.current_bytes(mem_path(store, rel)))
                if not plan.writes:
                    return plan.result, None
                if plan.op in SINGLE_PATH_OPS:  # the log reads those as one-path commits
                    raise ValueError(f"a plan's op cannot be {plan.op!r}")
                # Several files wait in the store's landing directory, so that a crash
                # at any point lands all of them or none (see write/store.py).
                into = handles.landing_fd if len(plan.writes) > 1 else None
                for rel, data in sorted(plan.writes.items()):
                    path = mem_path(store, rel)
                    parent = self._parent(path, create=data is not None)
                    cleanup.callback(os.close, parent)
                    version_at(parent, path.parts[-1])  # a directory or symlink: refused now
                    if data is None:
                        landings.append(Landing(path, parent, None, record=False, forget=True))
                        continue
                    self._check_size(len(data))
                    blob = handles.blob(data)
                    staged = cleanup.enter_context(
                        self._staging.stage(data, author, _hex(blob), into=into))
                    # No seen record for the writer: these files are only ever changed
                    # by such steps, which read what is there under the lock.
                    landings.append(Landing(path, parent, staged, blob, record=False))
                commit = handles.land(author, self._email(author), landings, op=plan.op,
                                      summary=plan.summary, forced=plan.forced)
            for parent in {landing.parent for landing in landings}:
                os.fsync(parent)
        for landing in landings:
            self._notify(landing.path)
        return plan.result, commit

    # -- commit machinery ------------------------------------------------------------

    def _plain_write(self, path: MemPath) -> None:
        """Refuse a plain write into the folders a structured store keeps itself."""
        if reserved(self._config, path):
            command = {"sessions": "session", "tasks": "task", "decisions": "decision"}
            raise InvalidInput(
                f"{path}: {path.parts[0]}/ of store {path.store} is written only by its "
                f"operations; use `memfs {command[path.parts[0]]} ...` (or the matching "
                "MCP tool)")

    def _check_size(self, size: int) -> None:
        limit = self._config.max_file_size
        if size > limit:
            raise TooLarge(f"content is {size} bytes; the limit is max_file_size = "
                           f"{limit} bytes", size, limit)

    def _email(self, agent: str) -> str:
        spec = self._config.agents.get(agent)
        return (spec.email if spec is not None and spec.email else None) or \
            f"{agent}@memfs.invalid"

    def _parent(self, path: MemPath, *, create: bool) -> int:
        try:
            with refused_when_full():  # no room for a new folder
                return backing.walk_parent(self._stores[path.store].fd, path.parts,
                                           create=create)
        except FileNotFoundError:
            raise self._reads.not_found(path) from None
        except NotAFolder as error:
            if not create:
                raise  # nothing there: not found
            raise PathTaken(f"{path} cannot be made: {error}") from None

    def _made_parent(self, agent: str, path: MemPath,
                     precondition: Precondition | None) -> int:
        """`_parent`, making missing folders, unless ``precondition`` refuses a missing
        file: then ConditionFailed, and no folder is made for nothing."""
        if precondition is not None and not precondition(None):
            try:
                return self._parent(path, create=False)
            except NotFound:  # no folder, so no file: the precondition fails now
                self._check(agent, path, None, None, precondition, force=True)
        return self._parent(path, create=True)

    def _check(self, agent: str, path: MemPath, current: Version | None,
               expected: str | None, precondition: Precondition | None = None, *,
               force: bool = False) -> None:
        """Raise ConditionFailed or Conflict unless ``agent`` may change ``path`` from
        ``current`` (landing.check_version, with the agent's record on disk)."""
        check_version(agent, path, current, lambda: self._seen.get(agent, path), expected,
                      precondition, force=force)

    def _replace(self, agent: str, path: MemPath, data: bytes, *, expected: str | None,
                 force: bool, op: str, summary: str | None = None,
                 create_freely: bool = False,
                 precondition: Precondition | None = None) -> Committed:
        """Land ``data`` as the new version of ``path`` in the store's next batch, if
        the version check allows it then (``create_freely``: creating a missing file
        needs no check of the record, only of ``precondition``). Answered once the
        change is durable (memfs/store/write/landing.py)."""
        store = self._stores[path.store]
        git = str(pygit2.hash(data)) if store.history is not None else None
        ticket = Ticket(Request(REPLACE, agent, self._email(agent), path, op,
                                summary or f"{op} {path}", data=data, git=git,
                                expected=expected, force=force, create_freely=create_freely,
                                precondition=precondition, delegate=current_delegate()))
        self._submit(ticket, create=True)
        return self._committed(ticket)

    def _append(self, agent: str, path: MemPath, data: bytes,
                precondition: Precondition | None) -> Committed:
        """Append in the store's next batch, so no concurrent append is lost. An
        existing file grows in place (the cost is that of ``data``, not of the file;
        the appends of a batch to one file are written at once); a missing one is
        created like a write."""
        ticket = Ticket(Request(APPEND, agent, self._email(agent), path, "append",
                                f"append {path}", data=data, precondition=precondition,
                                delegate=current_delegate()))
        self._submit(ticket, create=True)
        return self._committed(ticket)

    def _submit(self, ticket: Ticket, *, create: bool) -> None:
        """Queue ``ticket`` in its store's next batch and wait for its answer, with
        the folder of its file open (``create``: made if missing)."""
        request = ticket.request
        path = request.path
        if create:
            ticket.parent = self._made_parent(request.agent, path, request.precondition)
        else:
            ticket.parent = self._parent(path, create=False)
        try:
            self._queues[path.store].submit(ticket)
        finally:
            os.close(ticket.parent)
            if ticket.staged is not None:
                self._staging.discard(ticket.staged)

    def _committed(self, ticket: Ticket) -> Committed:
        """What an answered ticket says, or its error raised."""
        answer = ticket.answer
        if answer.error is not None:
            raise answer.error
        if answer.missing:
            raise self._reads.not_found(ticket.request.path)
        assert answer.digest is not None
        return Committed(ticket.request.path, answer.digest, answer.size, answer.previous,
                         answer.commit, answer.unchanged)

    def _notify(self, path: MemPath) -> None:
        for listener in self.commit_listeners:
            with contextlib.suppress(Exception):  # a cache hint must never fail a commit
                listener(path)


def _hex(blob: pygit2.Oid | None) -> str | None:
    return None if blob is None else str(blob)
