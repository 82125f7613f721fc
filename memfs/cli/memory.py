"""``memfs session|task|decision ...``, ``memfs brief`` and ``memfs summary``: the memory
commands.

Registered into the parser by memfs/cli/__init__.py (`register`). Each command takes
``--store STORE`` (default: the agent's only structured store); commands that create
something print its id alone on stdout; ``--json`` prints the record.
"""

from __future__ import annotations

import sys

from memfs.control.client import Client
from memfs.control.client import jsonlite as jsonlite

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    Add = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]


def _call(client: Client, args: argparse.Namespace, op: str, **fields: Any) -> Any:
    return client.call(op, store=args.store, **fields)


def _emit(args: argparse.Namespace, result: Any, text: str) -> int:
    print(jsonlite.dumps(result) if args.json else text)
    return 0


def _first_line(text: str | None, width: int = 60) -> str:
    line = (text or "").strip().split("\n", 1)[0]
    return line if len(line) <= width else line[: width - 3] + "..."


# -- sessions ------------------------------------------------------------------------------


def session_start(client: Client, args: argparse.Namespace) -> int:
    made = _call(client, args, "session_start", goal=args.goal or "")
    return _emit(args, made, made["id"])


def session_checkpoint(client: Client, args: argparse.Namespace) -> int:
    done = _call(client, args, "session_checkpoint", session=args.session, note=args.note)
    return _emit(args, done, f"checkpoint added to {done['id']}")


def session_handoff(client: Client, args: argparse.Namespace) -> int:
    done = _call(client, args, "session_handoff", session=args.session,
                 summary=args.summary, next=args.next)
    return _emit(args, done, f"handed off {done['id']} (closed)")


def session_list(client: Client, args: argparse.Namespace) -> int:
    found = _call(client, args, "session_list", agent=args.by, state=args.state,
                  limit=args.n)["sessions"]
    lines = [f"{s['id']}  {s['state']:<6}  {s['last_at']}  {_first_line(s['goal'])}"
             for s in found]
    return _emit(args, {"sessions": found}, "\n".join(lines))


def session_show(client: Client, args: argparse.Namespace) -> int:
    session = _call(client, args, "session_show", session=args.session)
    lines = [f"session {session['id']} by {session['agent']} ({session['state']}), started "
             f"{session['started']}"]
    if session["goal"]:
        lines.append(f"goal: {session['goal']}")
    for entry in session["entries"]:
        if entry["kind"] == "checkpoint":
            lines.append(f"{entry['at']} checkpoint: {entry['note']}")
        else:
            lines.append(f"{entry['at']} handoff: {entry['summary']}\n  next: {entry['next']}")
    return _emit(args, session, "\n".join(lines))


def brief(client: Client, args: argparse.Namespace) -> int:
    result = client.call("brief", store=args.store_arg or args.store, max_bytes=args.max_bytes)
    if args.json:
        print(jsonlite.dumps(result))
    else:
        sys.stdout.write(result["markdown"])
    return 0


def summary(client: Client, args: argparse.Namespace) -> int:
    result = client.call("summary", store=args.store_arg or args.store)
    t, d, s = result["tasks"], result["decisions"], result["sessions"]
    return _emit(args, result, "\n".join((
        f"store      {result['store']}", f"notes      {result['notes']}",
        f"tasks      {t['open']} open, {t['claimed']} claimed, {t['expired']} expired, "
        f"{t['done']} done",
        f"decisions  {d['accepted']} accepted, {d['superseded']} superseded",
        f"sessions   {s['open']} open, {s['closed']} closed")))


# -- tasks ---------------------------------------------------------------------------------


def task_add(client: Client, args: argparse.Namespace) -> int:
    task = _call(client, args, "task_add", task=args.task, title=args.title,
                 body=args.body or "")
    return _emit(args, task, task["id"])


def task_list(client: Client, args: argparse.Namespace) -> int:
    found = _call(client, args, "task_list", status=args.status)["tasks"]
    lines = []
    for task in found:
        lease = task.get("lease") or {}
        holder = ""
        if task["status"] == "claimed":
            holder = f"{lease.get('agent')}, {task['lease_seconds_left'] // 60} min left"
        elif task["status"] == "expired":
            holder = f"{lease.get('agent')}'s lease expired {lease.get('expires_at')}"
        lines.append(f"{task['id']}  {task['status']:<7}  {holder}  {_first_line(task['title'])}")
    return _emit(args, {"tasks": found}, "\n".join(lines))


def task_show(client: Client, args: argparse.Namespace) -> int:
    task = _call(client, args, "task_show", task=args.task)
    lines = [f"{key}: {value}" for key, value in task.items() if key != "checkpoints"]
    lines += [f"checkpoint {c['at']} {c['agent']}: {c['note']}" for c in task["checkpoints"]]
    return _emit(args, task, "\n".join(lines))


def task_claim(client: Client, args: argparse.Namespace) -> int:
    task = _call(client, args, "task_claim", task=args.task, ttl=args.ttl, session=args.session)
    return _emit(args, task, f"claimed {task['id']} until {task['lease']['expires_at']}")


def task_checkpoint(client: Client, args: argparse.Namespace) -> int:
    task = _call(client, args, "task_checkpoint", task=args.task, note=args.note)
    return _emit(args, task, f"checkpoint on {task['id']}; lease until "
                             f"{task['lease']['expires_at']}")


def task_complete(client: Client, args: argparse.Namespace) -> int:
    task = _call(client, args, "task_complete", task=args.task, note=args.note)
    return _emit(args, task, f"completed {task['id']}")


def task_release(client: Client, args: argparse.Namespace) -> int:
    task = _call(client, args, "task_release", task=args.task, force=args.force)
    return _emit(args, task, f"released {task['id']}")


# -- decisions -----------------------------------------------------------------------------


def decision_record(client: Client, args: argparse.Namespace) -> int:
    record = _call(client, args, "decision_record", title=args.title, decision=args.decision,
                   reason=args.reason, context=args.context, consequences=args.consequences,
                   supersedes=args.supersedes)
    return _emit(args, record, record["id"])


def decision_list(client: Client, args: argparse.Namespace) -> int:
    found = _call(client, args, "decision_list", status=args.status)["decisions"]
    lines = [f"{d['id']}  {d['status']:<10}  {_first_line(d['title'])}"
             + (f"  (superseded by {d['superseded_by']})" if d["superseded_by"] else "")
             for d in found]
    return _emit(args, {"decisions": found}, "\n".join(lines))


def decision_show(client: Client, args: argparse.Namespace) -> int:
    from memfs.memory.decisions import describe

    record = _call(client, args, "decision_show", decision=args.decision)
    return _emit(args, record, describe(record))


# -- parsing -------------------------------------------------------------------------------


def register(add: Add, common: argparse.ArgumentParser) -> None:
    """Add the memory command groups and ``brief`` to the CLI's parser."""
    import argparse

    store = argparse.ArgumentParser(add_help=False, parents=[common])
    store.add_argument("--store", help="the structured store (default: your only one)")

    def group(name: str, text: str) -> Callable[..., argparse.ArgumentParser]:
        parser = add(name, lambda *_: 2, text)
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                        help=f"what to do with {name}s")

        def action(verb: str, func: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
            sub = actions.add_parser(verb, parents=[store], help=help_text,
                                     description=help_text)
            sub.set_defaults(func=func)
            return sub

        return action

    session = group("session", "sessions: start, checkpoint, handoff, list, show")
    start = session("start", session_start, "start a session; prints its id")
    start.add_argument("--goal", help="what this session is for")
    point = session("checkpoint", session_checkpoint,
                    "add a checkpoint (after meaningful progress, not only at the end)")
    point.add_argument("session", metavar="SESSION", help="the session's id (from start)")
    point.add_argument("note", metavar="NOTE", help="what was done or found so far")
    hand = session("handoff", session_handoff, "close the session with a handoff")
    hand.add_argument("session", metavar="SESSION", help="the session's id (from start)")
    hand.add_argument("--summary", required=True, help="what was done")
    hand.add_argument("--next", required=True, help="what should happen next")
    listed = session("list", session_list, "sessions, most recent first")
    listed.add_argument("--by", metavar="AGENT", help="only this agent's sessions")
    listed.add_argument("--state", choices=("open", "closed"),
                        help="only open or only closed sessions")
    listed.add_argument("-n", type=int, default=50, metavar="N",
                        help="at most N sessions (default 50)")
    shown = session("show", session_show, "one session with its entries")
    shown.add_argument("session", metavar="SESSION", help="the session's id")

    overview = add("brief", brief, "the start-of-session brief: handoffs, next action, tasks, "
                   "hazards, what changed since you read it")
    overview.add_argument("store_arg", nargs="?", metavar="STORE",
                          help="the structured store (default: your only one)")
    overview.add_argument("--store", help=argparse.SUPPRESS)
    overview.add_argument("--max-bytes", type=int, default=4096, metavar="N",
                          help="the brief's size at most, in bytes (default 4096)")

    counts = add("summary", summary, "how much the memory holds: notes, tasks, decisions and "
                 "sessions, counted")
    counts.add_argument("store_arg", nargs="?", metavar="STORE",
                        help="the structured store (default: your only one)")
    counts.add_argument("--store", help=argparse.SUPPRESS)

    task = group("task", "tasks with leases: add, list, show, claim, checkpoint, complete, "
                 "release")
    added = task("add", task_add, "add a task; prints its id")
    added.add_argument("task", metavar="ID", help="the new task's id, e.g. fix-login")
    added.add_argument("--title", required=True, help="one line: what is to be done")
    added.add_argument("--body", help="the details")
    tasks_listed = task("list", task_list, "tasks")
    tasks_listed.add_argument("--status", choices=("open", "claimed", "expired", "done"),
                              help="only the tasks in this state")
    task("show", task_show, "one task").add_argument("task", metavar="ID",
                                                     help="the task's id")
    claim = task("claim", task_claim, "claim a task (lease_held, exit 3, if another agent "
                 "holds it)")
    claim.add_argument("task", metavar="ID", help="the task's id")
    claim.add_argument("--ttl", default="60m", help="lease time: 45s, 30m, 2h (default 60m)")
    claim.add_argument("--session", help="the session this claim is part of")
    check = task("checkpoint", task_checkpoint, "note progress; extends the lease")
    check.add_argument("task", metavar="ID", help="the task's id")
    check.add_argument("note", metavar="NOTE", help="the progress made")
    complete = task("complete", task_complete, "mark the task done")
    complete.add_argument("task", metavar="ID", help="the task's id")
    complete.add_argument("--note", help="how it was done")
    release = task("release", task_release, "give the task up")
    release.add_argument("task", metavar="ID", help="the task's id")
    release.add_argument("--force", action="store_true",
                         help="release another agent's lease (delegates only)")

    decision = group("decision", "decision records: record, list, show")
    record = decision("record", decision_record, "record a decision; prints its id")
    record.add_argument("--title", required=True, help="one line naming the decision")
    record.add_argument("--decision", required=True, help="what was decided")
    record.add_argument("--reason", required=True, help="why")
    record.add_argument("--context", help="the situation it was decided in")
    record.add_argument("--consequences", help="what follows from it")
    record.add_argument("--supersedes", metavar="ID", help="the decision this one replaces")
    decided = decision("list", decision_list, "decisions, newest first")
    decided.add_argument("--status", choices=("accepted", "superseded", "all"),
                         default="accepted", help="which decisions (default: accepted)")
    decision("show", decision_show, "one decision").add_argument(
        "decision", metavar="ID", help="the decision's id")
