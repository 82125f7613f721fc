"""``memfs log``, ``show``, ``diff`` and ``restore``: the history commands of the CLI.

Registered into the parser by memfs/cli/__init__.py (`register`); each command gets the
connected client and the parsed arguments, and returns the exit code.
"""

from __future__ import annotations

import sys

from memfs.control.client import Client

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    Add = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]


def _print_json(result: Any) -> None:
    from memfs.control.client import jsonlite as jsonlite

    print(jsonlite.dumps(result))


def author(entry: dict[str, Any]) -> str:
    """Who made a change: the agent, and the delegate that made it for the agent
    (``codex (via uid 1001)``)."""
    via = entry.get("delegate")
    return entry["author"] if via is None else f"{entry['author']} (via uid {via})"


def cmd_log(client: Client, args: argparse.Namespace) -> int:
    entries = client.log(args.target, limit=args.n, since=args.since, author=args.author,
                         patch=args.patch)
    if args.json:
        _print_json({"entries": entries})
        return 0
    out = sys.stdout
    for entry in entries:
        forced = "  (forced)" if entry["forced"] else ""
        when = entry["time"].replace("T", " ").removesuffix("Z")
        out.write(f"{entry['short']}  {when}  {author(entry):<12} {entry['summary']}"
                  f"{forced}\n")
        if entry.get("patch"):
            out.write(entry["patch"].rstrip("\n") + "\n\n")
    return 0


def cmd_show(client: Client, args: argparse.Namespace) -> int:
    data, meta = client.show_bytes(args.path, args.at)
    if args.json:
        meta["text"] = data.decode("utf-8", "replace")
        _print_json(meta)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def cmd_diff(client: Client, args: argparse.Namespace) -> int:
    result = client.diff(args.path, args.rev)
    if args.json:
        _print_json(result)
    else:
        sys.stdout.write(result["diff"])
        if not result["diff"]:
            print(f"memfs: no difference ({result['old']} -> {result['new']})",
                  file=sys.stderr)
    return 0


def cmd_restore(client: Client, args: argparse.Namespace) -> int:
    result = client.restore(args.path, args.rev, force=args.force)
    if args.json:
        _print_json(result)
    else:
        what = "unchanged" if result.get("unchanged") else \
            "recreated" if result["created"] else "restored"
        print(f"{what} {result['path']} as of {args.rev} ({result['size']} bytes, "
              f"{result['digest'][:16]})")
    return 0


def register(add: Add) -> None:
    """Add the history commands to the CLI's parser."""
    log = add("log", cmd_log, "history, newest first: memfs log [PATH|STORE] [-n N] ...")
    log.add_argument("target", nargs="?", metavar="PATH|STORE",
                     help="a file, folder or store (default: every store you read)")
    log.add_argument("-n", type=int, default=20, metavar="N", help="at most N changes")
    log.add_argument("--since", metavar="WHEN", help="only changes at or after WHEN "
                     "(YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], UTC)")
    log.add_argument("--author", metavar="AGENT", help="only changes by AGENT")
    log.add_argument("-p", "--patch", action="store_true", help="show each change's diff")
    show = add("show", cmd_show, "print a file as it was at a revision")
    show.add_argument("path", metavar="PATH", help="the file, as STORE/PATH (also one "
                      "deleted since)")
    show.add_argument("--at", required=True, metavar="REV",
                      help="a commit id, HEAD~N, or a time such as 2026-11-30T10:00")
    diff = add("diff", cmd_diff, "a unified diff: since you last read PATH, or REV[..REV]")
    diff.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    diff.add_argument("rev", nargs="?", metavar="REV[..REV]",
                      help="from REV to now, or from one REV to another (a commit id, HEAD~N "
                           "or a time); default: since you last read PATH")
    restore = add("restore", cmd_restore,
                  "write PATH back as it was at REV (version-checked like a write)")
    restore.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    restore.add_argument("rev", metavar="REV", help="the revision to bring back: a commit id, "
                         "HEAD~N or a time such as 2026-11-30T10:00")
    restore.add_argument("--force", action="store_true", help="skip the version check")
