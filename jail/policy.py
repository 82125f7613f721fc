"""The one sandbox policy and its single ``apply``.

A :class:`Policy` says declaratively what a jailed tool may do; :func:`apply` enforces
it on the calling process, default-deny, just before the tool is executed. It is
called in a freshly forked, single-threaded child running as root.
"""

from __future__ import annotations

import os
import resource

from pydantic import BaseModel, ConfigDict, Field

from jail import landlock, privileges, seccomp

NOBODY = 65534


class Limits(BaseModel):
    """Kernel resource limits (soft = hard, so the tool cannot raise them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # CPU time in seconds; past it the kernel sends SIGXCPU, then SIGKILL.
    cpu_seconds: int = Field(default=10, ge=1)
    # Address space in bytes (malloc/mmap fail past it).
    address_space_bytes: int = Field(default=2 << 30, ge=64 << 20)
    # Largest file the tool may write: 0, it has no business writing files.
    file_size_bytes: int = Field(default=0, ge=0)
    # Processes + threads of the jail uid (all calls share it); rg needs a few threads.
    nproc: int = Field(default=256, ge=1)
    # Open file descriptors (rg keeps one per thread plus directory handles).
    nofile: int = Field(default=1024, ge=16)


class Policy(BaseModel):
    """What one jailed process may do; everything not listed here is denied."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Unprivileged identity the process ends as; never 0.
    uid: int = Field(default=NOBODY, ge=1)
    gid: int = Field(default=NOBODY, ge=1)
    # Directory to chroot into before dropping root (sed), or None (rg).
    chroot: str | None = None
    # Working directory entered (after the chroot, before dropping root), or None.
    cwd: str | None = None
    # Already-open directory fds (O_PATH is fine) the tool may read beneath (Landlock
    # READ_FILE | READ_DIR): the stores searched by rg; empty for sed.
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
    timeout_seconds: float = Field(default=10.0, gt=0)


def apply(policy: Policy) -> None:
    """Confine the calling process according to ``policy``, irreversibly.

    On return the process is the unprivileged uid/gid with no capability, chrooted if
    asked, inside a Landlock domain granting only the listed reads and executes, with
    resource limits set and the seccomp allow-list loaded: the next step is exec.
    Raises OSError (or ValueError) on any failure; the caller must then exit, never exec.
    Requires root, and Landlock (checked here: no silent fallback).
    """
    abi = landlock.abi_version()
    if abi < 1:
        raise OSError(0, "Landlock is not available: refusing to run unconfined")
    program = seccomp.compiled_filter()  # normally already cached by the launcher

    # 1. chroot while still root (sed): only sed, its libraries and a locale remain.
    if policy.chroot is not None:
        os.chroot(policy.chroot)
        os.chdir("/")
    if policy.cwd is not None:
        os.chdir(policy.cwd)

    # 2. Limits; lowering needs no privilege but doing it first keeps the order simple.
    limits = policy.limits
    for which, value in (
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_AS, limits.address_space_bytes),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NPROC, limits.nproc),
        (resource.RLIMIT_NOFILE, limits.nofile),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(which, (value, value))

    # 3. The Landlock ruleset is built while still root, so that rule paths (e.g. a
    # tool under a 0700 directory) can be opened; paths are resolved inside the chroot.
    ruleset = landlock.create_ruleset(abi, policy.read_fds, policy.read_paths, policy.exec_paths)

    # 4. Root is gone for good (also sets no_new_privs, needed by Landlock and seccomp).
    privileges.drop(policy.uid, policy.gid)

    # 5. Landlock: reads only beneath the granted fds/paths, execute only the tool.
    landlock.enforce(ruleset)

    # 6. seccomp last: from here on only the allow-listed system calls work.
    seccomp.load(program)
