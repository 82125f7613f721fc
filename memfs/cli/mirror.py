"""``memfs mirror status|push [STORE]``: the git remotes each store's history is pushed
to in the background (memfs/store/history/mirror.py).

Registered into the parser by memfs/cli/__init__.py (`register`). ``status``: each
mirror of the stores you may read; ``push``: push now, wait, and exit 7
(``mirror_failed``) when a mirror is still not up to date.
"""

from __future__ import annotations

import time

from memfs.control.client import Client
from memfs.control.client import jsonlite as jsonlite

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    Add = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]


def _when(at: float | None) -> str:
    return "never" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def _print(mirrors: list[dict[str, Any]], json: bool) -> None:
    if json:
        print(jsonlite.dumps({"mirrors": mirrors}))
        return
    if not mirrors:
        print("no mirrors")
        return
    for m in mirrors:
        state = m["state"] + (", pushing" if m["pushing"] else "")
        print(f"{m['store']}  {m['url']}")
        print(f"  state: {state}; commits behind: {m['commits_behind']}; "
              f"last success: {_when(m['last_success'])} UTC")
        if m["retry_at"] is not None:
            print(f"  next try: {_when(m['retry_at'])} UTC")
        if m["last_error"] and m["state"] != "ok":
            print(f"  last error: {m['last_error']}")


def mirror_status(client: Client, args: argparse.Namespace) -> int:
    fields = {} if args.store is None else {"store": args.store}
    _print(client.call("mirror_status", **fields)["mirrors"], args.json)
    return 0


def mirror_push(client: Client, args: argparse.Namespace) -> int:
    fields = {} if args.store is None else {"store": args.store}
    _print(client.call("mirror_push", **fields)["mirrors"], args.json)
    return 0


def register(add: Add, common: argparse.ArgumentParser) -> None:
    """Add ``memfs mirror`` with its actions to the CLI's parser."""
    parser = add("mirror", lambda *_: 2, "the git remotes each store's history is pushed to")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    help="status or push (memfs mirror ACTION --help)")
    status_help = "each mirror: state, last success, commits behind, last error"
    status = actions.add_parser("status", parents=[common], help=status_help,
                                description=status_help)
    status.set_defaults(func=mirror_status)
    push_help = "push now (never forced) and wait: exit 7 if a mirror is still not up to date"
    push = actions.add_parser("push", parents=[common], help=push_help,
                              description=push_help)
    push.set_defaults(func=mirror_push)
    for sub in (status, push):
        sub.add_argument("store", nargs="?", metavar="STORE",
                         help="one store (default: each of yours with mirrors)")
