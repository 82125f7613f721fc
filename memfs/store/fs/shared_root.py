"""The start-up check of a root on a shared file system (GlusterFS): one log line that
says whether the volume's options and the mount's kernel timeouts keep other hosts'
changes fresh, and how to check by hand when they cannot be read.

What memfs needs (docs/operate/several-hosts.md): the client-side caches that serve stale
metadata or content after another host's rename are off (REQUIRED_OFF), and the
Gluster FUSE mount has zero kernel timeouts (KERNEL_TIMEOUTS). The options are read
with the gluster CLI: ``volume get`` where a glusterd runs on this host, else
``volume info`` from the server named in the mount source (``--remote-host``, which
Gluster allows for ``info`` but not ``get``), where an option left unset has its
default (on). The kernel timeouts are the arguments of the mount's glusterfs client
process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Gluster 10 defaults: all three on.
REQUIRED_OFF = ("performance.stat-prefetch", "performance.quick-read",
                "performance.open-behind")
# glusterfs's own defaults: attribute and entry 1 s, negative 0.
KERNEL_TIMEOUTS = {"attribute-timeout": "1", "entry-timeout": "1", "negative-timeout": "0"}
CLI_TIMEOUT = 10.0
OFF = {"off", "no", "false", "disable", "0"}
HOW = "see docs/operate/several-hosts.md"


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, index = [], 0
    while index < len(field):
        if field[index] == "\\" and field[index + 1:index + 4].isdigit():
            out.append(chr(int(field[index + 1:index + 4], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


def mount_of(path: Path, mountinfo: str | None = None) -> Mount | None:
    """The mount that holds ``path`` (the longest mount point above it)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best: Mount | None = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(" "), right.split(" ")
        if len(fields) < 5 or len(tail) < 2:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.point)):
            best = Mount(point, tail[0], _unescape(tail[1]))
    return best


def parse_volume_get(output: str) -> dict[str, str]:
    """``gluster volume get VOL all`` -> {option: value} (lines "name value [(DEFAULT)]")."""
    options = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and "." in parts[0]:
            options[parts[0]] = parts[1]
    return options


def parse_volume_info(output: str) -> dict[str, str]:
    """``gluster volume info VOL`` -> its "Options Reconfigured" (the others: default)."""
    options, inside = {}, False
    for line in output.splitlines():
        if line.startswith("Options Reconfigured"):
            inside = True
        elif inside and ":" in line:
            key, _, value = line.partition(":")
            options[key.strip()] = value.strip()
    return options


def volume_options(server: str, volume: str) -> tuple[dict[str, str] | None, str]:
    """The volume's options (unset ones missing) and where they came from, or None and
    why they could not be read."""
    cli = shutil.which("gluster")
    if cli is None:
        return None, "the gluster CLI is not installed here"
    attempts = [([cli, "--mode=script", "volume", "get", volume, "all"], parse_volume_get),
                ([cli, "--mode=script", f"--remote-host={server}", "volume", "info", volume],
                 parse_volume_info)]
    reason = ""
    for argv, parse in attempts:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            reason = str(error)
            continue
        if done.returncode == 0:
            return parse(done.stdout), " ".join(argv[2:])
        lines = (done.stdout + done.stderr).strip().splitlines()
        reason = lines[-1] if lines else f"exit status {done.returncode}"
    return None, f"gluster: {reason}"


def kernel_timeouts(point: str) -> dict[str, str] | None:
    """The kernel timeouts the Gluster client of the mount at ``point`` was started
    with (its defaults for those not given), or None if its process is not visible."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [os.fsdecode(arg) for arg in argv if arg]
        if not args or not args[0].endswith("glusterfs") or args[-1] != point:
            continue
        found = dict(KERNEL_TIMEOUTS)
        for arg in args:
            name, _, value = arg.removeprefix("--").partition("=")
            if name in found and value:
                found[name] = value
        return found
    return None


def check_root(root: Path) -> tuple[bool, str] | None:
    """(ok, one log line) about a root on GlusterFS; None when the root is not on it.
    ok is False when an option or timeout breaks freshness or could not be read."""
    mount = mount_of(root)
    if mount is None or mount.fstype != "fuse.glusterfs":
        return None
    server, _, rest = mount.source.partition(":")
    volume = rest.strip("/").split("/")[0]
    where = f"root {root} is on GlusterFS volume {volume} ({mount.source})"
    problems = []
    timeouts = kernel_timeouts(mount.point)
    if timeouts is not None:
        problems += [f"mount option {name}={value} (needs 0)"
                     for name, value in timeouts.items() if float(value) != 0]
    options, source = volume_options(server, volume)
    if options is None:
        return False, (
            f"{where}; its options could not be read ({source}): check that `gluster volume "
            f"get {volume} OPTION` says off for {', '.join(REQUIRED_OFF)} and that it is "
            "mounted with attribute-timeout=0,entry-timeout=0,negative-timeout=0"
            + ("; " + ", ".join(problems) if problems else "") + f"; {HOW}")
    problems += [f"{name} is {options.get(name, 'on (default)')}"
                 for name in REQUIRED_OFF if options.get(name, "on").lower() not in OFF]
    if problems:
        return False, (f"{where}: {'; '.join(problems)}: changes made through other hosts "
                       f"can be seen late or fail reads; {HOW}")
    unchecked = "" if timeouts is not None else " (mount timeouts not visible from here)"
    return True, f"{where}: volume options and mount timeouts keep other hosts' changes " \
                 f"fresh{unchecked}"
