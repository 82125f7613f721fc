"""What a tool needs to start (its ELF loader and libraries), and the sed root check."""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from memfs.jail.errors import JailUnavailable

SED_IN_ROOT = "/bin/sed"
LOCALE_IN_ROOT = "/usr/lib/locale/C.utf8"


@dataclass(frozen=True)
class Needs:
    """The ELF loader (None for a static binary) and shared libraries of a program,
    as absolute paths printed by ldd."""

    loader: str | None
    libraries: tuple[str, ...]


def needs(binary: Path) -> Needs:
    """Ask ldd which loader and libraries ``binary`` uses (run once, at Jail start).

    Raises JailUnavailable if the binary is missing or ldd fails.
    """
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise JailUnavailable(f"{binary} is not an executable file")
    run = subprocess.run(
        ["ldd", str(binary)], capture_output=True, text=True, env={"LC_ALL": "C"}, check=False
    )
    if "not a dynamic executable" in run.stdout + run.stderr:
        return Needs(None, ())
    if run.returncode != 0:
        raise JailUnavailable(f"ldd {binary} failed: {run.stderr.strip()}")
    loader: str | None = None
    libraries: list[str] = []
    for line in run.stdout.splitlines():
        fields = line.split()
        if "=>" in fields:
            target = fields[fields.index("=>") + 1]
            if target.startswith("/"):
                libraries.append(target)
            elif target == "not":
                raise JailUnavailable(f"{binary}: library {fields[0]} not found")
        elif fields and fields[0].startswith("/"):
            loader = fields[0]
    return Needs(loader, tuple(libraries))


def check_sed_root(root: Path, sed_source: Path = Path("/usr/bin/sed")) -> Needs:
    """Make sure ``root`` is a sed jail as built by ``scripts/build-sed-jail``: sed, its
    loader and libraries and the C.UTF-8 locale present, and everything (the root, its
    contents and its ancestors) owned by root or by this process's uid (which built it:
    the daemon's) and writable by no one else, with no symlink, device, fifo, socket,
    setuid or setgid file. Returns what sed needs (paths inside the root); raises
    JailUnavailable otherwise."""
    hint = f"(re)build it with `scripts/build-sed-jail {root} {sed_source}`"
    if not root.is_dir():
        raise JailUnavailable(f"sed root {root} does not exist: {hint}")
    for ancestor in [root, *root.parents]:
        _check_owner(ancestor, allow_sticky=ancestor != root, hint=hint)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            info = _check_owner(path, allow_sticky=False, hint=hint)
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                raise JailUnavailable(f"sed root: {path} is not a plain file or directory")
            if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                raise JailUnavailable(f"sed root: {path} is setuid or setgid")
    sed = _inside(root, SED_IN_ROOT)
    if not os.access(sed, os.X_OK):
        raise JailUnavailable(f"sed root {root} has no executable {SED_IN_ROOT}: {hint}")
    sed_needs = needs(Path(sed))
    required = [LOCALE_IN_ROOT, *sed_needs.libraries]
    if sed_needs.loader:
        required.append(sed_needs.loader)
    for inside in required:
        if not os.path.exists(_inside(root, inside)):
            raise JailUnavailable(f"sed root {root} lacks {inside}: {hint}")
    return sed_needs


def _inside(root: Path, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _check_owner(path: Path, allow_sticky: bool, hint: str) -> os.stat_result:
    info = os.lstat(path)
    owners = {0, os.geteuid()}
    if info.st_uid not in owners:
        mine = "" if os.geteuid() == 0 else f" or uid {os.geteuid()}"
        raise JailUnavailable(f"sed root: {path} is not owned by root{mine}; {hint}")
    writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
    if writable and not (allow_sticky and sticky_dir) and not stat.S_ISLNK(info.st_mode):
        raise JailUnavailable(f"sed root: {path} is writable by others than its owner; {hint}")
    return info
