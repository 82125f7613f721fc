"""Landing a store's batches of single-file changes (the steps of memfs/store/write/batch.py's
`Lander`; docs/design/group-commit.md, section 3).

A batch's tickets were each checked, hashed and staged (without fsync) by the thread
of their request. For the batch, its leader:

B1. orders it: tickets grouped by path, the groups in the order of their first ticket;
B2. makes its staged files durable: one fsync for a single one, one syncfs for more;
B3. takes the store lock (a dead holder's unfinished landing is finished first);
B4. checks every ticket in order, each against what the tickets before it left (the
    file's version, the agent's record), exactly as if they ran one after another:
    refused ones (a conflict, a failed precondition, not found, too large) and
    changes that change nothing are decided there. A path's appends to the file as it
    was form a *run*, written as one step; an append that follows another change of
    its path waits for the next batch (it would need that change's bytes);
B5. with history, builds one commit per accepted change, in order, each on the last,
    and writes them as one pack (memfs/store/history/writer.py: prepare_batch);
B6. sets the batch's intent (memfs/store/write/intents.py): each path's digest before and
    after each step, the commits, the records to set, the size before a run; without
    history only when the batch has a run or more than one step;
B7. lands the steps in order: renames, unlinks, and each run (the file marked as
    appending with its old size, all its bytes written with one pwrite and fsynced,
    then its new version record stamped and the mark removed);
B8. bumps the store's generation, sets the writers' records in ticket order, moves
    ``main`` to the last commit (memfs/store/write/store.py: finish_batch);
B9. releases the lock;
B10. makes what landed durable: one fsync of the folder for a single change (as a lone
    write always did), else one syncfs, which also covers the next batch's staged
    files when that batch is already queued (its B2);
B11. tells the commit listeners of every change that landed, in order, and answers.

A kill between any two steps leaves the batch's intent, which the next holder of the
store lock finishes from what the files hold (`Store.finish_batch`): every path holds
the digest of some prefix of the batch, whose records it sets and whose last commit
``main`` moves to. If a step fails in this daemon (a full disk, a folder in the way),
the steps before it stand, its tickets are refused with the error, and the tickets
after it are checked again in the next batch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pygit2

from memfs.store import crashpoints
from memfs.store.errors import (
    ABSENT,
    ConditionFailed,
    Conflict,
    InvalidInput,
    LastWrite,
    NoSpace,
    TooLarge,
)
from memfs.store.fs import backing
from memfs.store.fs.paths import MemPath
from memfs.store.history.repo import Planned, message_for
from memfs.store.read.versions import (
    Version,
    appended_digest,
    mark_appending,
    stamp,
    version_at,
    version_of,
)
from memfs.store.write.batch import APPEND, DELETE, REPLACE, Ticket
from memfs.store.write.staging import Staged, Staging
from memfs.store.write.store import BatchPlan, GroupPlan, Store

_UNSEEN = object()  # no record in a batch's overlay: read the agent's record on disk


def check_version(agent: str, path: MemPath, current: Version | None,
                  seen: Callable[[], str | None], expected: str | None,
                  precondition: Callable[[str | None], bool] | None, *,
                  force: bool) -> None:
    """Raise ConditionFailed unless ``precondition`` (when given) holds for ``current``
    (None: no file); then, unless ``force``, Conflict unless the agent's record (read
    by ``seen``), and ``expected`` when given, allow replacing it. The record allows it
    when it is the current digest, or when there is no file and the record says no
    version was seen (None or ABSENT); ``expected`` must name exactly what is there."""
    last = None if current is None else current.last_write
    if precondition is not None and \
            not precondition(None if current is None else current.digest):
        raise ConditionFailed(str(path), None if current is None else current.digest,
                              None, last, agent)
    if force:
        return
    record = seen()
    now = ABSENT if current is None else current.digest
    record_ok = record == now or (current is None and record is None)
    if not record_ok or (expected is not None and expected != now):
        failed = record if not record_ok else expected
        raise Conflict(str(path), None if current is None else current.digest, failed,
                       last, agent)


RUN, RENAME, UNLINK = "run", "rename", "unlink"


@dataclass(eq=False)
class _Step:
    """One step of a path in a batch: a rename (or unlink) for one ticket, or the run
    of its appends."""

    kind: str
    tickets: list[Ticket]
    digest: str | None  # the file's after the step (None: deleted)
    staged: Staged | None = None
    size: int = 0


@dataclass(eq=False)
class _Group:
    """A path's tickets in a batch, and what B4 decided for them."""

    path: MemPath
    tickets: list[Ticket]
    before: Version | None = None
    fd: int = -1  # the file, open for writing while its run lands
    steps: list[_Step] = field(default_factory=list)
    decided: list[tuple[Ticket, int]] = field(default_factory=list)  # (ticket, after)
    records: list[tuple[str, int, str | None]] = field(default_factory=list)
    run_git: str | None = None  # the blob id of the file after its run


@dataclass(eq=False)
class _Landed:
    """What B7 changed, for B10: the folders whose entries changed, and whether commits
    were written."""

    folders: dict[tuple[str, ...], int] = field(default_factory=dict)  # path -> a fd
    runs: list[int] = field(default_factory=list)  # files appended to, open
    history: bool = False
    head: str | None = None


class BatchLanding:
    """The lander of one store (see the module docstring)."""

    def __init__(self, store: Store, staging: Staging, *, check_size: Callable[[int], None],
                 notify: Callable[[MemPath], None]) -> None:
        self.store = store
        self.staging = staging
        self.check_size = check_size  # raises TooLarge
        self.notify = notify
        self._landed = _Landed()

    # -- B1-B2 -------------------------------------------------------------------------

    def prepare(self, batch: list[Ticket]) -> None:
        self._stage(batch)
        self._flush(batch, None)
        crashpoints.reached("batch.synced")

    def _stage(self, batch: list[Ticket]) -> None:
        """B1, and the staging of each replace's bytes (here, back to back, rather
        than in each request's thread: with one thread per connection, every system
        call a thread makes hands the GIL to another, a context switch each). A ticket
        whose file cannot be staged (a full disk) is answered so."""
        if len(batch) > 1:
            groups: dict[str, list[Ticket]] = {}
            for ticket in batch:
                groups.setdefault(ticket.request.path.rel, []).append(ticket)
            batch[:] = [ticket for tickets in groups.values() for ticket in tickets]
        sync = self.store.shared  # staged files other hosts may rename: fsynced each
        for ticket in batch:
            if ticket.request.kind == REPLACE and ticket.staged is None and not ticket.done:
                try:
                    request = ticket.request
                    ticket.staged = self.staging.stage_file(request.data or b"", request.agent,
                                                            request.git, sync=sync)
                except NoSpace as error:
                    ticket.finish(error)

    def _flush(self, batch: list[Ticket], landed: _Landed | None) -> None:
        """Make durable the staged files of ``batch`` that are not, and what ``landed``
        (folders whose entries changed, files appended to, commits): one fsync when
        there is one thing, else one syncfs. On a shared file system, which no syncfs
        reaches, each folder and file is fsynced (the staged files were when staged)."""
        pending = [t.staged for t in batch if t.staged is not None and not t.staged.durable]
        files = [] if landed is None else [*landed.folders.values(), *landed.runs]
        if self.store.shared:
            for fd in files:
                os.fsync(fd)
        else:
            history = landed is not None and landed.history
            things = [*files, *(staged.fd for staged in pending)]
            if len(things) == 1 and not history:
                os.fsync(things[0])
            elif things or history:
                self.store.syncfs()
        for staged in pending:
            staged.durable = True
            Staging.release(staged)

    # -- B3-B9 -------------------------------------------------------------------------

    def land(self, batch: list[Ticket]) -> list[Ticket]:
        start = time.perf_counter()
        self._landed = _Landed()
        groups: list[_Group] = []
        waiting: list[Ticket] = []
        own: list[Staged] = []  # staged here (an append whose file went meanwhile)
        try:
            with self.store.locked():
                groups = self._check(batch, waiting, own)
                if any(group.steps for group in groups):
                    waiting += self._land(groups)
                else:
                    self._conclude(groups, [0] * len(groups), set(), None, waiting)
                    for group in groups:
                        for agent, _, digest in group.records:
                            if digest is not None:  # changes that changed nothing
                                self.store.record(agent, group.path, digest)
        finally:
            for group in groups:
                if group.fd >= 0:
                    os.close(group.fd)
            for staged in own:
                self.staging.discard(staged)
            if self.store.observe_land is not None:  # once for each change that landed
                took = time.perf_counter() - start
                for ticket in batch:
                    if ticket.answer.landed:
                        self.store.observe_land(took)
        return waiting

    def _check(self, batch: list[Ticket], waiting: list[Ticket],
               own: list[Staged]) -> list[_Group]:
        """B4: decide every ticket, in order, over what the tickets before it did."""
        groups: dict[str, _Group] = {}
        for ticket in batch:
            if ticket.done:  # refused before (its file could not be staged)
                continue
            group = groups.get(ticket.request.path.rel)
            if group is None:
                group = groups[ticket.request.path.rel] = _Group(ticket.request.path, [])
            group.tickets.append(ticket)
        overlay: dict[tuple[str, str], str | None] = {}
        now = time.time()
        for group in groups.values():
            try:
                self._check_group(group, overlay, now, waiting, own)
            except InvalidInput as error:  # the path is no file memfs keeps
                for ticket in group.tickets:
                    ticket.answer.error = InvalidInput(str(error))
                    group.decided.append((ticket, 0))
                group.steps = []
                group.records = []
        return list(groups.values())

    def _check_group(self, group: _Group, overlay: dict[tuple[str, str], str | None],
                     now: float, waiting: list[Ticket], own: list[Staged]) -> None:
        path, name = group.path, group.path.parts[-1]
        first = group.tickets[0]
        if any(ticket.request.kind == APPEND for ticket in group.tickets):
            fd = backing.open_for_append(first.parent, name)
            if fd is not None:
                group.fd = fd
                group.before = version_of(fd)
        else:
            group.before = version_at(first.parent, name)
        current = group.before
        after = 0  # steps of the group so far
        run: _Step | None = None
        for index, ticket in enumerate(group.tickets):
            agent = ticket.request.agent

            def seen(agent: str = agent) -> str | None:
                """The agent's record of the path after the tickets before this one."""
                known = overlay.get((agent, path.rel), _UNSEEN)
                if known is _UNSEEN:
                    return self.store.seen.get(agent, path)
                return known  # type: ignore[return-value]

            try:
                if ticket.request.kind == APPEND:
                    if after > (1 if run is not None else 0):  # after another change
                        waiting.extend(group.tickets[index:])
                        del group.tickets[index:]
                        break
                    check_version(agent, path, current, seen, None,
                                  ticket.request.precondition, force=True)
                    if current is None:  # no file (any more): the append creates it
                        staged = ticket.staged
                        if staged is None:
                            staged = self.staging.stage_file(ticket.request.data or b"", agent,
                                                             self._git(ticket.request.data or b""))
                            own.append(staged)
                        group.steps.append(_Step(RENAME, [ticket], staged.digest, staged,
                                                 staged.size))
                        after += 1
                        ticket.answer.digest, ticket.answer.size, ticket.answer.previous = \
                            staged.digest, staged.size, None
                        current = Version(staged.digest, staged.size, LastWrite(agent, now))
                        group.records.append((agent, after, staged.digest))
                        overlay[(agent, path.rel)] = staged.digest
                    elif not ticket.request.data:  # nothing to add: no change
                        ticket.answer.digest, ticket.answer.size, ticket.answer.previous = \
                            current.digest, current.size, current.digest
                        ticket.answer.unchanged = True
                    else:
                        self.check_size(current.size + len(ticket.request.data))
                        knew = seen() == current.digest  # it had the whole old file
                        digest = appended_digest(group.fd, current, ticket.request.data)
                        if run is None:
                            run = _Step(RUN, [], None)
                            group.steps.append(run)
                            after += 1
                        run.tickets.append(ticket)
                        run.digest, run.size = digest, current.size + len(ticket.request.data)
                        ticket.answer.digest, ticket.answer.size, ticket.answer.previous = \
                            digest, run.size, current.digest
                        current = Version(digest, run.size, LastWrite(agent, now))
                        if knew:
                            group.records.append((agent, after, digest))
                            overlay[(agent, path.rel)] = digest
                elif ticket.request.kind == REPLACE:
                    staged = ticket.staged
                    assert staged is not None
                    freely = ticket.request.force or (ticket.request.create_freely
                                                      and current is None)
                    check_version(agent, path, current, seen, ticket.request.expected,
                                  ticket.request.precondition, force=freely)
                    if current is not None and current.digest == staged.digest:
                        # Already this version: nothing lands; the writer has seen it.
                        ticket.answer.digest, ticket.answer.size, ticket.answer.previous = \
                            current.digest, current.size, current.digest
                        ticket.answer.unchanged = True
                    else:
                        group.steps.append(_Step(RENAME, [ticket], staged.digest, staged,
                                                 staged.size))
                        after += 1
                        ticket.answer.digest, ticket.answer.size = staged.digest, staged.size
                        ticket.answer.previous = None if current is None else current.digest
                        current = Version(staged.digest, staged.size, LastWrite(agent, now))
                    group.records.append((agent, after, staged.digest))
                    overlay[(agent, path.rel)] = staged.digest
                else:
                    assert ticket.request.kind == DELETE
                    if current is None:
                        ticket.answer.missing = True
                    else:
                        check_version(agent, path, current, seen, ticket.request.expected,
                                      ticket.request.precondition, force=ticket.request.force)
                        group.steps.append(_Step(UNLINK, [ticket], None))
                        after += 1
                        ticket.answer.digest, ticket.answer.size, ticket.answer.previous = \
                            current.digest, 0, current.digest
                        current = None
                        group.records.append((agent, after, None))
                        overlay[(agent, path.rel)] = None
            except (Conflict, TooLarge, NoSpace) as error:  # ConditionFailed too
                ticket.answer.error = error
            group.decided.append((ticket, after))

    def _land(self, groups: list[_Group]) -> list[Ticket]:
        """B5-B8 for a batch with steps; returns the tickets to check again."""
        store = self.store
        waiting: list[Ticket] = []
        accepted = [ticket for group in groups for step in group.steps
                    for ticket in step.tickets]
        try:
            planned = self._planned(groups) if store.history is not None else []
            commits = store.prepare_batch(planned) if planned else [None] * len(accepted)
            crashpoints.reached("land.prepared")
            for ticket, commit in zip(accepted, commits, strict=True):
                ticket.answer.commit = commit
            plan = BatchPlan(
                [GroupPlan(group.path.rel, None if group.before is None else group.before.digest,
                           group.before.size if group.steps and group.steps[0].kind == RUN
                           and group.before is not None else None,
                           [(step.digest, step.tickets[-1].answer.commit) for step in group.steps])
                 for group in groups],
                [(agent, number, after, digest) for number, group in enumerate(groups)
                 for agent, after, digest in group.records])
            steps = sum(len(group.steps) for group in groups)
            if store.history is not None or steps > 1 or any(
                    group.steps and group.steps[0].kind == RUN for group in groups):
                store.set_batch_intent(plan)
            crashpoints.reached("land.intent")
        except NoSpace as error:  # nothing landed: refuse what was accepted
            self._conclude(groups, [0] * len(groups), {id(t) for t in accepted}, error,
                           waiting)
            return waiting
        landed: list[int] = []
        failed: tuple[set[int], BaseException | None] = (set(), None)
        for group in groups:
            count = 0
            if failed[1] is None:
                for step in group.steps:
                    try:
                        self._land_step(group, step)
                    except (OSError, InvalidInput, NoSpace) as error:
                        failed = ({id(t) for t in step.tickets}, _refusal(error))
                        break
                    count += 1
            landed.append(count)
        store.generation.bump()  # the files in place: other daemons notice (generation.py)
        store.finish_batch(plan, landed, crashed=False)
        self._landed.history = any(commits)
        self._landed.head = store.head if self._landed.history else None
        self._conclude(groups, landed, *failed, waiting)
        return waiting

    def _planned(self, groups: list[_Group]) -> list[Planned]:
        """The commits of the accepted tickets, in landing order."""
        planned = []
        for group in groups:
            rel = group.path.rel
            content = None  # a run's file so far
            for step in group.steps:
                for ticket in step.tickets:
                    request = ticket.request
                    if step.kind == RUN:
                        if content is None:
                            assert group.before is not None
                            content = backing.read_all(group.fd, group.before.size)
                        content += ticket.request.data or b""
                        data: bytes | None = content
                        group.run_git = str(pygit2.hash(content))
                        summary, op, forced = f"append {group.path}", "append", False
                    elif step.kind == UNLINK:
                        data = None
                        summary, op, forced = request.summary, request.op, request.force
                    else:  # a replace, or an append that creates its file
                        data = request.data
                        assert data is not None, "a store with history keeps the bytes"
                        summary, op, forced = request.summary, request.op, request.force
                    digest = None if data is None else ticket.answer.digest
                    planned.append(Planned([(rel, data)], request.agent, request.email,
                                           message_for(summary, op, digest, forced,
                                                       delegate=request.delegate)))
        return planned

    def _land_step(self, group: _Group, step: _Step) -> None:
        """B7 for one step: done whole, or (an exception) not at all."""
        name = group.path.parts[-1]
        ticket = step.tickets[-1]
        if step.kind == RENAME:
            assert step.staged is not None
            step.staged.move_to(ticket.parent, name)
            self._landed.folders.setdefault(group.path.parts[:-1], ticket.parent)
            crashpoints.reached("land.rename")
        elif step.kind == UNLINK:
            with contextlib.suppress(FileNotFoundError):  # gone by hand meanwhile
                os.unlink(name, dir_fd=ticket.parent)
            self._landed.folders.setdefault(group.path.parts[:-1], ticket.parent)
            crashpoints.reached("land.rename")
        else:
            self._append_run(group, step)

    def _append_run(self, group: _Group, step: _Step) -> None:
        """Append a run's bytes in place, so readers are never shown part of it: the
        file is marked (versions.appending) with its old size before the bytes are
        written, and its version record names the old size until they are all
        written, so a reader's version stays the old one and its reads stop at the old
        size; then the new record is stamped. The mark stays until B10 has made bytes
        and record durable (`durable`): a mark found at start means they may not be
        (a power loss), and the file is checked (Store.recover). A failure truncates
        it back."""
        assert group.before is not None and step.digest is not None
        fd, size = group.fd, group.before.size
        crashpoints.reached("append.prepared")
        mark_appending(fd, size)
        crashpoints.reached("append.marked")
        try:
            data = b"".join(ticket.request.data or b"" for ticket in step.tickets)
            view, offset = memoryview(data), size
            while view:
                written = os.pwrite(fd, view, offset)
                offset += written
                view = view[written:]
            crashpoints.reached("append.written")
            last = step.tickets[-1]
            stamp(fd, step.digest, last.request.agent, time.time(), group.run_git)
        except BaseException:
            os.ftruncate(fd, size)  # back to the old size: it never happened
            mark_appending(fd, None)
            raise
        self._landed.runs.append(fd)  # unmarked once durable
        group.fd = -1
        crashpoints.reached("append.stamped")

    def _conclude(self, groups: list[_Group], landed: list[int], failed: set[int],
                  error: BaseException | None, waiting: list[Ticket]) -> None:
        """Answer each ticket whose decision stands (what it was checked against
        landed), refuse those of a failed step with ``error``, and put the others back
        in ``waiting`` to be checked again."""
        for number, group in enumerate(groups):
            changed = {id(t) for step in group.steps[:landed[number]] for t in step.tickets}
            for ticket, after in group.decided:
                if id(ticket) in failed:
                    ticket.reset()
                    ticket.finish(error)
                elif after <= landed[number]:
                    ticket.answer.landed = id(ticket) in changed
                    ticket.finish()
                else:
                    ticket.reset()
                    waiting.append(ticket)

    def _git(self, data: bytes) -> str | None:
        return None if self.store.history is None else str(pygit2.hash(data))

    # -- B10-B11 -----------------------------------------------------------------------

    def durable(self, batch: list[Ticket], following: list[Ticket] | None) -> None:
        landed = self._landed
        try:
            if following is not None:
                self._stage(following)  # its staged files become durable with this flush
            self._flush(following or [], landed)
            for fd in landed.runs:
                mark_appending(fd, None)  # its bytes and record are on disk
        finally:
            for fd in landed.runs:
                os.close(fd)
            landed.runs = []
        if landed.head is not None and self.store.history is not None:
            self.store.history.made_durable(landed.head)
        crashpoints.reached("batch.durable")
        if following is not None:
            crashpoints.reached("batch.synced")

    def answer(self, batch: list[Ticket]) -> None:
        for ticket in batch:
            if ticket.answer.landed:
                self.notify(ticket.request.path)


def _refusal(error: BaseException) -> BaseException:
    """The error a failed step's tickets are refused with."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return NoSpace(f"the memory's disk is full ({os.strerror(error.errno)}); nothing "
                       "was changed")
    return error


