"""The one sandbox policy and its single ``apply``.

A :class:`Policy` says declaratively what a jailed tool may do; :func:`apply` enforces
it on the calling process, default-deny, just before the tool is executed. It is
called in a freshly forked, single-threaded child of an unprivileged process (the
launcher: never root, no capability): the private views come from the jail's user
namespace (``jail.userns``), the tool runs under the launcher's own uid.

Everything that does not depend on the call (the compiled seccomp program, the files
the policy names, opened once, the list of capabilities to drop) can be computed
ahead by :func:`prepare`, once per tool in the launcher, so that the forked child only
makes system calls. The files are opened by the daemon (:func:`open_paths`), which
may reach paths the launcher's uid may not, and handed over. The policy types are
plain dataclasses, not pydantic models: the launcher process must stay small, since
the cost of each ``fork`` grows with it.
"""

from __future__ import annotations

import dataclasses
import os
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memfs.jail import kernel, landlock, mounts, privileges, seccomp, userns


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class Limits:
    """Kernel resource limits (soft = hard, so the tool cannot raise them)."""

    # CPU time in seconds; past it the kernel sends SIGXCPU, then SIGKILL.
    cpu_seconds: int = 10
    # Address space in bytes (malloc/mmap fail past it).
    address_space_bytes: int = 2 << 30
    # Largest file the tool may write: 0, it has no business writing files.
    file_size_bytes: int = 0
    # Processes + threads of the jail's uid (all calls share it, and every other process
    # of that uid counts too: the daemon's, when it runs as that uid); rg needs a few.
    nproc: int = 256
    # Open file descriptors (rg keeps one per thread plus directory handles).
    nofile: int = 1024

    def __post_init__(self) -> None:
        _require(self.cpu_seconds >= 1, "cpu_seconds must be >= 1")
        _require(self.address_space_bytes >= 64 << 20, "address_space_bytes must be >= 64 MiB")
        _require(self.file_size_bytes >= 0, "file_size_bytes must be >= 0")
        _require(self.nproc >= 1, "nproc must be >= 1")
        _require(self.nofile >= 16, "nofile must be >= 16")


@dataclass(frozen=True)
class Policy:
    """What one jailed process may do; everything not listed here is denied."""

    # Directory to chroot into (sed): a read-only clone of it becomes the root, in a
    # private mount namespace; or None (rg).
    chroot: str | None = None
    # Working directory entered (after the chroot or the store mounts), or None.
    cwd: str | None = None
    # Directories shown to the tool (rg's stores), as (name, path, fd): in a private
    # mount namespace, a fresh tmpfs is mounted on ``cwd`` and each directory, looked
    # up as ``path`` beneath ``stores_dir`` and checked to be the directory ``fd`` (an
    # open directory fd, O_PATH is fine), is bind-mounted there as ``cwd/name``,
    # read-only, nosuid, nodev, noexec. Landlock grants reads beneath each fd (see
    # ``landlock.create_ruleset``). Needs cwd and stores_dir.
    stores: tuple[tuple[str, str, int], ...] = ()
    # An open directory fd every store is beneath (or is), which the uid may search.
    stores_dir: int | None = None
    # Other already-open directory fds (O_PATH is fine) the tool may read beneath
    # (Landlock READ_FILE | READ_DIR).
    read_fds: tuple[int, ...] = ()
    # Paths (inside the chroot, if any) readable beneath: shared libraries, ld.so.cache,
    # the locale. Read-only.
    read_paths: tuple[str, ...] = ()
    # Files that may be executed (Landlock READ_FILE | EXECUTE): the tool binary and its
    # ELF loader, nothing else.
    exec_paths: tuple[str, ...] = ()
    # Kernel resource limits.
    limits: Limits = Limits()
    # Wall-clock limit, enforced by the launcher (SIGKILL of the process group).
    timeout_seconds: float = 10.0
    # SIGKILL the tool when the process that forked it (the launcher) dies.
    die_with_parent: bool = False

    def __post_init__(self) -> None:
        _require(self.timeout_seconds > 0, "timeout_seconds must be > 0")
        _require(not self.stores or self.cwd is not None, "stores need a cwd to be mounted on")
        _require(not self.stores or self.stores_dir is not None,
                 "stores need a stores_dir to be looked up from")
        _require(not (self.stores and self.chroot), "stores cannot be mounted in a chroot")
        for name, _path, _fd in self.stores:
            mounts.check_name(name)

    def replace(self, **changes: Any) -> Policy:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        """The inverse of :meth:`to_json`; unknown keys are an error (TypeError)."""
        values = dict(data)
        values["limits"] = Limits(**values.get("limits", {}))
        for key in ("read_fds", "read_paths", "exec_paths"):
            values[key] = tuple(values.get(key, ()))
        values["stores"] = tuple(
            (str(n), str(path), int(fd)) for n, path, fd in values.get("stores", ())
        )
        return cls(**values)


@dataclass(frozen=True)
class Opened:
    """The files a policy names, opened (O_PATH, close-on-exec) by :func:`open_paths`."""

    # The chroot directory, or None.
    root: int | None
    # (fd, Landlock rights) for read_paths then exec_paths.
    rules: tuple[tuple[int, int], ...]

    def fds(self) -> list[int]:
        """Every fd, in the order :meth:`from_fds` takes them."""
        return ([] if self.root is None else [self.root]) + [fd for fd, _ in self.rules]

    @staticmethod
    def count(policy: Policy) -> int:
        """How many fds :func:`open_paths` opens for ``policy``."""
        return (policy.chroot is not None) + len(policy.read_paths) + len(policy.exec_paths)

    @classmethod
    def from_fds(cls, policy: Policy, fds: Sequence[int]) -> Opened:
        """The inverse of :meth:`fds` for ``policy`` (the fds received from the daemon)."""
        rights = _rule_rights(policy)
        if len(fds) != cls.count(policy):
            raise ValueError("wrong number of file descriptors for the policy")
        root = fds[0] if policy.chroot is not None else None
        rules = fds[1:] if policy.chroot is not None else fds
        return cls(root, tuple(zip(rules, rights, strict=True)))

    def close(self) -> None:
        for fd in self.fds():
            os.close(fd)


def _rule_rights(policy: Policy) -> list[int]:
    read = landlock.FS_READ_FILE | landlock.FS_READ_DIR
    execute = landlock.FS_READ_FILE | landlock.FS_EXECUTE
    return [read] * len(policy.read_paths) + [execute] * len(policy.exec_paths)


def open_paths(policy: Policy) -> Opened:
    """Open the chroot directory and the rule paths (inside the chroot, if any: its
    tree is checked to hold no symlink) as O_PATH fds, close-on-exec. Raises OSError."""
    opened: list[int] = []
    try:
        if policy.chroot is not None:
            opened.append(os.open(policy.chroot, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        for path in (*policy.read_paths, *policy.exec_paths):
            full = os.path.join(policy.chroot, path.lstrip("/")) if policy.chroot else path
            opened.append(os.open(full, os.O_PATH | os.O_CLOEXEC))
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    return Opened.from_fds(policy, opened)


@dataclass(frozen=True)
class Prepared:
    """The call-independent part of a policy, computed by :func:`prepare`."""

    level: kernel.Level
    opened: Opened
    seccomp: seccomp.Program
    capabilities: range
    # The jail's namespaces (jail.userns): the user namespace, joined to make the
    # private views, and the network namespace runs join below Landlock ABI 6.
    namespaces: userns.Namespaces
    # Below Landlock ABI 6: the calling process already joined the namespaces and is
    # PID 1 of its own PID namespace (:func:`isolate`, done ahead of the call).
    isolated: bool = False

    @property
    def abi(self) -> int:
        """The Landlock ABI the jail runs at."""
        return self.level.abi

    @property
    def path_rules(self) -> tuple[tuple[int, int], ...]:
        return self.opened.rules

    def close(self) -> None:
        """Close the opened files (not the namespaces: they belong to whoever made them)."""
        self.opened.close()


def prepare(
    policy: Policy,
    seccomp_code: bytes | None = None,
    *,
    opened: Opened | None = None,
    namespaces: userns.Namespaces | None = None,
    level: kernel.Level | None = None,
) -> Prepared:
    """Take the level the jail runs at (``level``, or ``kernel.detect()`` here; it must
    have Landlock and seccomp), the seccomp program (``seccomp_code``, as compiled by
    ``seccomp.compiled_filter`` for that level, or compiled here), the files of the
    policy (``opened``, or :func:`open_paths` here), the jail's namespaces
    (``namespaces``, or ``userns.make()`` here) and list the capabilities. Raises
    OSError or ValueError. The result is reused by every :func:`apply` of this policy."""
    at = kernel.detect() if level is None else level
    missing = at.missing()
    if missing is not None:
        raise OSError(missing)
    code = seccomp_code
    program = (seccomp.program(at.namespaces) if code is None
               else seccomp.checked_program(code))
    files = open_paths(policy) if opened is None else opened
    try:
        made = userns.make(refuse=at.no_userns) if namespaces is None else namespaces
    except BaseException:
        if opened is None:
            files.close()
        raise
    return Prepared(at, files, program, privileges.known_caps(), made)


def isolate(prepared: Prepared) -> Prepared:
    """Below Landlock ABI 6, ahead of a call whose policy depends on it (rg's spare):
    join the jail's user and network namespaces and go on as PID 1 of a new PID
    namespace (``jail.kernel.become_pid_one``: the calling process stays behind and
    exits as this one will). Returns ``prepared`` marked so, for :func:`apply` to skip
    these steps. The process then holds every capability inside the jail's user
    namespace (none outside), until ``apply`` gives them up."""
    userns.join(prepared.namespaces.user)
    userns.isolate_run(prepared.namespaces)
    privileges.die_with_parent()  # joining cleared it
    kernel.become_pid_one()
    return dataclasses.replace(prepared, isolated=True)


def start_ruleset(prepared: Prepared) -> int:
    """A Landlock ruleset holding the prepared path rules, for :func:`apply` to finish;
    made ahead of a call."""
    return landlock.create_ruleset(prepared.abi, (), (), (), path_rules=prepared.path_rules)


def set_limits(limits: Limits) -> None:
    """Set the kernel resource limits (soft = hard: the process cannot raise them)."""
    for which, value in (
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_AS, limits.address_space_bytes),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NPROC, limits.nproc),
        (resource.RLIMIT_NOFILE, limits.nofile),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, (value, value))


def apply(
    policy: Policy,
    prepared: Prepared | None = None,
    *,
    ruleset: int | None = None,
    limits_set: bool = False,
) -> None:
    """Confine the calling process according to ``policy``, irreversibly.

    On return the process keeps its (unprivileged) uid and gid, holds no capability,
    is in its own mount namespace with a read-only root (chroot) or the stores' view if
    asked, inside a Landlock domain granting only the listed reads and executes, with
    signals and abstract unix sockets kept inside (Landlock's scopes; below ABI 6 the
    caller is PID 1 of a PID namespace of its own, in the jail's network namespace:
    its original process stays behind, waiting, and exits as it does, see
    ``jail.kernel.become_pid_one``), with resource limits set and the seccomp
    allow-list loaded: the next step is exec. ``prepared`` is :func:`prepare` of this
    policy (made here if None). Raises OSError (or ValueError) on any failure; the
    caller must then exit, never exec. Refuses root (ValueError), needs Landlock and
    seccomp (checked: no silent fallback) and the jail's user namespace.

    Steps done ahead of the call, by the launcher's spare child: ``ruleset`` is
    :func:`start_ruleset` of ``prepared``; ``limits_set`` says that it already did
    ``set_limits(policy.limits)``.
    """
    ready = confine(policy, prepared, ruleset=ruleset, limits_set=limits_set)
    # 7. seccomp last: from here on only the allow-listed system calls work.
    seccomp.load(ready.seccomp)


def confine(
    policy: Policy,
    prepared: Prepared | None = None,
    *,
    ruleset: int | None = None,
    limits_set: bool = False,
) -> Prepared:
    """Every step of :func:`apply` but the last, loading the seccomp filter; returns
    the :class:`Prepared` whose ``seccomp`` program the caller must load before exec.

    A policy without stores depends on nothing of the call: the launcher's spare child
    for sed runs this ahead, then waits for its call chrooted, with no capability,
    inside the Landlock domain; only the stdio fds and the argv come with the call (and
    the filter is loaded then: it would refuse the waiting itself).
    """
    if 0 in os.getresuid():
        raise ValueError("refusing to jail a tool as root: run the launcher unprivileged")
    ready = prepared if prepared is not None else prepare(policy)

    # 1. File-system view, in a mount namespace of the jail's user namespace (whose
    # capabilities these steps use): a read-only root holding only sed, its libraries
    # and a locale; or the stores mounted read-only on the working directory.
    joined = policy.chroot is not None or bool(policy.stores) or ready.isolated
    user = None if ready.isolated else ready.namespaces.user  # None: joined ahead
    if policy.chroot is not None:
        assert ready.opened.root is not None
        mounts.enter(ready.opened.root, user)
        mounts.enter_root()
    elif policy.stores:
        assert policy.cwd is not None and policy.stores_dir is not None
        mounts.enter(policy.stores_dir, user)
        mounts.show_stores(policy.cwd, policy.stores)
    if policy.cwd is not None:
        os.chdir(policy.cwd)
    # Below Landlock ABI 6 (no scopes): the jail's network namespace (its abstract
    # sockets are not the host's) and a new PID namespace, entered at step 6.
    if ready.level.namespaces and not ready.isolated:
        if not joined:
            userns.join(ready.namespaces.user)
            joined = True
        userns.isolate_run(ready.namespaces)

    # 2. Limits; lowering needs no privilege but doing it first keeps the order simple.
    if not limits_set:
        set_limits(policy.limits)

    # 3. The Landlock ruleset (its path rules are on the fds opened ahead).
    stores = [fd for _name, _path, fd in policy.stores]
    if ruleset is None:
        ruleset = landlock.create_ruleset(
            ready.abi, policy.read_fds, (), (), path_rules=ready.path_rules, store_fds=stores
        )
    elif policy.read_fds or stores:
        landlock.add_rules(ruleset, ready.abi, policy.read_fds, stores)

    # 4. Every capability is gone for good, those joining the namespace gave too (also
    # sets no_new_privs, needed by Landlock and seccomp).
    privileges.drop(ready.capabilities if joined else range(0))
    if policy.die_with_parent:
        privileges.die_with_parent()  # after joining the namespace, which clears it

    # 5. Landlock: reads only beneath the granted fds/paths, execute only the tool,
    # (ABI >= 6) signals and abstract unix sockets only within the domain.
    landlock.enforce(ruleset)
    # 6. Below ABI 6: go on as PID 1 of the new PID namespace, where no process outside
    # is visible (the original process waits, and exits as this one will).
    if ready.level.namespaces and not ready.isolated:
        kernel.become_pid_one()
    return ready
