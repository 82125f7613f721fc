"""The store engine: versioned files, per-agent seen digests, atomic durable commits.

Layout under ROOT::

    stores/STORE/...            the content, exactly the files agents see
    state/seen/AGENT/STORE/...  digest each agent last read or wrote (seen.py)
    state/staging/DAEMON/       new bytes before they are renamed into place
    state/locks/STORE.lock      flock'd by the daemon committing to STORE

The engine is synchronous and thread-safe: the daemon calls it from trio worker
threads. Several engines (daemons) may share one ROOT: the store lock is an flock on
a shared file and every decision reads the shared on-disk state.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memfs.config import Config
from memfs.store import backing
from memfs.store.errors import Conflict, InvalidInput, NotFound, PermissionDenied, TooLarge
from memfs.store.generation import Generation
from memfs.store.globs import compile_glob, literal_store
from memfs.store.paths import MemPath
from memfs.store.seen import SeenRecords
from memfs.store.staging import Staged, Staging
from memfs.store.versions import Version, version_of


@dataclass(frozen=True)
class Pinned:
    """An open, pinned version of a file: reads through ``fd`` return exactly the
    bytes whose digest is ``version.digest``, whatever is committed later.
    ``previous`` is what the agent had seen before this read (None: never);
    ``stat`` is ``os.fstat(fd)`` when the pin was made by ``open_version``."""

    fd: int
    version: Version
    previous: str | None
    stat: os.stat_result | None = field(default=None, compare=False, repr=False)

    @property
    def changed_since_seen(self) -> bool:
        return self.previous is not None and self.previous != self.version.digest


@dataclass(frozen=True)
class Committed:
    path: MemPath
    digest: str
    size: int
    created: bool


@dataclass(frozen=True)
class FileInfo:
    path: MemPath
    digest: str
    size: int
    seen: str | None
    last_writer: str | None
    last_written_at: float | None


class _StoreLock:
    """Exclusive per-store lock: a thread lock for this process plus an flock on a
    shared file for other daemons on the root. Held only inside engine calls, so a
    client that vanishes can never strand it. A body that completes (a change was
    made; refusals raise) increments the store's generation before the lock is
    released, so other daemons notice the change (generation.py)."""

    def __init__(self, path: Path) -> None:
        self._thread_lock = threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.generation = Generation(self._fd)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._thread_lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
                self.generation.bump()
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)


class Engine:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.root = config.root
        state = self.root / "state"
        for directory in (self.root, state, state / "staging", state / "locks"):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # ROOT is private (0700); store content is o+r so jailed tools can read it via fds.
        os.chmod(self.root, 0o700)
        stores_dir = self.root / "stores"
        stores_dir.mkdir(mode=backing.DIR_MODE, exist_ok=True)
        self.seen = SeenRecords(state / "seen")
        self._store_fds: dict[str, int] = {}
        self._locks: dict[str, _StoreLock] = {}
        for store in config.stores:
            (stores_dir / store).mkdir(mode=backing.DIR_MODE, exist_ok=True)
            self._store_fds[store] = os.open(stores_dir / store, backing.DIR_FLAGS)
            self._locks[store] = _StoreLock(state / "locks" / f"{store}.lock")
        self._staging = Staging(state / "staging")
        self.commit_listeners: list[Callable[[MemPath], None]] = []

    def close(self) -> None:
        for fd in self._store_fds.values():
            os.close(fd)
        for lock in self._locks.values():
            lock.close()
        self._staging.close()
        self._store_fds.clear()

    # -- identity and access ----------------------------------------------------

    def agent_for(self, uid: int, as_agent: str | None = None) -> str:
        """Map a kernel-verified uid to an agent; a delegate uid may name another agent.

        Raises PermissionDenied for an unknown uid, a non-delegate using ``as_agent``,
        or an unknown agent name.
        """
        if as_agent is not None:
            if uid not in self.config.delegates:
                raise PermissionDenied(f"uid {uid} is not a delegate and cannot act as an agent")
            if as_agent not in self.config.agents:
                raise PermissionDenied(f"no agent named {as_agent!r}")
            return as_agent
        agent = self.config.agent_for_uid(uid)
        if agent is None:
            raise PermissionDenied(f"uid {uid} is not mapped to any agent")
        return agent

    def readable_stores(self, agent: str) -> list[str]:
        spec = self.config.agents[agent]
        return sorted(spec.stores)

    def store_dir(self, store: str) -> Path:
        return self.root / "stores" / store

    def store_fd(self, store: str) -> int:
        return self._store_fds[store]

    def changed_elsewhere(self) -> list[str]:
        """The stores that another daemon on the root changed since the last call
        (one read of each store's generation; blocking: call from a worker thread)."""
        return [store for store, lock in self._locks.items()
                if lock.generation.changed_elsewhere()]

    def check_access(self, agent: str, store: str, *, write: bool = False) -> None:
        """Raise PermissionDenied unless ``agent`` may read (or write) ``store``."""
        access = self.config.access(agent, store)
        if access is None:
            raise PermissionDenied(f"agent {agent!r} is not attached to store {store!r}")
        if write and access != "read_write":
            raise PermissionDenied(f"agent {agent!r} has read-only access to store {store!r}")

    # -- reads --------------------------------------------------------------------

    def _open_current(self, path: MemPath) -> tuple[int, os.stat_result] | None:
        """fd and fstat of the file's current version, or None if it does not exist.

        Raises InvalidInput when a component is a symlink or not a directory, or the
        file is not a regular file.
        """
        fd = backing.open_beneath(self._store_fds[path.store], path.parts)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InvalidInput(f"{path} is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    @backing.retry_stale
    def open_version(self, agent: str, path: MemPath, *, record: bool = True) -> Pinned:
        """Pin the current version of a file and (with ``record``) record its digest
        as seen by ``agent``. The caller owns ``Pinned.fd`` and must close it.

        Raises PermissionDenied, NotFound, InvalidInput (symlink, directory, special).
        """
        self.check_access(agent, path.store)
        opened = self._open_current(path)
        if opened is None:
            raise NotFound(f"{path} does not exist")
        fd, st = opened
        try:
            version = version_of(fd, st, remember=True)
            previous = self.seen.get(agent, path)
            if record and previous != version.digest:
                self.seen.put(agent, path, version.digest)
        except BaseException:
            os.close(fd)
            raise
        return Pinned(fd, version, previous, st)

    @backing.retry_stale
    def read_bytes(self, agent: str, path: MemPath) -> tuple[bytes, Pinned]:
        """The whole content of the current version, recorded as seen."""
        pinned = self.open_version(agent, path)
        with backing.closing_fd(pinned.fd):
            return _read_all(pinned.fd, pinned.version.size), pinned

    def info(self, agent: str, path: MemPath) -> FileInfo:
        """Digest, size and last writer of the current version; records nothing."""
        pinned = self.open_version(agent, path, record=False)
        os.close(pinned.fd)
        version = pinned.version
        return FileInfo(path, version.digest, version.size, pinned.previous,
                        version.last_write.agent, version.last_write.at)

    @backing.retry_stale
    def _read_current(self, path: MemPath) -> tuple[Version, bytes]:
        """The current version and its bytes. Raises NotFound, InvalidInput."""
        opened = self._open_current(path)
        if opened is None:
            raise NotFound(f"{path} does not exist")
        fd, st = opened
        with backing.closing_fd(fd):
            version = version_of(fd, st)
            return version, _read_all(fd, version.size)

    @backing.retry_stale
    def current_digest(self, path: MemPath) -> str | None:
        """Digest of what a read would return now (no access check, no record)."""
        opened = self._open_current(path)
        if opened is None:
            return None
        fd, st = opened
        with backing.closing_fd(fd):
            return version_of(fd, st).digest

    def list(self, agent: str, patterns: list[str]) -> list[str]:
        """``STORE/PATH`` of every regular file the agent may read that matches one of
        the globs (all files when there is none), sorted."""
        stores = self.readable_stores(agent)
        wanted = [p.removeprefix("/memory/").lstrip("/") for p in patterns] or ["**"]
        found: set[str] = set()
        for pattern in wanted:
            regex = compile_glob(pattern)
            limit = literal_store(pattern)
            if limit is not None and limit not in stores:
                if limit in self.config.stores:
                    raise PermissionDenied(f"agent {agent!r} is not attached to store {limit!r}")
                raise NotFound(f"no store named {limit!r}")
            for store in [limit] if limit else stores:
                for entry in backing.walk_files(self._store_fds[store]):
                    name = f"{store}/{entry.rel}"
                    if not name.isprintable() or _undecodable(name):
                        continue  # cannot be named in a request; the mount still shows it
                    if regex.match(name):
                        found.add(name)
        return sorted(found)

    # -- writes -------------------------------------------------------------------

    def write(self, agent: str, path: MemPath, data: bytes, *, append: bool = False,
              force: bool = False, expected: str | None = None) -> Committed:
        """Replace (or create) the file with ``data``, or append ``data`` to it.

        Replace is accepted only if the agent's seen digest equals the current one, or
        the file does not exist and the agent never saw a version of it, or ``force``;
        otherwise Conflict. ``expected``, when given, is the version the caller's own
        connection last saw, and must be current too: it tells apart two processes of
        one agent, which share the agent's record. Append needs no prior read and
        never loses data. Raises PermissionDenied, InvalidInput, TooLarge, Conflict.
        """
        self.check_access(agent, path.store, write=True)
        self._check_size(len(data))
        if append:
            return self._append(agent, path, data)
        with self._staging.stage(data, agent) as staged:
            return self._commit(agent, path, staged, base=expected, force=force)

    def edit(self, agent: str, path: MemPath, transform: Callable[[bytes], bytes], *,
             force: bool = False, expected: str | None = None) -> Committed:
        """Apply ``transform`` (e.g. a jailed sed) to the current bytes and commit the
        result through the same version check as ``write`` (``expected`` too). The
        check is made before the transform runs and again at commit; a transform error
        changes nothing."""
        self.check_access(agent, path.store, write=True)
        base, data = self._read_current(path)
        seen = self.seen.get(agent, path)
        if not force:
            for known in (seen, expected) if expected is not None else (seen,):
                if known != base.digest:
                    raise Conflict(str(path), base.digest, known, base.last_write)
        new = transform(data)
        self._check_size(len(new))
        with self._staging.stage(new, agent) as staged:
            return self._commit(agent, path, staged, base=base.digest, force=force)

    def delete(self, agent: str, path: MemPath, *, force: bool = False,
               expected: str | None = None) -> None:
        """Remove the file; version-checked like a replace (``expected`` too).
        Raises NotFound, Conflict."""
        self.check_access(agent, path.store, write=True)
        parent = self._parent(path, create=False)
        with backing.closing_fd(parent):
            with self._locks[path.store].held():
                current = _version_at(parent, path.parts[-1])
                if current is None:
                    raise NotFound(f"{path} does not exist")
                if not force:
                    if expected is not None and current.digest != expected:
                        raise Conflict(str(path), current.digest, expected, current.last_write)
                    self._check_seen(agent, path, current)
                os.unlink(path.parts[-1], dir_fd=parent)
                self.seen.forget(agent, path)
            os.fsync(parent)
        self._notify(path)

    # -- commit machinery ------------------------------------------------------------

    def _check_size(self, size: int) -> None:
        if size > self.config.max_file_size:
            raise TooLarge(f"content is {size} bytes; the limit is {self.config.max_file_size}")

    def _parent(self, path: MemPath, *, create: bool) -> int:
        try:
            return backing.walk_parent(self._store_fds[path.store], path.parts, create=create)
        except FileNotFoundError:
            raise NotFound(f"{path} does not exist") from None

    def _check_seen(self, agent: str, path: MemPath, current: Version | None) -> None:
        """Raise Conflict unless the agent's record allows replacing ``current``."""
        seen = self.seen.get(agent, path)
        if current is None:
            if seen is not None:  # it saw a version that someone deleted since
                raise Conflict(str(path), None, seen, None)
        elif seen != current.digest:
            raise Conflict(str(path), current.digest, seen, current.last_write)

    def _commit(self, agent: str, path: MemPath, staged: Staged, *, base: str | None,
                force: bool) -> Committed:
        parent = self._parent(path, create=True)
        name = path.parts[-1]
        with backing.closing_fd(parent):
            with self._locks[path.store].held():
                current = _version_at(parent, name)
                if not force:
                    if base is not None and (current is None or current.digest != base):
                        seen = self.seen.get(agent, path)
                        if current is None:
                            raise Conflict(str(path), None, seen, None)
                        raise Conflict(str(path), current.digest, seen, current.last_write)
                    self._check_seen(agent, path, current)
                staged.move_to(parent, name)
                self.seen.put(agent, path, staged.digest)
            # Outside the lock: other commits proceed while this one becomes durable;
            # the caller is answered only after the directory entry is on disk.
            os.fsync(parent)
        self._notify(path)
        return Committed(path, staged.digest, staged.size, created=current is None)

    def _append(self, agent: str, path: MemPath, data: bytes) -> Committed:
        parent = self._parent(path, create=True)
        name = path.parts[-1]
        with backing.closing_fd(parent):
            # Under the lock from read to rename, so no concurrent append is lost.
            with self._locks[path.store].held():
                old, old_bytes = _read_version_at(parent, name)
                self._check_size(len(old_bytes) + len(data))
                with self._staging.stage(old_bytes + data, agent) as staged:
                    staged.move_to(parent, name)
                # The appender knows the whole new file only if it had the old one.
                if old is None or self.seen.get(agent, path) == old.digest:
                    self.seen.put(agent, path, staged.digest)
            os.fsync(parent)
        self._notify(path)
        return Committed(path, staged.digest, staged.size, created=old is None)

    def _notify(self, path: MemPath) -> None:
        for listener in self.commit_listeners:
            with contextlib.suppress(Exception):  # a cache hint must never fail a commit
                listener(path)


# -- helpers -------------------------------------------------------------------------





def _undecodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate-escaped byte from a non-UTF-8 file name
        return True
    return False


def _read_all(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, max(size - offset, 65536), offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


@backing.retry_stale
def _read_version_at(parent: int, name: str) -> tuple[Version | None, bytes]:
    """The version and bytes of ``name`` (None and b"" when it does not exist)."""
    fd = backing.open_regular(parent, name)
    if fd is None:
        return None, b""
    with backing.closing_fd(fd):
        version = version_of(fd)
        return version, _read_all(fd, version.size)


@backing.retry_stale
def _version_at(parent: int, name: str) -> Version | None:
    fd = backing.open_regular(parent, name)
    if fd is None:
        return None
    with backing.closing_fd(fd):
        return version_of(fd)
