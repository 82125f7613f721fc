"""``memfs token create|list|revoke``: bearer tokens for the daemon's HTTP listener;
``memfs agent list|rename|retire``: the agents.

Registered into the parser by memfs/cli/__init__.py (`register`, `register_agents`). Delegate
uids only, each for the agents it may act for, and in personal mode the owner (the
daemon checks the caller's uid; anyone else gets exit 4). ``create`` prints the new
token alone on stdout, once: the daemon keeps only its hash.
"""

from __future__ import annotations

import sys
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
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(at))


def token_create(client: Client, args: argparse.Namespace) -> int:
    made = client.call("token_create", agent=args.agent, label=args.label or "",
                       expires_days=args.expires)
    print(jsonlite.dumps(made) if args.json else made["token"])
    expiry = f", expires {_when(made['expires'])} UTC" if made.get("expires") else ""
    print(f"memfs: token {made['id']} for agent {made['agent']}{expiry}; it is shown only "
          "now: keep it secret", file=sys.stderr)
    return 0


def token_list(client: Client, args: argparse.Namespace) -> int:
    tokens: list[dict[str, Any]] = client.call("token_list")["tokens"]
    if args.json:
        print(jsonlite.dumps({"tokens": tokens}))
        return 0
    print(f"{'ID':<12}  {'AGENT':<12} {'STATE':<7}  {'CREATED':<16}  {'LAST USED':<16}  "
          f"{'EXPIRES':<16}  LABEL")
    for t in tokens:
        print(f"{t['id']:<12}  {t['agent']:<12} {t['state']:<7}  {_when(t['created']):<16}  "
              f"{_when(t['last_used']):<16}  {_when(t['expires']):<16}  {t['label']}")
    return 0


def token_id(given: str) -> str:
    """The id of a token given by its id or as the token itself (``memfs_<id>_<secret>``:
    only the id is sent)."""
    if given.startswith("memfs_") and given.count("_") >= 2:
        return given.split("_", 2)[1]
    return given


def token_revoke(client: Client, args: argparse.Namespace) -> int:
    done = client.call("token_revoke", token=token_id(args.token))
    print(jsonlite.dumps(done) if args.json else f"revoked {done['id']} "
          f"(agent {done['agent']})")
    return 0


def agent_list(client: Client, args: argparse.Namespace) -> int:
    agents: list[dict[str, Any]] = client.call("agent_list")["agents"]
    if args.json:
        print(jsonlite.dumps({"agents": agents}))
        return 0
    if agents and "first_seen" in agents[0]:
        print(f"{'AGENT':<24} {'STATE':<24} {'FIRST SEEN':<16}  LAST SEEN")
        for a in agents:
            state = a.get("state", "active")
            if a.get("renamed_to"):
                state = f"renamed to {a['renamed_to']}"
            print(f"{a['agent']:<24} {state:<24} {_when(a['first_seen']):<16}  "
                  f"{_when(a['last_seen'])}")
    else:
        print(f"{'AGENT':<24} {'UID':>10}  STORES")
        for a in agents:
            stores = ", ".join(f"{s} ({access})" for s, access in sorted(a["stores"].items()))
            print(f"{a['agent']:<24} {a['uid']:>10}  {stores}")
    return 0


def _leases(moved: list[dict[str, Any]], verb: str) -> str:
    return "".join(f"\n  lease of {m['store']}/{m['task']} {verb} ({m['commit'] or '-'})"
                   for m in moved)


def agent_rename(client: Client, args: argparse.Namespace) -> int:
    done = client.call("agent_rename", agent=args.old, new=args.new)
    print(jsonlite.dumps(done) if args.json else
          f"renamed agent {done['renamed_from']} to {done['agent']} (its history keeps "
          f"the old name){_leases(done['leases'], 'moved')}")
    return 0


def agent_retire(client: Client, args: argparse.Namespace) -> int:
    done = client.call("agent_retire", agent=args.name, undo=args.undo)
    text = f"agent {done['agent']} is active again" if args.undo else \
        (f"retired agent {done['agent']} (its name is refused until `memfs agent retire "
         f"{done['agent']} --undo`){_leases(done['leases_released'], 'released')}")
    print(jsonlite.dumps(done) if args.json else text)
    return 0


def _days(text: str) -> float:
    import argparse

    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not 0 < days <= 3650:
        raise argparse.ArgumentTypeError("days must be more than 0 and at most 3650")
    return days


def register(add: Add, common: argparse.ArgumentParser) -> None:
    """Add ``memfs token`` with its actions to the CLI's parser."""
    parser = add("token", lambda *_: 2, "bearer tokens for the HTTP listener (delegates only)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    help="what to do with tokens")

    def action(verb: str, func: Callable[..., int], text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(verb, parents=[common], help=text, description=text)
        sub.set_defaults(func=func)
        return sub

    create = action("create", token_create, "create a token for AGENT; prints it once")
    create.add_argument("agent", metavar="AGENT", help="the agent the token acts as")
    create.add_argument("--label", metavar="TEXT", help="what the token is for")
    create.add_argument("--expires", type=_days, metavar="DAYS",
                        help="expire after DAYS days (default: never)")
    action("list", token_list, "tokens: id, agent, state, created, last used, expiry, label")
    revoke = action("revoke", token_revoke, "revoke a token by its id (from `token list`) "
                    "or the token itself")
    revoke.add_argument("token", metavar="ID|TOKEN", help="the token's id (12 hex digits), or "
                        "the token (only its id is sent)")


def register_agents(add: Add, common: argparse.ArgumentParser) -> None:
    """Add ``memfs agent list|rename|retire`` to the CLI's parser."""
    parser = add("agent", lambda *_: 2, "the agents (delegates; the owner in personal mode)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    help="what to do with agents")
    text = ("the agents: in personal mode when each was first and last seen (UTC), else uid "
            "and stores")
    listed = actions.add_parser("list", parents=[common], help=text, description=text)
    listed.set_defaults(func=agent_list)
    text = ("personal mode: agent OLD goes by NEW from now on (its seen records and leases "
            "go with it; its history keeps OLD; OLD is refused from now on)")
    rename = actions.add_parser("rename", parents=[common], help=text, description=text)
    rename.add_argument("old", metavar="OLD", help="the agent's name now")
    rename.add_argument("new", metavar="NEW", help="its new name (lowercase, never used)")
    rename.set_defaults(func=agent_rename)
    text = ("personal mode: retire agent NAME: its leases released (each in a commit), its "
            "name refused until reused on purpose with --undo")
    retire = actions.add_parser("retire", parents=[common], help=text, description=text)
    retire.add_argument("name", metavar="NAME", help="the agent to retire")
    retire.add_argument("--undo", action="store_true",
                        help="make a retired agent active again (reuse its name on purpose)")
    retire.set_defaults(func=agent_retire)
