"""The memory model's operations on a structured store, each one indivisible step under
the store lock and one history commit (`Engine.update`), and its reads, served from
parsed folders kept in memory (memfs/memory/folders.py).

Every operation takes the agent (identified by the transport) and the store (None: the
agent's only structured store). Reads need read access, changes read_write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memfs.config import NAME_RE
from memfs.memory import decisions, sessions, tasks
from memfs.memory import records as r
from memfs.memory.folders import Folder
from memfs.store.engine import Engine, Plan, Reader
from memfs.store.errors import InvalidInput, NotFound, PermissionDenied


class Memory:
    def __init__(self, engine: Engine, clock: r.Clock = time.time) -> None:
        self.engine = engine
        self.clock = clock
        self._folders: dict[tuple[str, str], Folder[Any]] = {}
        parsers = {sessions.FOLDER: sessions.parse, tasks.FOLDER: tasks.parse,
                   decisions.FOLDER: decisions.parse}
        for store, spec in engine.config.stores.items():
            if spec.structured:
                for folder, parse in parsers.items():
                    self._folders[(store, folder)] = Folder(engine.store_fd(store), folder,
                                                            parse)

    # -- stores -------------------------------------------------------------------------

    def store_for(self, agent: str, store: str | None) -> str:
        """The structured store to use: ``store`` (checked), or the agent's only one.
        Raises InvalidInput (not structured, none, several), NotFound (not one of the
        agent's stores)."""
        if store is not None:
            self.engine.check_access(agent, store)
            if not self.engine.config.stores[store].structured:
                raise InvalidInput(f"store {r.literal(store)} is not structured (structured "
                                   "= true keeps sessions, tasks and decisions)")
            return store
        mine = [s for s in self.engine.readable_stores(agent)
                if self.engine.config.stores[s].structured]
        if len(mine) == 1:
            return mine[0]
        if not mine:
            raise InvalidInput("you have no structured store (one with structured = true)")
        raise InvalidInput(f"you have several structured stores "
                           f"({', '.join(r.literal(s) for s in mine)}): name the one to use "
                           "(`store`; --store on the command line)")

    def records(self, agent: str, store: str, folder: str) -> dict[str, Any]:
        self.engine.check_access(agent, store)
        return self._folders[(store, folder)].records()

    def _change(self, agent: str, store: str, op: str, summary: str | Callable[[Any], str],
                decide: Any, *, forced: bool = False) -> tuple[Any, str | None]:
        """One step: ``decide(read, now)`` returns (writes, result); ``summary`` is the
        commit's first line (or makes it from the result); ``forced``: it overrides
        another agent's claim."""

        def plan(read: Reader) -> Plan:
            writes, result = decide(read, self.clock())
            return Plan(writes, op, summary if isinstance(summary, str) else summary(result),
                        result, forced)

        return self.engine.update(agent, store, plan)

    # -- sessions -----------------------------------------------------------------------

    def session_start(self, agent: str, store: str | None, goal: str = "") -> dict[str, Any]:
        store = self.store_for(agent, store)
        r.text("goal", goal, required=False)

        def decide(read: Reader, now: float) -> tuple[dict[str, bytes | None], Any]:
            # XXXX is 16 random bits: with many sessions a day, draw until one is free
            for _ in range(64):
                session, text = sessions.new_session(agent, goal.strip(), now)
                path = sessions.path_of(session.id)
                if read(path) is None:
                    return {path: text.encode()}, session
            raise InvalidInput(f"{agent} has too many sessions today to name a new one")

        made, commit = self._change(agent, store, "session",
                                    lambda made: f"session: {agent} started {made.id}", decide)
        return {**made.as_dict(), "store": store, "commit": commit}

    def session_checkpoint(self, agent: str, store: str | None, session_id: str,
                           note: str) -> dict[str, Any]:
        store = self.store_for(agent, store)
        r.text("note", note)
        return self._add_entry(agent, store, session_id, "checkpoint",
                               lambda at: sessions.Entry(at, "checkpoint", note=note.strip()))

    def session_handoff(self, agent: str, store: str | None, session_id: str, summary: str,
                        next_step: str) -> dict[str, Any]:
        store = self.store_for(agent, store)
        r.text("summary", summary)
        r.text("next", next_step)
        return self._add_entry(
            agent, store, session_id, "handoff",
            lambda at: sessions.Entry(at, "handoff", summary=summary.strip(),
                                      next=next_step.strip()), close=True)

    def _add_entry(self, agent: str, store: str, session_id: str, kind: str, entry: Any,
                   close: bool = False) -> dict[str, Any]:
        path = sessions.path_of(session_id)

        def decide(read: Reader, now: float) -> tuple[dict[str, bytes | None], Any]:
            data = sessions.appended(read(path), session_id, agent, entry(r.iso_ms(now)),
                                     close=close)
            return {path: data}, sessions.parse(f"{session_id}.md", data)

        session, commit = self._change(agent, store, "session",
                                       f"session: {agent} {kind} {session_id}", decide)
        return {**session.as_dict(), "store": store, "commit": commit}

    def session_list(self, agent: str, store: str | None, *, owner: str | None = None,
                     state: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        store = self.store_for(agent, store)
        found = [s for s in self.records(agent, store, sessions.FOLDER).values()
                 if (owner is None or s.agent == owner) and (state is None or s.state == state)]
        found.sort(key=lambda s: (s.last_at, s.id), reverse=True)
        return [{k: v for k, v in s.as_dict().items() if k != "entries"} for s in found[:limit]]

    def session_show(self, agent: str, store: str | None, session_id: str) -> dict[str, Any]:
        store = self.store_for(agent, store)
        name = sessions.path_of(session_id).split("/", 1)[1]
        session: sessions.Session | None = self.records(agent, store, sessions.FOLDER).get(name)
        if session is None:
            raise NotFound(f"no session {r.literal(session_id)} in store {r.literal(store)}"
                           " (the brief and session_list name the sessions)")
        return session.as_dict()

    # -- tasks --------------------------------------------------------------------------

    def task_add(self, agent: str, store: str | None, task_id: str, title: str,
                 body: str = "") -> dict[str, Any]:
        store = self.store_for(agent, store)
        tasks.path_of(task_id)  # checks the id
        r.text("title", title, one_line=True)
        r.text("body", body, required=False)
        return self._task(agent, store, task_id, "added", lambda cur, now: tasks.created(
            cur, task_id, title.strip(), body, agent, now))

    def task_claim(self, agent: str, store: str | None, task_id: str, *, ttl: int,
                   session: str | None = None) -> dict[str, Any]:
        """Claim (or extend) the lease. ``session``, when given, must be an open
        session of ``agent`` in this store (checked in the same step as the claim):
        Closed when it was handed off, PermissionDenied when it is another agent's or
        there is none (the session is part of the request, not what it names: a
        NotFound would say the task is missing)."""
        store = self.store_for(agent, store)
        path = tasks.path_of(task_id)

        def claim(read: Reader, now: float) -> tuple[dict[str, bytes | None], Any]:
            if session is not None:
                try:
                    sessions.check_own(read(sessions.path_of(session)), session, agent)
                except NotFound:
                    raise PermissionDenied(
                        f"no session {session} of yours in this store: name one of your "
                        "open sessions (session_start makes one)") from None
            task = tasks.claimed(read(path), task_id, agent, session, ttl, now)
            return {path: tasks.render(task)}, tasks.Task(task).view(now)

        view, commit = self._change(agent, store, "task", f"task: {agent} claimed {task_id}",
                                    claim)
        return {**view, "store": store, "commit": commit}

    def task_checkpoint(self, agent: str, store: str | None, task_id: str,
                        note: str) -> dict[str, Any]:
        store = self.store_for(agent, store)
        r.text("note", note)
        return self._task(agent, store, task_id, "checkpoint",
                          lambda cur, now: tasks.checkpointed(cur, task_id, agent, note, now))

    def task_complete(self, agent: str, store: str | None, task_id: str,
                      note: str | None = None) -> dict[str, Any]:
        store = self.store_for(agent, store)
        if note is not None:
            r.text("note", note, required=False)
        return self._task(agent, store, task_id, "completed",
                          lambda cur, now: tasks.completed(cur, task_id, agent, note, now))

    def task_release(self, agent: str, store: str | None, task_id: str, *,
                     force: bool = False) -> dict[str, Any]:
        """Release the lease; ``force`` (the caller checked it may) releases another
        agent's, and the commit says so: ``task: claude's lease of fix-login released
        by codex, forced`` with ``Memfs-Forced: yes``."""
        store = self.store_for(agent, store)
        if not force:
            return self._task(agent, store, task_id, "released",
                              lambda cur, now: tasks.released(cur, task_id, agent, now,
                                                              force=False))
        path = tasks.path_of(task_id)

        def decide(read: Reader, now: float) -> tuple[dict[str, bytes | None], Any]:
            current = read(path)
            task = tasks.released(current, task_id, agent, now, force=True)
            before = tasks.parse(path.rsplit("/", 1)[-1], current or b"")
            lease = before.lease if before is not None else None
            holder = str(lease.get("agent")) if lease is not None else agent
            return {path: tasks.render(task)}, (tasks.Task(task).view(now), holder)

        def summary(result: tuple[Any, str]) -> str:
            holder = result[1]
            if holder == agent:
                return f"task: {agent} released {task_id}, forced"
            shown = holder if NAME_RE.fullmatch(holder) else r.literal(holder)
            return f"task: {shown}'s lease of {task_id} released by {agent}, forced"

        (view, _holder), commit = self._change(agent, store, "task", summary, decide,
                                               forced=True)
        return {**view, "store": store, "commit": commit}

    def _task(self, agent: str, store: str, task_id: str, verb: str,
              change: Any) -> dict[str, Any]:
        path = tasks.path_of(task_id)

        def decide(read: Reader, now: float) -> tuple[dict[str, bytes | None], Any]:
            task = change(read(path), now)
            return {path: tasks.render(task)}, tasks.Task(task).view(now)

        view, commit = self._change(agent, store, "task", f"task: {agent} {verb} {task_id}",
                                    decide)
        return {**view, "store": store, "commit": commit}

    def leases_held(self, holder: str) -> list[tuple[str, str]]:
        """(store, task id) of every task whose lease ``holder`` holds (expired too,
        while nobody took it), in every structured store."""
        held = []
        for (store, folder), records in sorted(self._folders.items()):
            if folder != tasks.FOLDER:
                continue
            for task in records.records().values():
                lease = task.lease
                if task.data.get("status") == "claimed" and lease is not None and \
                        lease.get("agent") == holder:
                    held.append((store, task.id))
        return held

    def lease_handed_over(self, store: str, task_id: str, holder: str,
                          to: str | None) -> dict[str, Any]:
        """Move ``holder``'s lease of the task to ``to`` (the holder renamed), or
        release it (``to`` None: the holder retired), in one commit by ``to`` (else
        by the holder) that says why. Raises LeaseLost when it is no longer held."""
        path = tasks.path_of(task_id)
        summary = (f"task: {holder}'s lease of {task_id} released: agent {holder} retired"
                   if to is None else
                   f"task: {holder}'s lease of {task_id} now {to}'s: agent {holder} renamed")

        def decide(read: Reader, now: float) -> tuple[dict[str, bytes | None], Any]:
            task = tasks.handed_over(read(path), task_id, holder, to)
            return {path: tasks.render(task)}, tasks.Task(task).view(now)

        view, commit = self._change(to or holder, store, "task", summary, decide,
                                    forced=to is None)  # a release for the holder
        return {**view, "store": store, "commit": commit}

    def task_list(self, agent: str, store: str | None, status: str | None = None
                  ) -> list[dict[str, Any]]:
        store = self.store_for(agent, store)
        if status is not None and status not in tasks.STATUSES:
            raise InvalidInput(f"bad status {status!r}: one of {', '.join(tasks.STATUSES)}")
        now = self.clock()
        views = [t.view(now) for t in self.records(agent, store, tasks.FOLDER).values()]
        views = [v for v in views if status is None or v["status"] == status]
        return sorted(views, key=lambda v: (v.get("created_at") or "", v["id"]))

    def task_show(self, agent: str, store: str | None, task_id: str) -> dict[str, Any]:
        store = self.store_for(agent, store)
        name = tasks.path_of(task_id).split("/", 1)[1]
        task: tasks.Task | None = self.records(agent, store, tasks.FOLDER).get(name)
        if task is None:
            raise NotFound(f"no task {r.literal(task_id)} in store {r.literal(store)} "
                           "(task_list shows the tasks)")
        return task.view(self.clock())

    # -- decisions ----------------------------------------------------------------------

    def decision_record(self, agent: str, store: str | None, *, title: str, decision: str,
                        reason: str, context: str | None = None,
                        consequences: str | None = None,
                        supersedes: str | None = None) -> dict[str, Any]:
        store = self.store_for(agent, store)
        r.text("title", title, one_line=True)
        for kind, value in (("decision", decision), ("reason", reason)):
            r.text(kind, value)
        for kind, optional in (("context", context), ("consequences", consequences)):
            if optional is not None:
                r.text(kind, optional, required=False)
        old_path = None if supersedes is None else decisions.path_of(supersedes)
        taken = {name[:-3] for name in self.records(agent, store, decisions.FOLDER)}
        new_id = decisions.new_id(title, self.clock(), taken)
        new_path = decisions.path_of(new_id)

        def decide(read: Reader, now: float) -> tuple[dict[str, bytes | None], Any]:
            if read(new_path) is not None:
                raise InvalidInput("a decision with this title was recorded just now; retry")
            writes: dict[str, bytes | None] = {new_path: decisions.recorded(
                title.strip(), decision.strip(), reason.strip(), context, consequences,
                agent, now, new_id, supersedes)}
            if old_path is not None and supersedes is not None:
                writes[old_path] = decisions.superseded(
                    read(old_path), supersedes, new_id,
                    lambda other: read(decisions.path_of(other)) is not None)
            return writes, writes[new_path]

        summary = (f"decision: {new_id} supersedes {supersedes}" if supersedes
                   else f"decision: {new_id}")
        data, commit = self._change(agent, store, "decision", summary, decide)
        parsed = decisions.parse(f"{new_id}.md", data)
        assert parsed is not None
        return {**parsed.as_dict(), "store": store, "commit": commit}

    def decision_list(self, agent: str, store: str | None,
                      status: str = "accepted") -> list[dict[str, Any]]:
        store = self.store_for(agent, store)
        if status not in ("accepted", "superseded", "all"):
            raise InvalidInput(f"bad status {status!r}: accepted, superseded or all")
        found = self.records(agent, store, decisions.FOLDER)
        by_id = {d.id: d for d in found.values()}
        links = decisions.links(by_id)
        views = [d.as_dict(decisions.superseder(d, by_id, links)) for d in by_id.values()]
        views = [v for v in views if status == "all" or v["status"] == status]
        return sorted(views, key=lambda v: v["id"], reverse=True)

    def decision_show(self, agent: str, store: str | None, decision_id: str) -> dict[str, Any]:
        store = self.store_for(agent, store)
        name = decisions.path_of(decision_id).split("/", 1)[1]
        found = self.records(agent, store, decisions.FOLDER)
        if name not in found:
            raise NotFound(f"no decision {r.literal(decision_id)} in store {r.literal(store)} "
                           "(decision_list shows the decisions)")
        by_id = {d.id: d for d in found.values()}
        record: decisions.Decision = found[name]
        return record.as_dict(decisions.superseder(record, by_id, decisions.links(by_id)))

    # -- start-up -----------------------------------------------------------------------

    def repair(self) -> list[str]:
        """Mend supersedes that an older memfs's crash cut in half (today a supersede
        lands whole or not at all): an old record not yet marked superseded is marked,
        and one naming a successor that does not exist is accepted again; as memfs.
        Returns the ids mended."""
        fixed = []
        for (store, folder), records in self._folders.items():
            if folder != decisions.FOLDER:
                continue
            by_id = {d.id: d for d in records.records().values()}
            for decision_id, successor in decisions.repairs(by_id):
                path = decisions.path_of(decision_id)
                ghost = by_id[decision_id].fields.get("superseded_by")
                what = (f"superseded by {successor}" if successor else
                        f"accepted again (its successor {ghost} does not exist)")

                def plan(read: Reader, decision_id: str = decision_id,
                         successor: str | None = successor, path: str = path,
                         what: str = what) -> Plan:
                    data = decisions.mended(read(path), decision_id, successor)
                    return Plan({} if data is None else {path: data}, "decision",
                                f"decision: {decision_id} {what} (repaired)")

                self.engine.update(None, store, plan)
                fixed.append(decision_id)
        return fixed
