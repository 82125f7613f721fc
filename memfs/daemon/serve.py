"""The daemon's composition root. `start` opens everything in the order the privilege
model needs (memfs/daemon/privilege.py): as root, the privileged phase (the root, the
mount point and the socket's directory handed to the service user; the control socket
and the HTTP listener bound), then the drop; then, as any user, the engine, the mount
and the lock-down. `run` then recovers and serves engine, jail, mount, control socket
and (with ``[http]``) the HTTP listener in one nursery, pushes each store's history to
its mirrors in the background (memfs/store/history/mirror.py), tells systemd when all are up
(``READY=1``), and turns SIGINT/SIGTERM into a clean shutdown (``STOPPING=1``; HTTP
requests in flight finish, the mount is unmounted, the socket removed, the jail
launcher stopped)."""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import trio

from memfs import places
from memfs.config import Config, ConfigError, load_config, personal_config
from memfs.control.ops.dispatcher import Dispatcher
from memfs.control.socket.server import (
    ControlServer,
    ServerLimits,
    SocketInUse,
    bind_listener,
    max_line_bytes,
)
from memfs.daemon import privilege
from memfs.daemon.sdnotify import notify
from memfs.errors import MemfsError
from memfs.jail import Jail, JailError, JailSettings, KernelLacks
from memfs.memory.model import Memory
from memfs.recall import Recall
from memfs.service_user import ServiceUser, service_user
from memfs.store import parts as store_parts
from memfs.store.engine import Engine
from memfs.store.fs import shared_root
from memfs.store.history.mirror import Mirrors

if TYPE_CHECKING:
    from memfs.control.http.app import BoundHttp
    from memfs.control.http.server import HttpLimits
    from memfs.fuse.mount import Mount
    from memfs.jail.userns import Namespaces

log = logging.getLogger("memfs")

# How often each store's generation is read to notice other daemons' changes: a change
# through another daemon is seen by this one's mount within about this (+ one read).
WATCH_INTERVAL = 0.25


def rg_binary() -> Path:
    """ripgrep from this environment (the `ripgrep` wheel) or else from PATH."""
    beside = Path(sys.prefix) / "bin" / "rg"
    found = beside if beside.exists() else shutil.which("rg")
    if found is None:
        raise MemfsError("ripgrep (rg) is not installed: run scripts/setup")
    return Path(found).resolve()


BUILD_SED_JAIL = Path(__file__).resolve().parents[2] / "scripts" / "build-sed-jail"


def build_sed_jail_script() -> Path | None:
    """scripts/build-sed-jail of this checkout, else the copy `pip install` put beside
    the interpreter (pyproject: script-files), else one on PATH."""
    beside = Path(sys.prefix) / "bin" / "build-sed-jail"
    for candidate in (BUILD_SED_JAIL, beside):
        if candidate.exists():
            return candidate
    found = shutil.which("build-sed-jail")
    return None if found is None else Path(found)


def ensure_sed_root(sed_root: Path) -> None:
    """Build the sed chroot with scripts/build-sed-jail when it is missing (the jail
    checks what it finds before every use)."""
    if (sed_root / "bin" / "sed").exists():
        return
    script = build_sed_jail_script()
    if script is None:
        raise MemfsError(f"the sed jail {sed_root} is missing; build it with "
                         "scripts/build-sed-jail")
    log.info("building the sed jail in %s", sed_root)
    done = subprocess.run([str(script), str(sed_root)], capture_output=True, text=True)
    if done.returncode != 0:
        raise MemfsError(f"building the sed jail failed: {done.stderr.strip()}")
    if done.stderr.strip():  # built, with a note (unchecked: no user namespaces)
        log.warning("%s", done.stderr.strip())


def start_jail(config: Config, namespaces: Namespaces | None = None) -> Jail:
    """Start the jail launcher (in ``namespaces``, made by root for this uid, if given);
    raises jail.JailUnavailable with a clear message (KernelLacks: the kernel lacks
    what the jail needs, saying what to enable)."""
    sed_root = config.jail.sed_root or config.root / "state" / "sed-root"
    ensure_sed_root(sed_root)
    settings = JailSettings(
        rg_path=rg_binary(),
        sed_root=sed_root,
        timeout_seconds=config.jail.timeout_seconds,
        output_limit_bytes=config.jail.search_output_limit,
        max_concurrent_runs=config.limits.max_jail_runs,
        queue_per_caller=config.limits.jail_queue_per_uid,
        queue_seconds=config.limits.jail_queue_seconds,
    )
    return Jail.start(settings, namespaces=namespaces)


def make_jail_namespaces(user: ServiceUser) -> Namespaces | None:
    """As root, before giving up root: the jail's namespaces for ``user`` (see
    jail/userns.py: made by a short-lived helper keeping CAP_SYS_ADMIN alone, where
    unprivileged user namespaces may be refused). None if they cannot be made (the
    jail then says why when it starts)."""
    from memfs.jail import userns

    try:
        return userns.make(as_ids=(user.uid, user.gid))
    except OSError as error:
        log.warning("cannot make the jail's namespaces as root: %s", error)
        return None


def start_tools(config: Config, namespaces: Namespaces | None) -> tuple[Jail | None, str]:
    """The jail, started and its level logged; or None and why, when the kernel lacks
    what it needs (the daemon serves on, refusing search and sed edits with it)."""
    try:
        jail = start_jail(config, namespaces)
    except KernelLacks as error:
        log.warning("%s", error)  # "search and sed edits are unavailable: ..."
        return None, str(error)
    log.info("%s", jail.level.describe())
    return jail, ""


MIN_CONNECTIONS = 8


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit now in
    force (unchanged if raising fails)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as error:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, error)
    return soft


def connection_limits(config: Config, fd_limit: int) -> tuple[ServerLimits, HttpLimits | None]:
    """The control server's limits and the HTTP listener's (None without ``[http]``):
    the config's, with ``max_connections`` and ``http_max_connections`` lowered in
    proportion (with a warning) so that both together and ``limits.fd_reserve`` fit
    in ``fd_limit``: neither way in can take the descriptors the other, the mount, the
    engine or the jail need. Raises MemfsError if fewer than MIN_CONNECTIONS of
    either would remain."""
    limits = config.limits
    room = fd_limit - limits.fd_reserve
    control = limits.max_connections
    http = limits.http_max_connections if config.http is not None else 0
    if control + http > room:
        control = room * control // (control + http)
        http = room - control if http else 0
        if control < MIN_CONNECTIONS or (config.http is not None and http < MIN_CONNECTIONS):
            raise MemfsError(
                f"the open-file limit ({fd_limit}) leaves no room for connections after "
                f"limits.fd_reserve ({limits.fd_reserve}): raise RLIMIT_NOFILE (ulimit -n) "
                "or lower fd_reserve")
        log.warning("connection limits lowered to fit the open-file limit (%d) and "
                    "fd_reserve (%d): max_connections %d%s", fd_limit, limits.fd_reserve,
                    control, f", http_max_connections {http}" if http else "")
    server = ServerLimits(
        max_line=max_line_bytes(config.max_file_size),
        max_file_size=config.max_file_size,
        max_line_unknown_uid=limits.max_line_unknown_uid,
        max_connections=control,
        max_connections_per_uid=limits.max_connections_per_uid,
        max_connections_unknown_uid=limits.max_connections_unknown_uid,
        max_connections_unknown=limits.max_connections_unknown,
        max_buffered_bytes=limits.max_buffered_bytes,
    )
    if config.http is None:
        return server, None
    from memfs.control.http.server import HttpLimits  # the HTTP stack, only with [http]

    return server, HttpLimits(
        max_connections=http,
        max_connections_per_address=min(limits.http_max_connections_per_address, http),
        head_seconds=limits.http_head_seconds,
        max_head_bytes=limits.http_max_head_bytes,
        body_seconds=limits.http_body_seconds,
        idle_seconds=limits.http_idle_seconds,
    )


# "fusermount": the daemon mounts the view itself; "attach": it opens a FUSE session
# that root mounts from outside (`memfs attach`: the system service); "none": no mount
MountMode = Literal["fusermount", "attach", "none"]


@dataclass
class Started:
    """What `start` opened, for `run` to serve."""

    limits: ServerLimits
    http_limits: HttpLimits | None
    control: socket.socket
    http: BoundHttp | None
    jail: Jail | None  # None: the kernel lacks what it needs, ``jail_off`` says what
    engine: Engine
    mount: Mount | None
    recall: Recall | None
    jail_off: str = ""


def start(config: Config, stack: contextlib.ExitStack, *,
          mount: MountMode = "fusermount") -> Started:
    """Open everything the daemon serves, each closed by ``stack``, in this order. As
    root only: the root, the mount point and the socket's directory handed to the
    service user (config ``user``; a personal memory's owner), and what root left in
    the root adopted. Then, as root or as the user who started the daemon: the HTTP
    listener and the control socket bound, and (as root) the jail's namespaces made for
    the service user and root dropped for good. From there on, exactly as for a start
    by a normal user: the jail started (or, on a kernel lacking what it needs, none:
    search and sed edits are then refused, saying what to enable), the engine
    opened (no store file read), the view mounted (through the setuid fusermount3;
    with ``mount="attach"`` only a FUSE session opened, which root mounts from
    outside), and the process locked down
    (no_new_privs, not dumpable, no capability) before `run` reads a store, a request
    or a connection."""
    limits, http_limits = connection_limits(config, raise_fd_limit())
    user = service_user(config) if os.geteuid() == 0 else None
    if user is not None:
        privilege.hand_over(config, user, mount=mount == "fusermount")
    bound = None
    if config.http is not None:
        bound = bind_http_listener(config)  # the TLS key may be readable by root only
        stack.callback(bound.close)
    control = bind_listener(config.socket)
    stack.callback(_remove_socket, config.socket)  # ours to remove, once bound
    stack.callback(control.close)
    namespaces = None
    if user is not None:
        # Made as root (where unprivileged user namespaces are refused, root may still
        # make them), used by the jail's launchers, which run as the service user.
        namespaces = make_jail_namespaces(user)
        if namespaces is not None:
            stack.callback(namespaces.close)
        privilege.drop(user)
    if config.personal is not None and os.geteuid() == config.personal.owner:
        # found from the uid alone too: MCP clients start `memfs mcp` without XDG_*
        links = places.publish(str(config.socket))
        stack.callback(places.unpublish, links, str(config.socket))
    jail, jail_off = start_tools(config, namespaces)  # the jail needs no privilege
    if jail is not None:
        stack.callback(jail.close)
    if any(spec.mirrors for spec in config.stores.values()):
        from memfs.store.history.restore import restore_from_mirrors

        restore_from_mirrors(config)  # a lost host's stores, from their backups
    engine = Engine(config, store_parts.build(config))  # seen, staging, stores, access
    stack.callback(engine.close)
    recall = None
    if config.recall.enabled:
        recall = Recall(engine)  # its slot of ROOT/state/recall; started once recovered
        stack.callback(recall.close)
    mounted: Mount | None = None
    if mount == "fusermount":
        from memfs.fuse.mount import mount as mount_view

        others = any(agent.uid != os.geteuid() for agent in config.agents.values())
        mounted = mount_view(engine, config.mount, allow_other=others)
    elif mount == "attach":
        from memfs.fuse.mount import open_unmounted

        mounted = open_unmounted(engine, config.mount)
    if mounted is not None:
        stack.callback(mounted.close)
    privilege.lock_down()
    return Started(limits, http_limits, control, bound, jail, engine, mounted, recall,
                   jail_off)


# Why a listener could not bind, in the words of the config it came from.
_BIND_ERRORS = {
    errno.EADDRINUSE: "the address is in use (another memfs, or another program, listens "
                      "there): stop it, or set another port",
    errno.EADDRNOTAVAIL: "this host has no such address",
    errno.EACCES: "a port below 1024 needs privilege: take one above",
}


def bind_http_listener(config: Config) -> BoundHttp:
    """``[http] listen`` bound (control/http/app.py's bind_http); raises MemfsError
    naming the address and the key it came from when it cannot be bound, OSError
    when the TLS certificate or key cannot be loaded (its message says which)."""
    from memfs.control.http.app import bind_http

    assert config.http is not None
    try:
        return bind_http(config.http)
    except OSError as error:
        if error.errno is None:  # the certificate or key: the message says it all
            raise
        key = "[http] listen" + (", from --http" if config.personal is not None else "")
        why = _BIND_ERRORS.get(error.errno, error.strerror or str(error))
        raise MemfsError(f"cannot listen on {config.http.listen} ({key}): {why}") from None


def _remove_socket(path: Path) -> None:
    """Remove our control socket; a socket in a folder the service user may not write
    (one it did not make, e.g. shared with root's files) is left for the next start
    to clear as stale."""
    try:
        path.unlink(missing_ok=True)
    except PermissionError:
        log.info("left %s: its folder is not writable by uid %d (the next start clears "
                 "it)", path, os.geteuid())


async def run(config: Config, started: Started, *,
              banner: Callable[[Engine], str] | None = None) -> None:
    """Serve what `start` opened until SIGINT/SIGTERM. ``banner`` is called in a
    worker thread once the engine has recovered, before serving (the demo seeds its
    stores there); what it returns is printed once serving."""
    engine, jail = started.engine, started.jail
    dispatcher: Dispatcher | None = None
    metrics = None
    mirrors = Mirrors(config)
    try:
        memory = Memory(engine)
        if config.http is not None:
            from memfs.control.http.metrics import (
                MeasuredControlServer,
                MeasuredDispatcher,
                Metrics,
            )

            metrics = Metrics()
            dispatcher = MeasuredDispatcher(engine, jail, memory, mirrors, started.recall,
                                            metrics=metrics, tools_off=started.jail_off)
            server: ControlServer = MeasuredControlServer(dispatcher, started.limits,
                                                          metrics=metrics)
            engine.observe_commits(metrics.commit_seconds.observe)
            if jail is not None:
                jail.observer = metrics.jail_run
            metrics.watch_mirrors(mirrors)
        else:
            dispatcher = Dispatcher(engine, jail, memory, mirrors, started.recall,
                                    tools_off=started.jail_off)
            server = ControlServer(dispatcher, started.limits)
        await trio.to_thread.run_sync(engine.recover)
        await trio.to_thread.run_sync(memory.repair)
        if started.recall is not None:  # after recovery: the catch-up sees what it found
            await trio.to_thread.run_sync(started.recall.start)
        # each store's pusher wakes at a commit (and looks at main every few seconds:
        # other daemons' commits, recovery's); it never holds up the commit
        engine.commit_listeners.append(mirrors.committed)
        mirrors.start()
        await sweep_seen_records(engine, first=True)
        text = None if banner is None else await trio.to_thread.run_sync(banner, engine)
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(started.control))
        async with trio.open_nursery() as nursery:
            changed_elsewhere: list[Callable[[str], None]] = []
            if started.recall is not None:
                changed_elsewhere.append(started.recall.store_changed)
            if started.mount is not None:
                from memfs.fuse.mount import serve_mount

                view = await nursery.start(serve_mount, started.mount)
                changed_elsewhere.append(view.cache.store_changed)
            nursery.start_soon(sweep_seen_records, engine)
            nursery.start_soon(maintain_history, engine)
            await nursery.start(server.serve, listener)
            nursery.start_soon(check_shared_root, config.root)
            http_stop = http_stopped = None
            where = f"mount {config.mount}, " if started.mount is not None else ""
            feed = None
            if config.http is not None:
                from memfs.control.http.app import build_app, serve_http
                from memfs.control.http.web.live import CommitFeed

                http_stop, http_stopped = trio.Event(), trio.Event()
                # the web view's live pages: commits (ours, and other daemons') as events
                feed = CommitFeed(trio.lowlevel.current_trio_token(), config.access)
                engine.commit_listeners.append(feed.committed)
                changed_elsewhere.append(feed.store_changed)
                app = build_app(dispatcher, config.http, metrics, feed)
                assert started.http is not None and started.http_limits is not None
                urls = await nursery.start(functools.partial(
                    serve_http, app, started.http, started.http_limits, stop=http_stop,
                    stopped=http_stopped, counted=metrics.http_connection if metrics else None))
                log.info("http: listening on %s", ", ".join(urls))
                where += f"http {', '.join(urls)}, "
                nursery.start_soon(flush_token_usage, dispatcher)
            if changed_elsewhere:
                nursery.start_soon(watch_other_daemons, engine, _each(changed_elsewhere))
            log.info("serving: %ssocket %s, root %s", where, config.socket, config.root)
            notify(f"READY=1\nSTATUS=serving: {where}socket {config.socket}")
            if text:
                print(text, file=sys.stderr, flush=True)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("%s received: shutting down", signal.Signals(signum).name)
                    notify("STOPPING=1")
                    if feed is not None:
                        feed.close()  # live pages' event streams end at once
                        engine.commit_listeners.remove(feed.committed)
                    if http_stop is not None and http_stopped is not None:
                        http_stop.set()  # requests in flight finish first (bounded)
                        with trio.move_on_after(HTTP_STOP_SECONDS):
                            await http_stopped.wait()
                    nursery.cancel_scope.cancel()
                    break
    finally:
        mirrors.close()  # a push under way is killed: its remote keeps what it had
        if config.http is not None and dispatcher is not None:
            _flush_tokens(dispatcher)


async def check_shared_root(root: Path) -> None:
    """Log one line about a root on GlusterFS: a warning when its options break
    freshness across hosts or cannot be read (memfs/store/fs/shared_root.py). In a
    worker thread, in the background: the gluster CLI may take seconds to answer."""
    try:
        found = await trio.to_thread.run_sync(shared_root.check_root, root)
    except Exception as error:  # a check must never stop the daemon
        log.warning("checking the root's file system failed: %r", error)
        return
    if found is not None:
        ok, message = found
        (log.info if ok else log.warning)("%s", message)


async def watch_other_daemons(engine: Engine, store_changed: Callable[[str], None], *,
                              interval: float = WATCH_INTERVAL) -> None:
    """Forever: read every store's generation each ``interval`` seconds and, for each
    store another daemon on the root changed, call ``store_changed(store)`` in a worker
    thread (it notifies the kernel, which may wait for our request loop), and once
    more at the next poll: a lookup that was in flight during the first call may have
    handed the kernel what it saw before the change."""
    again: set[str] = set()
    while True:
        await trio.sleep(interval)
        try:
            changed = set(await trio.to_thread.run_sync(engine.changed_elsewhere))
        except OSError as error:  # never stop serving for a hint
            log.warning("reading the stores' generations failed: %s", error)
            changed = set()
        for store in sorted(changed | again):
            await trio.to_thread.run_sync(store_changed, store)
        again = changed


def _each(callbacks: list[Callable[[str], None]]) -> Callable[[str], None]:
    """One callback that calls each of ``callbacks`` in turn (a failure of one is
    logged; the others still run)."""

    def call(store: str) -> None:
        for callback in callbacks:
            try:
                callback(store)
            except Exception as error:  # a hint must never stop the watch
                log.warning("noting another daemon's change of %s failed: %r", store, error)

    return call


HTTP_STOP_SECONDS = 10.0
TOKEN_FLUSH_INTERVAL = 60.0


def _flush_tokens(dispatcher: Dispatcher) -> None:
    try:
        dispatcher.tokens.flush_usage()
    except Exception as error:  # the last-use times are a convenience, never fatal
        log.warning("writing token last-use times failed: %s", error)


async def flush_token_usage(dispatcher: Dispatcher) -> None:
    """Write the tokens' last-use times once a minute, in a worker thread (so using a
    token never writes to disk itself)."""
    while True:
        await trio.sleep(TOKEN_FLUSH_INTERVAL)
        await trio.to_thread.run_sync(_flush_tokens, dispatcher)


SWEEP_INTERVAL = 6 * 3600.0


async def sweep_seen_records(engine: Engine, *, first: bool = False) -> None:
    """Remove stale seen records in a worker thread: once (``first``, before serving),
    else every SWEEP_INTERVAL. A failure is logged and retried at the next round."""
    while True:
        if not first:
            await trio.sleep(SWEEP_INTERVAL)
        try:
            removed = await trio.to_thread.run_sync(engine.sweep_seen)
            if removed:
                log.info("removed %d seen records of deleted files", removed)
        except OSError as error:
            log.warning("sweeping seen records failed: %s", error)
        if first:
            return


HISTORY_SYNC_INTERVAL = 1.0


async def maintain_history(engine: Engine) -> None:
    """Every second, in a worker thread: make recent history commits durable and pack
    loose objects when there are many (see memfs/store/history/maintenance.py). A
    failure is logged, never fatal: the files are the source of truth."""
    while True:
        await trio.sleep(HISTORY_SYNC_INTERVAL)
        try:
            await trio.to_thread.run_sync(engine.maintain)
        except Exception as error:  # pygit2 raises several kinds; the daemon must live on
            log.warning("history maintenance failed: %s", error)


def _sole_error(error: BaseException) -> BaseException:
    """The only error inside (nested) single-member exception groups, else the group."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


TOKEN_COMMAND = "memfs token create AGENT"  # the CLI command that makes a bearer token


def web_view(config: Config, *, personal: bool) -> str:
    """The banner's line on the web view: its URL and the command that makes the token
    to sign in with; without a listener, how to get one."""
    if config.http is None:
        how = "start with --http" if personal else "set [http] listen in the config"
        return f"Web view, REST and MCP over HTTP: off ({how})"
    scheme = "https" if config.http.tls_cert is not None else "http"
    return (f"Web view: {scheme}://{config.http.listen}/ui/ (sign in with a token: "
            f"{TOKEN_COMMAND}; REST under /v1, MCP at /mcp)")


def personal_banner(engine: Engine) -> str:
    """What ``memfs serve --personal`` prints once it serves (the daemon calls it once
    its engine has recovered, as the demo's)."""
    config = engine.config
    stores = ", ".join(sorted(config.stores))
    return f"""
memfs: your personal memory is served (stores: {stores}); root {config.root}
  mount {config.mount}/AGENT/STORE/...   socket {config.socket}
{web_view(config, personal=True)}
Each agent names itself on every call (a new name is registered on first use):
  memfs --agent claude ls          (or: export MEMFS_AGENT=claude)
  memfs mcp config claude          (or codex, gemini, cursor, vscode: its MCP config)
  memfs agent list
Stop with Ctrl-C.
"""


def system_banner(engine: Engine) -> str:
    """What ``memfs serve --config FILE`` prints once it serves."""
    config = engine.config
    stores = ", ".join(sorted(config.stores))
    return f"""
memfs: serving the stores {stores}; root {config.root}, socket {config.socket}
{web_view(config, personal=False)}
Stop with Ctrl-C.
"""


def main_serve(*, config_path: str | None, demo: bool, mount: MountMode,
               socket_path: str | None, personal: bool = False,
               http_port: int | None = None) -> int:
    """Entry point of ``memfs serve``; returns the process exit code."""
    logging.basicConfig(level=logging.INFO, format="memfs: %(message)s", stream=sys.stderr)
    banner = None
    try:
        if personal:
            config = personal_config(Path(config_path) if config_path else None,
                                     http_port=http_port)
        elif demo:
            from memfs.daemon.demo import demo_config, demo_uid, prepare_demo

            config = demo_config(demo_uid())
            banner = prepare_demo
        elif config_path:
            config = load_config(Path(config_path))
            banner = system_banner
        else:
            print("memfs serve: give --config FILE, --personal for this user's agents, or "
                  "--demo for the embedded default", file=sys.stderr)
            return 2
        if socket_path:
            config = config.model_copy(update={"socket": Path(socket_path)})
        if personal:
            if str(config.socket) == places.socket_path():  # e.g. /tmp/memfs-UID: ours, 0700
                places.private_dir(str(config.socket.parent))
            banner = personal_banner
        with contextlib.ExitStack() as stack:
            started = start(config, stack, mount=mount)
            try:
                trio.run(functools.partial(run, config, started, banner=banner))
            except BaseExceptionGroup as group:  # trio wraps a start-up error in a group
                raise _sole_error(group) from None
    except ConfigError as error:
        print(f"memfs: {error}", file=sys.stderr)
        return 2
    except (MemfsError, SocketInUse, JailError, OSError) as error:
        print(f"memfs: cannot start: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
