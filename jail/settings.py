"""Settings of the jail, chosen once by the daemon."""

from __future__ import annotations

import pwd
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

MIB = 1 << 20
NOBODY = 65534
SERVICE_USER = "memfs"


def service_ids() -> tuple[int, int]:
    """The uid and gid of the ``memfs`` system user if it exists, else nobody's."""
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        return NOBODY, NOBODY
    return entry.pw_uid, entry.pw_gid


class JailSettings(BaseModel):
    """Where the tools are and how tightly they are limited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The ripgrep binary (run in place, read+execute granted to it and its libraries).
    rg_path: Path
    # The GNU sed the sed root was built from (only used in error messages).
    sed_path: Path = Path("/usr/bin/sed")
    # The chroot made by `scripts/build-sed-jail DEST`: bin/sed, its libraries, a locale.
    sed_root: Path
    # The unprivileged identity the jail (its launcher and the tools) runs under when it
    # is started by root (never root itself): the daemon passes its service user;
    # default the `memfs` user, else nobody. Started by any other uid, the jail runs
    # under that uid, and these are not used.
    uid: int = Field(default_factory=lambda: service_ids()[0], ge=1)
    gid: int = Field(default_factory=lambda: service_ids()[1], ge=1)
    # Wall-clock limit per call; the tool is killed past it (JailLimit).
    timeout_seconds: float = Field(default=10.0, gt=0)
    # rg output beyond this is cut, and the result marked truncated.
    output_limit_bytes: int = Field(default=1 * MIB, ge=1024)
    # sed output beyond this is an error (JailLimit): an edit must not be cut short.
    sed_output_limit: int = Field(default=64 * MIB, ge=1024)
    # Captured stderr beyond this is dropped.
    stderr_limit_bytes: int = Field(default=64 * 1024, ge=1024)
    # CPU seconds per call (RLIMIT_CPU).
    cpu_seconds: int = Field(default=10, ge=1)
    # Address space per call (RLIMIT_AS).
    memory_bytes: int = Field(default=2048 * MIB, ge=64 * MIB)
    # Tool runs (rg and sed together) at once; a call beyond it waits its turn in its
    # caller's queue (jail/slots.py) and raises JailBusy only when that queue already
    # holds queue_per_caller runs, or after queue_seconds. None: no cap.
    max_concurrent_runs: int | None = Field(default=None, ge=1)
    queue_per_caller: int = Field(default=4, ge=0)
    queue_seconds: float = Field(default=5.0, ge=0)
    # rg threads per call: the default, and the cap for -j/--threads.
    max_threads: int = Field(default=4, ge=1, le=64)
    # Where the launcher makes its private work folder, on which each search mounts its
    # view of the stores (default: the system temporary directory). The jail's uid must
    # be able to create a folder there; 0711 is set on it.
    work_dir: Path | None = None
