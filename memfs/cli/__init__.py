"""The ``memfs`` command line: `main`, the file commands (ls, cat, stat, write, edit,
rm, download, upload, grep) and the daemon's (serve, attach, detach, mcp) here, the
other groups each in a module that registers its commands into the parser:
`memfs.cli.history` (log, show, diff, restore), `memfs.cli.memory` (session, task,
decision, brief), `memfs.cli.recall` (recall, reindex), `memfs.cli.tokens` (token,
agent), `memfs.cli.mirror` (mirror status and push); ``python -m memfs.cli`` runs it
too. The file commands live here rather than in a module of their own so that
``memfs cat`` loads one module of memfs: each costs start-up (about 0.1 ms).
Client commands import only the small socket client, never the server stack, so
``memfs cat`` starts about as fast as Python itself. Exit codes (each error code's is
in memfs/errors.py): 0 ok, 1 other error, 2 bad usage or invalid input, 3 conflict,
4 permission denied, 5 not found, 6 the memory's disk is full, 7 a mirror push failed.
"""

from __future__ import annotations

import os
import sys

from memfs.control.client import Client, MemfsClientError
from memfs.control.client import jsonlite as jsonlite
from memfs.errors import ERRORS, EXIT_ERROR, EXIT_OK, EXIT_USAGE

# Not typing.TYPE_CHECKING, and argparse only when needed: each import costs start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from typing import Any

    from memfs.control.client.client import Committed, FileVersion

# each error code's exit code: its row of memfs/errors.py
EXIT_BY_CODE = {code: kind.exit_code for code, kind in ERRORS.items()
                if kind.exit_code is not None}


class Usage(Exception):
    """Bad command-line usage detected after argparse (exit 2)."""


def _out(args: argparse.Namespace, result: Any, text: str | None) -> None:
    if args.json:
        print(jsonlite.dumps(result))
    elif text:
        print(text)


def _note_change(path: str, result: FileVersion) -> None:
    if result.get("changed_since_last_read"):
        who = result.get("last_writer")
        by = f" (last written by {who})" if who else ""
        print(f"memfs: note: {path} changed since you last read it{by}", file=sys.stderr)


# -- client commands ------------------------------------------------------------------


def cmd_ls(client: Client, args: argparse.Namespace) -> int:
    paths = client.list(*args.globs)
    _out(args, {"paths": paths}, "\n".join(paths))
    return EXIT_OK


def cmd_cat(client: Client, args: argparse.Namespace) -> int:
    if getattr(args, "at", None) is not None:
        from memfs.cli.history import cmd_show

        return cmd_show(client, args)
    if args.offset is None and args.limit is None and not args.json:
        data, meta = client.read_bytes(args.path)
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        meta = client.read(args.path, offset=args.offset or 1, limit=args.limit)
        if args.json:
            _out(args, meta, None)
        else:
            sys.stdout.write(meta["text"])
            if meta.get("next_offset"):
                print(f"memfs: more lines: continue with --offset {meta['next_offset']}"
                      f" ({meta['total_lines']} lines in all)", file=sys.stderr)
    _note_change(args.path, meta)
    return EXIT_OK


def cmd_stat(client: Client, args: argparse.Namespace) -> int:
    info = client.stat(args.path)
    lines = [f"{key}: {_shown(key, value)}" for key, value in info.items()]
    _out(args, info, "\n".join(lines))  # --json: the values as they are
    return EXIT_OK


def _shown(key: str, value: object) -> str:
    """A stat field for people: times in UTC, yes/no, sizes in bytes, "-" for none."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if key.endswith("_at") and isinstance(value, int | float):
        import time

        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
    return f"{value} bytes" if key == "size" else str(value)


def _committed(args: argparse.Namespace, result: Committed, verb: str) -> int:
    verb = "unchanged" if result.get("unchanged") else verb  # it held this already
    _out(args, result, f"{verb} {result['path']} ({result['size']} bytes, {result['digest'][:16]})")
    return EXIT_OK


def cmd_write(client: Client, args: argparse.Namespace) -> int:
    data = sys.stdin.buffer.read()
    result = client.write(args.path, data, append=args.append, force=args.force)
    return _committed(args, result, "appended to" if args.append else "wrote")


def cmd_edit(client: Client, args: argparse.Namespace) -> int:
    return _committed(args, client.edit(args.path, args.scripts, force=args.force), "edited")


def cmd_rm(client: Client, args: argparse.Namespace) -> int:
    result = client.delete(args.path, force=args.force)
    _out(args, result, f"removed {result['path']}")
    return EXIT_OK


def cmd_download(client: Client, args: argparse.Namespace) -> int:
    """Copy PATH byte for byte to DEST (a file, or a directory to put it in), atomically
    (temp file + fsync + rename); the read records the version for a later upload."""
    from memfs.control.client.localfiles import LocalFileError, destination, save_atomically

    try:
        dest = destination(args.dest, args.path)
    except LocalFileError as error:
        raise Usage(str(error)) from None
    data, meta = client.read_bytes(args.path)
    try:
        save_atomically(dest, data)
    except LocalFileError as error:
        print(f"memfs: {error}", file=sys.stderr)
        return EXIT_ERROR
    _out(args, {**meta, "dest": dest}, f"downloaded {args.path} to {dest} ({len(data)} bytes)")
    _note_change(args.path, meta)
    return EXIT_OK


def cmd_upload(client: Client, args: argparse.Namespace) -> int:
    """Copy SRC byte for byte to PATH, version-checked like any write (exit 3 if PATH
    changed since this agent downloaded or read it, unless --force)."""
    from memfs.control.client.localfiles import LocalFileError, read_local

    try:
        data = read_local(args.src)
    except LocalFileError as error:
        raise Usage(str(error)) from None
    return _committed(args, client.write(args.path, data, force=args.force), "uploaded")


def cmd_grep(client: Client, args: argparse.Namespace) -> int:
    if args.json or _grep_wants(args.rg_args, "--json"):
        return _grep_json(client, args)
    result = client.search(args.rg_args)
    sys.stdout.write(result["output"])
    if result.get("stderr"):
        sys.stderr.write(result["stderr"])
    return int(result["exit_code"]) if result["exit_code"] in (0, 1) else EXIT_ERROR


def _grep_json(client: Client, args: argparse.Namespace) -> int:
    """``memfs grep --json`` (or ``memfs --json grep``): the structured matches, as
    JSON Lines (one match a line, as rg --json: ``jq`` takes each, ``head`` and ``wc -l``
    count them); rg's messages, and a note when matches were left out, on stderr; the
    exit codes of the text output."""
    ours = _grep_flags(args.rg_args, "--json")  # rg's --json is memfs's to give
    rg_args = [word for at, word in enumerate(args.rg_args) if at not in ours]
    result = client.search(rg_args, structured=True)
    sys.stdout.writelines(jsonlite.dumps(match) + "\n" for match in result["matches"])
    if result.get("stderr"):
        sys.stderr.write(result["stderr"])
    if result.get("truncated"):
        print("memfs: matches left out: the search's output limit was reached (narrow the "
              "search: paths, -g GLOB, -m NUM)", file=sys.stderr)
    return int(result["exit_code"]) if result["exit_code"] in (0, 1) else EXIT_ERROR


# -- local commands ---------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from memfs.daemon.serve import MountMode, main_serve  # the server stack: serving only

    if args.http is not None and not args.personal:
        raise Usage("--http is for --personal (a config sets [http] listen)")
    mount: MountMode = "none" if args.no_mount else "attach" if args.await_mount else "fusermount"
    return main_serve(config_path=args.config, demo=args.demo, mount=mount,
                      socket_path=args.socket, personal=args.personal, http_port=args.http)


def cmd_mount(args: argparse.Namespace) -> int:
    """``memfs mount URL MOUNTPOINT``: the remote mount (control/client/remote/)."""
    import logging

    from memfs.control.client.remote.mount import run

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="memfs mount: %(levelname)s %(message)s")
    return run(args.url, args.mountpoint, args.token_file, stale_ok=args.stale_ok,
               wait=args.wait, cafile=args.cacert, cache_bytes=args.cache_mib << 20)


def cmd_attach(args: argparse.Namespace) -> int:
    """``memfs attach`` and ``memfs detach``: the system service's root helper."""
    from pathlib import Path

    from memfs.config import ConfigError, load_config
    from memfs.errors import MemfsError
    from memfs.fuse.attach import attach, detach_mount

    try:
        config = load_config(Path(args.config))
        if args.command == "attach":
            attach(config, args.pid)
            print(f"memfs attach: mounted {config.mount} for process {args.pid}",
                  file=sys.stderr)
        elif detach_mount(config):
            print(f"memfs detach: unmounted {config.mount}", file=sys.stderr)
    except ConfigError as error:
        print(f"memfs {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (MemfsError, OSError) as error:
        print(f"memfs {args.command}: {error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def cmd_mcp(args: argparse.Namespace) -> int:
    if getattr(args, "mcp_action", None) == "config":
        from memfs.cli.mcpconfig import cmd_mcp_config

        if args.agent and args.agent != args.agent.lower():
            raise Usage(f"agent names are lowercase: use --agent {args.agent.lower()}")
        return cmd_mcp_config(args)
    from memfs.control.mcp.server import main_mcp

    return main_mcp(socket_path=args.socket, as_agent=args.as_agent,
                    http=args.mcp_http, local_dir=args.local_dir)


def version() -> str:
    """The installed memfs's version (its package metadata; ``memfs.__version__`` for
    a checkout used without installing it)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("memfs")
    except importlib.metadata.PackageNotFoundError:
        import memfs

        return memfs.__version__


def _version_action() -> type[argparse.Action]:
    import argparse

    class Version(argparse.Action):
        """``memfs --version``: computed only when asked (it reads package metadata)."""

        def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
            print(f"memfs {version()}")
            parser.exit()

    return Version


def _port(text: str) -> int:
    import argparse

    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return int(text)


# -- parsing ----------------------------------------------------------------------------


def _options(*wanted: str) -> argparse.ArgumentParser:
    """A parent parser with the global options ``wanted`` (of socket, remote (--url,
    --token-file, --cacert), as, agent, json):
    each command lists only those it takes."""
    import argparse

    parent = argparse.ArgumentParser(add_help=False)
    if "socket" in wanted:
        parent.add_argument("--socket", default=argparse.SUPPRESS, metavar="PATH",
                            help="the daemon's control socket (env MEMFS_SOCKET; default: "
                                 "your personal daemon's if you run one, else "
                                 "/run/memfs/control.sock)")
    if "remote" in wanted:
        parent.add_argument("--url", default=argparse.SUPPRESS, metavar="URL",
                            help="a daemon's HTTP listener, e.g. https://host:7800, instead "
                                 "of its socket (env MEMFS_URL; with --token-file)")
        parent.add_argument("--token-file", default=argparse.SUPPRESS, metavar="FILE",
                            help="with --url: the file (mode 0600) holding your bearer "
                                 "token (env MEMFS_TOKEN_FILE)")
        parent.add_argument("--cacert", default=argparse.SUPPRESS, metavar="FILE",
                            help="with an https --url: trust this CA file (PEM) instead of "
                                 "the system's, e.g. a self-signed daemon's (env "
                                 "MEMFS_CACERT)")
    if "as" in wanted:
        parent.add_argument("--as", dest="as_agent", default=argparse.SUPPRESS,
                            metavar="AGENT", help="act for AGENT (delegate uids only)")
    if "agent" in wanted:
        parent.add_argument("--agent", default=argparse.SUPPRESS, metavar="NAME",
                            help="the agent you are, in personal mode (env MEMFS_AGENT)")
    if "json" in wanted:
        parent.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                            help="print results as JSON")
    return parent


GREP_USAGE = "memfs grep [RG-FLAGS] PATTERN [PATH...]"


def _grep_help() -> str:
    """What ``memfs grep --help`` says after its usage: the paths, and the ripgrep
    flags the jail takes (jail/rg_args.py's allow-list) and refuses."""
    import textwrap

    from memfs.jail import rg_args

    def wrapped(words: list[str]) -> str:
        return textwrap.fill(" ".join(words), width=88, initial_indent="  ",
                             subsequent_indent="  ", break_on_hyphens=False)

    allowed = set(rg_args.VALUE_FLAGS) | rg_args.SWITCHES
    shorts = [f"-{char}" for char, flag in sorted(rg_args.SHORT.items())
              if flag in allowed and flag != "--help"]
    longs = sorted(flag for flag in allowed if flag != "--help")
    refused = [f"  {flag}: it {why}" for flag, why in sorted(rg_args.REFUSED.items())
               if flag != "--json"]  # memfs grep's own, below
    return "\n".join([
        "Real ripgrep over your stores, jailed (Landlock, seccomp): a search, not a read,",
        "so it records nothing as seen. PATH is STORE or STORE/PATH (or /memory/STORE/...);",
        "without one, every store you may read. Output paths read STORE/PATH. A store or",
        "path that does not exist is not found (exit 5) before rg runs. Exit codes: 0",
        "matches, 1 none, 2 a refused flag or a bad pattern, 5 not found.",
        "",
        "--json: the matches as JSON Lines, one a line: {path, line, text, submatches:",
        "[{start, end, match}] (offsets in characters of text), before, after: [{line,",
        "text}]} (not with -l, -c, --files, --passthru...). Try: memfs grep --json PATTERN",
        "| jq -r .path",
        "",
        "ripgrep flags it takes (any other is refused):",
        wrapped(shorts), wrapped(longs),
        "refused on purpose:", *refused,
        "",
        "What each flag does: memfs grep --rg-help (ripgrep's own help, from the daemon's",
        "jailed rg).",
    ])


def _parser(grep_help: bool = False) -> argparse.ArgumentParser:
    """The whole command line's parser (``grep_help``: with memfs grep's long help,
    which reads the jail's allow-list)."""
    import argparse  # here, not at the top: the fast path below does without it

    common = _options("socket", "remote", "as", "agent", "json")
    parser = argparse.ArgumentParser(
        prog="memfs", parents=[common],
        description="Shared memory for agents: plain files, version-checked writes.",
        epilog="exit codes: 0 ok, 1 error, 2 usage/invalid, 3 conflict, "
               "4 permission denied, 5 not found, 6 disk full, 7 mirror push failed",
    )
    parser.add_argument("--version", action=_version_action(), nargs=0, default=argparse.SUPPRESS,
                        help="print memfs's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="what to do (memfs COMMAND --help: its own help)")

    def add(name: str, func: Callable[..., int], help_text: str,
            parents: Sequence[argparse.ArgumentParser] = (common,),
            **how: Any) -> argparse.ArgumentParser:
        how = {"help": help_text, "description": help_text, **how}
        command = sub.add_parser(name, parents=list(parents), **how)
        command.set_defaults(func=func)
        return command

    serve = add("serve", cmd_serve, "run the daemon in the foreground (mount + control socket)",
                parents=())
    serve.add_argument("--config", metavar="FILE", help="TOML config file (with --personal: "
                       "optional, for advanced settings)")
    serve.add_argument("--socket", default=argparse.SUPPRESS, metavar="PATH",
                       help="listen on this control socket instead of the config's `socket`")
    serve.add_argument("--demo", action="store_true",
                       help="run on the embedded default: a private root with demo stores")
    serve.add_argument("--personal", action="store_true",
                       help="one user's agents, known by name: root $XDG_DATA_HOME/memfs, "
                            "mount ~/memory, socket $XDG_RUNTIME_DIR/memfs/control.sock")
    serve.add_argument("--http", nargs="?", const=7800, type=_port, metavar="PORT",
                       help="with --personal: also listen on http://127.0.0.1:PORT "
                            "(default 7800)")
    mounting = serve.add_mutually_exclusive_group()
    mounting.add_argument("--no-mount", action="store_true",
                          help="serve the control socket only, without the FUSE mount")
    mounting.add_argument("--await-mount", action="store_true",
                          help="mount nothing: open a FUSE session and wait for root to "
                          "mount it (`memfs attach`; the system service)")
    attach = add("attach", cmd_attach, "as root: mount the FUSE session of a daemon started "
                 "with --await-mount (the system service's ExecStartPost)", parents=())
    attach.add_argument("--config", required=True, metavar="FILE",
                        help="the daemon's TOML config file")
    attach.add_argument("--pid", type=int, required=True, help="the daemon's pid ($MAINPID)")
    detach = add("detach", cmd_attach, "as root: lazily unmount the mount of a daemon that "
                 "has stopped (the system service's ExecStopPost)", parents=())
    detach.add_argument("--config", required=True, metavar="FILE",
                        help="the daemon's TOML config file")
    mount = add("mount", cmd_mount, "mount a daemon's memory over HTTP(S), read-only, as the "
                "token's agent (a normal user, fusermount3; runs in the foreground)",
                parents=())
    mount.add_argument("url", metavar="URL", help="the daemon's [http] listener, e.g. "
                       "https://memory.example:8420")
    mount.add_argument("mountpoint", metavar="MOUNTPOINT", help="an empty folder of yours")
    mount.add_argument("--token-file", metavar="FILE", help="a file (mode 0600) holding the "
                       "agent's token (default: $MEMFS_TOKEN_FILE)")
    mount.add_argument("--wait", type=float, default=5.0, metavar="SECONDS",
                       help="how long a request keeps trying an unreachable daemon before "
                            "it fails with ETIMEDOUT (default 5)")
    mount.add_argument("--stale-ok", type=float, default=0.0, metavar="SECONDS",
                       help="while the daemon is unreachable, serve what was cached for "
                            "this long after losing it (default 0: never)")
    mount.add_argument("--cacert", metavar="FILE",
                       help="trust these certificates for https (default: the system's)")
    mount.add_argument("--cache-mib", type=int, default=64, metavar="MIB",
                       help="file contents kept for warm opens (default 64)")
    mcp = add("mcp", cmd_mcp, "run the MCP tool layer over stdio (over HTTP: /mcp on the "
              "daemon's [http] listener, with a bearer token)",
              parents=[_options("socket", "remote", "as", "agent")])
    mcp.add_argument("--http", dest="mcp_http", metavar="HOST:PORT",
                     help=argparse.SUPPRESS)  # gone: says where
    mcp.add_argument("--local-dir", metavar="DIR",
                     help="confine storage_download/storage_upload to local files under DIR")
    from memfs.cli.mcpconfig import CLIENTS

    mcp_actions = mcp.add_subparsers(dest="mcp_action", metavar="ACTION",
                                     help="none: serve MCP over stdio; `config CLIENT`: "
                                          "print the snippet that plugs it into a client")
    text = ("print the config snippet of an MCP client (the absolute path of memfs, the "
            "daemon's socket and the agent's name baked in)")
    config = mcp_actions.add_parser("config", parents=[_options("socket", "agent")],
                                    help=text, description=text)
    config.add_argument("client", choices=sorted(CLIENTS), metavar="CLIENT",
                        help=f"one of {', '.join(sorted(CLIENTS))}")
    ls = add("ls", cmd_ls, "list files: STORE/PATH per line (globs with **)")
    ls.add_argument("globs", nargs="*", metavar="GLOB",
                    help="STORE/PATH globs: *, ?, [...] within a name, ** across folders "
                         "(default: every file of your stores)")
    cat = add("cat", cmd_cat, "print a file and record its version as seen")
    cat.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    cat.add_argument("--offset", type=int, metavar="LINE", help="first line (1-based)")
    cat.add_argument("--limit", type=int, metavar="LINES", help="number of lines")
    cat.add_argument("--at", metavar="REV", help="the version at REV (a commit id, HEAD~N or "
                     "a time), from history")
    st = add("stat", cmd_stat, "show a file's digest, size, last writer and your seen digest")
    st.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    write = add("write", cmd_write, "write stdin to PATH (replace, or --append)")
    write.add_argument("path", metavar="PATH",
                       help="the file, as STORE/PATH (created with its folders if missing)")
    write.add_argument("--append", action="store_true", help="append instead of replacing")
    write.add_argument("--force", action="store_true", help="skip the version check")
    edit = add("edit", cmd_edit, "edit PATH with a GNU sed script (jailed, version-checked)")
    edit.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    edit.add_argument("-e", dest="scripts", action="append", required=True, metavar="SCRIPT",
                      help="a GNU sed script, e.g. 's/8/10/' (repeat -e for more; run with "
                           "--sandbox: no e, r or w commands)")
    edit.add_argument("--force", action="store_true", help="skip the version check")
    rm = add("rm", cmd_rm, "delete PATH (version-checked)")
    rm.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    rm.add_argument("--force", action="store_true", help="skip the version check")
    download = add("download", cmd_download, "copy PATH to a local file (records the version)")
    download.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    download.add_argument("dest", metavar="DEST",
                          help="a local file, or a local folder to put it in")
    upload = add("upload", cmd_upload, "copy a local file to PATH (version-checked)")
    upload.add_argument("src", metavar="SRC", help="the local file")
    upload.add_argument("path", metavar="PATH", help="the file, as STORE/PATH")
    upload.add_argument("--force", action="store_true", help="skip the version check")
    grep = add("grep", cmd_grep, "search with ripgrep: memfs grep [RG-FLAGS] PATTERN [PATH...]",
               usage=GREP_USAGE, description="Search your stores with ripgrep.",
               epilog=_grep_help() if grep_help else None,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    grep.add_argument("rg_args", nargs="*", metavar="RG-FLAGS PATTERN PATH",
                      help="ripgrep's flags (those below), the pattern, and STORE[/PATH]s "
                           "to search")
    grep.add_argument("--rg-help", action="store_true",
                      help="ripgrep's own help for its flags (from the daemon's jailed rg)")
    from memfs.cli import history, memory, mirror, recall, tokens

    history.register(add)
    recall.register(add)
    memory.register(add, common)
    tokens.register(add, common)
    tokens.register_agents(add, common)
    mirror.register(add, common)
    return parser


_VALUED = {"--socket": "socket", "--as": "as_agent", "--agent": "agent",  # global options
           "--url": "url", "--token-file": "token_file", "--cacert": "cacert"}


def _split_grep(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Everything after ``grep`` belongs to ripgrep, untouched by argparse, so rg flags
    such as ``-i`` or ``-C 2`` pass through. Returns (memfs argv, rg args or None)."""
    at = 0
    while at < len(argv) and argv[at].startswith("-"):  # skip global options
        at += 2 if argv[at] in _VALUED else 1
    if at < len(argv) and argv[at] == "grep":
        return argv[: at + 1], argv[at + 1 :]
    return argv, None


def _grep_wants(args: list[str], *flags: str) -> bool:
    """Whether ripgrep's arguments ``args`` hold one of ``flags`` as a flag: before
    ``--``, and not as the pattern of -e/--regexp."""
    return bool(_grep_flags(args, *flags))


def _grep_flags(args: list[str], *flags: str) -> set[int]:
    """Where ripgrep's arguments ``args`` hold one of ``flags`` as a flag (see
    `_grep_wants`)."""
    found = set()
    previous = ""
    for at, word in enumerate(args):
        if word == "--":
            break
        if word in flags and previous not in ("-e", "--regexp"):
            found.add(at)
        previous = word
    return found


class _Args:
    """What argparse would return, for the fast path (``vars()`` compares equal)."""

    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)


# command -> (positionals, boolean flags, integer options with their defaults, other
# options (absent here) with their defaults), for the fast path. A positional "*name"
# takes every word, "?name" at most one.
_SIMPLE: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, int | None],
                         dict[str, object]]] = {
    "cat": (("path",), (), {"offset": None, "limit": None}, {"at": None}),
    "ls": (("*globs",), (), {}, {}),
    "stat": (("path",), (), {}, {}),
    "write": (("path",), ("append", "force"), {}, {}),
    "rm": (("path",), ("force",), {}, {}),
    "brief": (("?store_arg",), (), {"max_bytes": 4096}, {"store": None}),
    "log": (("?target",), ("patch",), {"n": 20}, {"since": None, "author": None}),
    # grep's own words are split off first (_split_grep): here only "grep" is left
    "grep": ((), (), {}, {"rg_args": [], "rg_help": False}),
}
# command -> (its short options and the option each stands for, the options that
# have no long spelling: "--n" is refused, as argparse refuses it)
_SHORT: dict[str, tuple[dict[str, str], set[str]]] = {
    "log": ({"-n": "n", "-p": "patch"}, {"n"}),
}


def _fast_args(argv: list[str]) -> _Args | None:
    """Parse the common client commands without importing argparse (it drags in
    ``re`` and ``gettext``). Returns None for anything unusual (help, errors, other
    commands), which argparse then handles; a test checks both agree."""
    values: dict[str, object] = {}
    words = iter(argv)
    command = None
    rest: list[str] = []
    for word in words:
        name, eq, inline = word.partition("=")
        if name in _VALUED:
            value = inline if eq else next(words, None)
            if value is None or value.startswith("-"):
                return None
            values[_VALUED[name]] = value
        elif word == "--json":
            values["json"] = True
        elif command is None and word in _SIMPLE:
            command = word
        elif command is None:
            return None
        else:
            rest.append(word)
    if command is None:
        return None
    positionals, flags, integers, others = _SIMPLE[command]
    values.update({flag: False for flag in flags})
    values.update(integers)
    values.update(others)
    given: list[str] = []
    short, short_only = _SHORT.get(command, ({}, set()))
    items = iter(rest)
    for word in items:
        if word in short:
            option, named = short[word], True
        else:
            option = word[2:].replace("-", "_")
            named = word.startswith("--") and option not in short_only
        if named and option in flags:
            values[option] = True
        elif named and option in integers:
            number = next(items, "")
            if not number.isdigit():
                return None
            values[option] = int(number)
        elif word.startswith("-"):
            return None
        else:
            given.append(word)
    if positionals and positionals[0][0] in "*?":
        name = positionals[0][1:]
        if positionals[0][0] == "?" and len(given) > 1:
            return None
        values[name] = given if positionals[0][0] == "*" else (given[0] if given else None)
    elif len(given) != len(positionals):
        return None
    else:
        values.update(zip(positionals, given, strict=True))
    return _Args(command=command, func=_command(command), **values)


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    ours, rg_args = _split_grep(raw)
    args: Any = _fast_args(ours) or _parser().parse_args(ours)
    for name, default in (("socket", None), ("as_agent", None), ("agent", None),
                          ("url", None), ("token_file", None), ("cacert", None),
                          ("json", False)):
        if not hasattr(args, name):
            setattr(args, name, default)
    try:
        remote = _remote(args)
        args.as_agent = None if remote else _acting_as(args)
    except Usage as error:
        print(f"memfs: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "grep":
        args.rg_args = rg_args or []
        if _grep_wants(args.rg_args, "-h", "--help"):
            _parser(grep_help=True).parse_args([*ours, "--help"])  # memfs grep's; exits
        if _grep_wants(args.rg_args, "--rg-help"):
            args.rg_args = ["--help"]  # ripgrep's, from the daemon's rg
        if not args.rg_args:
            print(f"memfs grep: a PATTERN is required (usage: {GREP_USAGE}; more: memfs grep "
                  "--help)", file=sys.stderr)
            return EXIT_USAGE
    if args.command in ("serve", "mcp", "attach", "detach", "mount"):
        try:
            code: int = args.func(args)
        except Usage as error:
            print(f"memfs: {error}", file=sys.stderr)
            return EXIT_USAGE
        return code
    try:
        with _connect(args, remote) as client:
            code = args.func(client, args)
            return code
    except MemfsClientError as error:
        print(f"memfs: {error.code.replace('_', ' ')}: {error.message}", file=sys.stderr)
        return EXIT_BY_CODE.get(error.code, EXIT_ERROR)
    except Usage as error:
        print(f"memfs: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK


# commands that work only on the daemon's host, over its socket
LOCAL_ONLY = frozenset({"serve", "mcp", "attach", "detach", "token", "agent"})


def _remote(args: Any) -> str | None:
    """The daemon URL to use (``--url``, else ``MEMFS_URL`` unless ``--socket`` is
    given), or None for the socket. Raises Usage for what cannot go with a URL."""
    if args.command == "mount":
        return None  # a remote mount takes its URL itself
    if args.url is None and (args.socket or args.command in LOCAL_ONLY):
        return None  # MEMFS_URL is for the commands that can use it
    url = args.url or os.environ.get("MEMFS_URL") or None
    if url is None:
        return None
    if args.url and args.socket:
        raise Usage("--url and --socket name two daemons; give one")
    if args.command in LOCAL_ONLY:
        raise Usage(f"memfs {args.command} works only on the daemon's host, over its "
                    "socket: not with --url (or MEMFS_URL)")
    if args.as_agent or args.agent:
        raise Usage("--as and --agent do not apply with --url: the token names the agent")
    return str(url)


def _connect(args: Any, url: str | None) -> Client:
    """The client of the command: over HTTP to ``url`` (with the token file and CA
    file of the options or environment), else over the daemon's socket."""
    if url is None:
        return Client(args.socket, as_agent=args.as_agent)
    from memfs.control.client.http import CACERT_ENV, http_client
    from memfs.control.client.tokenfile import token_file_path

    client: Client = http_client(url, token_file_path(args.token_file),
                                 cafile=args.cacert or os.environ.get(CACERT_ENV) or None)
    return client


def _acting_as(args: Any) -> str | None:
    """The agent the request names: ``--as`` (a delegate acting for an agent),
    ``--agent`` or ``MEMFS_AGENT`` (the agent one is, in personal mode); on the wire
    both are ``as_agent``, and the daemon knows which it is. Raises Usage for two
    different names."""
    named = args.agent or (None if args.as_agent else os.environ.get("MEMFS_AGENT") or None)
    if args.as_agent and args.agent and args.as_agent != args.agent:
        raise Usage(f"--as {args.as_agent} and --agent {args.agent} name two agents; give one")
    return args.as_agent or named


_COMMANDS = {"cat": cmd_cat, "ls": cmd_ls, "stat": cmd_stat, "write": cmd_write, "rm": cmd_rm,
             "grep": cmd_grep}


def _command(name: str) -> Callable[..., int]:
    if name == "brief":
        from memfs.cli.memory import brief

        return brief
    if name == "log":
        from memfs.cli.history import cmd_log

        return cmd_log
    return _COMMANDS[name]
