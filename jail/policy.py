"""The one sandbox policy and its single ``apply``.

A :class:`Policy` says declaratively what a jailed tool may do; :func:`apply` enforces
it on the calling process, default-deny, just before the tool is executed. It is
called in a freshly forked, single-threaded child running as root.

Everything that does not depend on the call (the compiled seccomp program, the
Landlock rule paths opened once, the list of capabilities to drop) can be computed
ahead by :func:`prepare`, once per tool in the launcher, so that the forked child only
makes system calls. The policy types are plain dataclasses, not pydantic models: the
launcher process must stay small, since the cost of each ``fork`` grows with it.
"""

from __future__ import annotations

import dataclasses
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jail import landlock, mounts, privileges, seccomp

NOBODY = 65534


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
    # Processes + threads of the jail uid (all calls share it); rg needs a few threads.
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

    # Unprivileged identity the process ends as; never 0.
    uid: int = NOBODY
    gid: int = NOBODY
    # Directory to chroot into before dropping root (sed), or None (rg).
    chroot: str | None = None
    # Working directory entered (after the chroot or the store mounts, before dropping
    # root), or None.
    cwd: str | None = None
    # Directories shown to the tool (rg's stores), as (name, open directory fd): in a
    # private mount namespace, a fresh tmpfs is mounted on ``cwd`` and each directory is
    # bind-mounted there as ``cwd/name``, read-only, nosuid, nodev, noexec. Landlock
    # grants reads beneath each of them (see ``landlock.create_ruleset``). Needs cwd.
    stores: tuple[tuple[str, int], ...] = ()
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
        _require(self.uid >= 1 and self.gid >= 1, "uid and gid must be >= 1 (never root)")
        _require(self.timeout_seconds > 0, "timeout_seconds must be > 0")
        _require(not self.stores or self.cwd is not None, "stores need a cwd to be mounted on")
        _require(not (self.stores and self.chroot), "stores cannot be mounted in a chroot")
        for name, _fd in self.stores:
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
        values["stores"] = tuple((str(n), int(fd)) for n, fd in values.get("stores", ()))
        return cls(**values)


@dataclass(frozen=True)
class Prepared:
    """The call-independent part of a policy, computed by :func:`prepare`."""

    abi: int
    # (O_PATH fd, Landlock rights) for read_paths and exec_paths, opened ahead.
    path_rules: tuple[tuple[int, int], ...]
    seccomp: seccomp.Program
    capabilities: range

    def close(self) -> None:
        for fd, _ in self.path_rules:
            os.close(fd)


def prepare(policy: Policy, seccomp_code: bytes | None = None) -> Prepared:
    """Check Landlock, take the seccomp program (``seccomp_code``, as compiled by
    ``seccomp.compiled_filter``, or compiled here), open the rule paths (close-on-exec;
    inside the chroot, if any: its tree is checked to hold no symlink) and list the
    capabilities. Raises OSError or ValueError. The result is reused by every
    :func:`apply` of this policy."""
    abi = landlock.abi_version()
    if abi < 1:
        raise OSError(0, "Landlock is not available: refusing to run unconfined")
    rules: list[tuple[int, int]] = []
    try:
        for paths, rights in (
            (policy.read_paths, landlock.FS_READ_FILE | landlock.FS_READ_DIR),
            (policy.exec_paths, landlock.FS_READ_FILE | landlock.FS_EXECUTE),
        ):
            for path in paths:
                full = os.path.join(policy.chroot, path.lstrip("/")) if policy.chroot else path
                rules.append((os.open(full, os.O_PATH | os.O_CLOEXEC), rights))
    except BaseException:
        for fd, _ in rules:
            os.close(fd)
        raise
    try:
        code = seccomp_code
        program = seccomp.program() if code is None else seccomp.checked_program(code)
    except BaseException:
        for fd, _ in rules:
            os.close(fd)
        raise
    return Prepared(abi, tuple(rules), program, privileges.known_caps())


def start_ruleset(prepared: Prepared) -> int:
    """A Landlock ruleset holding the prepared path rules, for :func:`apply` to finish;
    made ahead of a call (it needs root to be made, the rule paths being open)."""
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
    in_namespace: bool = False,
    limits_set: bool = False,
) -> None:
    """Confine the calling process according to ``policy``, irreversibly.

    On return the process is the unprivileged uid/gid with no capability, chrooted or in
    its own mount namespace if asked, inside a Landlock domain granting only the listed
    reads and executes, with resource limits set and the seccomp allow-list loaded: the
    next step is exec. ``prepared`` is :func:`prepare` of this policy (made here if
    None). Raises OSError (or ValueError) on any failure; the caller must then exit,
    never exec. Requires root, and Landlock (checked: no silent fallback).

    Steps done ahead of the call, by the launcher's spare child: ``ruleset`` is
    :func:`start_ruleset` of ``prepared``; ``in_namespace`` says that the process
    already did ``mounts.enter_namespace(policy.cwd)`` and that the store fds are
    detached read-only clones (``mounts.clone_read_only``), to attach; ``limits_set``
    that it already did ``set_limits(policy.limits)``.
    """
    ready = confine(
        policy, prepared, ruleset=ruleset, in_namespace=in_namespace, limits_set=limits_set
    )
    # 6. seccomp last: from here on only the allow-listed system calls work.
    seccomp.load(ready.seccomp)


def confine(
    policy: Policy,
    prepared: Prepared | None = None,
    *,
    ruleset: int | None = None,
    in_namespace: bool = False,
    limits_set: bool = False,
) -> Prepared:
    """Every step of :func:`apply` but the last, loading the seccomp filter; returns
    the :class:`Prepared` whose ``seccomp`` program the caller must load before exec.

    A policy without stores depends on nothing of the call: the launcher's spare child
    for sed runs this ahead, then waits for its call as the unprivileged uid, chrooted
    and inside the Landlock domain; only the stdio fds and the argv come with the call
    (and the filter is loaded then: it would refuse the waiting itself).
    """
    ready = prepared if prepared is not None else prepare(policy)

    # 1. File-system view, while still root: a chroot holding only sed, its libraries
    # and a locale; or the stores mounted read-only in a private mount namespace.
    if policy.chroot is not None:
        os.chroot(policy.chroot)
        os.chdir("/")
    if policy.stores:
        assert policy.cwd is not None
        if in_namespace:
            mounts.attach(policy.cwd, policy.stores)
        else:
            mounts.show_stores(policy.cwd, policy.stores)
    if policy.cwd is not None:
        os.chdir(policy.cwd)

    # 2. Limits; lowering needs no privilege but doing it first keeps the order simple.
    if not limits_set:
        set_limits(policy.limits)

    # 3. The Landlock ruleset is built while still root (the rule paths were opened as
    # root, by prepare).
    stores = [fd for _name, fd in policy.stores]
    if ruleset is None:
        ruleset = landlock.create_ruleset(
            ready.abi, policy.read_fds, (), (), path_rules=ready.path_rules, store_fds=stores
        )
    elif policy.read_fds or stores:
        landlock.add_rules(ruleset, ready.abi, policy.read_fds, stores)

    # 4. Root is gone for good (also sets no_new_privs, needed by Landlock and seccomp).
    privileges.drop(policy.uid, policy.gid, ready.capabilities)
    if policy.die_with_parent:
        privileges.die_with_parent()  # after the uid change, which would clear it

    # 5. Landlock: reads only beneath the granted fds/paths, execute only the tool.
    landlock.enforce(ruleset)
    return ready
