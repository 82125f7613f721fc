"""Starting the jail: the sed root script, the checks Jail.start makes, shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pydantic
import pytest

from memfs.jail import Jail, JailError, JailSettings, JailUnavailable
from memfs.jail.settings import service_ids
from tests.support import public_tmpdir

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-sed-jail"


def work_parent() -> Path:
    """A folder the jail's uid may make its work folder in (pytest's tmp_path is 0700)."""
    work = public_tmpdir("memfs-jail-work-")
    os.chown(work, *service_ids())
    return work


@pytest.fixture
def fresh_root(tmp_path: Path) -> Path:
    root = tmp_path / "sed-root"
    subprocess.run([str(SCRIPT), str(root)], check=True, capture_output=True)
    return root


def test_build_script_is_idempotent(fresh_root: Path) -> None:
    before = sorted(p.relative_to(fresh_root) for p in fresh_root.rglob("*"))
    (fresh_root / "stray").write_text("left behind")
    run = subprocess.run([str(SCRIPT), str(fresh_root)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    after = sorted(p.relative_to(fresh_root) for p in fresh_root.rglob("*"))
    assert after == before
    assert Path("bin/sed") in after
    assert not list(fresh_root.parent.glob("sed-root.*"))  # no temporary leftovers
    assert fresh_root.stat().st_uid == 0
    # Only sed, the loader, libraries and the locale: no shell, no /etc, no /proc.
    assert {p.parts[0] for p in after} <= {"bin", "lib", "lib64", "usr"}
    assert list((fresh_root / "bin").iterdir()) == [fresh_root / "bin" / "sed"]


def test_build_script_usage_errors(tmp_path: Path) -> None:
    run = subprocess.run([str(SCRIPT)], capture_output=True, text=True)
    assert run.returncode != 0 and "usage" in run.stderr
    args = [str(SCRIPT), str(tmp_path / "x"), "/nonexistent/sed"]
    run = subprocess.run(args, capture_output=True, text=True)
    assert run.returncode != 0 and "not an executable" in run.stderr


def test_missing_sed_root(make_settings: Callable[..., JailSettings], tmp_path: Path) -> None:
    with pytest.raises(JailUnavailable, match="build-sed-jail"):
        Jail.start(make_settings(sed_root=tmp_path / "nope"))


@pytest.mark.parametrize("damage", ["world-writable", "not-root", "symlink", "setuid", "no-sed"])
def test_unsafe_sed_root(
    make_settings: Callable[..., JailSettings], fresh_root: Path, damage: str
) -> None:
    target = fresh_root / "lib64"
    if damage == "world-writable":
        (fresh_root / "bin" / "sed").chmod(0o757)
    elif damage == "not-root":
        os.chown(target, 65534, 65534)
    elif damage == "symlink":
        (fresh_root / "bin" / "sh").symlink_to("/bin/sh")
    elif damage == "setuid":
        (fresh_root / "bin" / "sed").chmod(0o4755)
    else:
        (fresh_root / "bin" / "sed").unlink()
    with pytest.raises(JailUnavailable, match="sed root"):
        Jail.start(make_settings(sed_root=fresh_root))


def test_missing_rg(make_settings: Callable[..., JailSettings], tmp_path: Path) -> None:
    with pytest.raises(JailUnavailable, match="not an executable"):
        Jail.start(make_settings(rg_path=tmp_path / "rg"))


def test_root_uid_is_refused(make_settings: Callable[..., JailSettings]) -> None:
    with pytest.raises(pydantic.ValidationError):
        make_settings(uid=0)


def test_launcher_death_restarts_it_once_per_call(
    make_settings: Callable[..., JailSettings], tmp_path: Path
) -> None:
    """A killed launcher is replaced by the next call, which works; the dead one's work
    directory is removed by the new one."""
    work = work_parent()
    store = tmp_path / "store"
    store.mkdir()
    (store / "f.txt").write_text("x\n")
    jail = Jail.start(make_settings(work_dir=work))
    assert jail.sed(["s/a/b/"], b"a\n") == b"b\n"
    first = jail.launcher_pid
    (old_dir,) = list(work.iterdir())
    assert old_dir.name.startswith(f"memfs-jail-{first}-")
    os.kill(first, signal.SIGKILL)
    jail._process.wait()
    assert old_dir.exists()  # SIGKILL leaves it behind...
    assert jail.search({"s": store}, ["x"]).output == b"s/f.txt:x\n"
    assert jail.launcher_pid != first
    assert jail.restarts == 1
    assert not old_dir.exists()  # ...and the next launcher removes it
    (new_dir,) = list(work.iterdir())
    assert new_dir.name.startswith(f"memfs-jail-{jail.launcher_pid}-")
    # Killed while the socket is still open (not yet reaped): the send fails, the call
    # restarts it and goes on.
    os.kill(jail.launcher_pid, signal.SIGKILL)
    time.sleep(0.1)
    assert jail.sed(["s/a/c/"], b"a\n") == b"c\n"
    assert jail.restarts == 2
    jail.close()
    with pytest.raises(JailError, match="closed"):
        jail.sed(["s/a/b/"], b"a\n")
    assert list(work.iterdir()) == []


def test_a_call_running_when_the_launcher_dies_fails(
    make_settings: Callable[..., JailSettings],
) -> None:
    with Jail.start(make_settings()) as jail:
        pid = jail.launcher_pid
        threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
        with pytest.raises(JailError, match="launcher"):
            jail.sed([":a;ba"], b"x\n")  # loops until killed
        assert jail.sed(["s/a/b/"], b"a\n") == b"b\n"


def test_stale_work_dirs_of_dead_launchers_only(tmp_path: Path) -> None:
    from memfs.jail.launcher import remove_stale_work_dirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f"memfs-jail-{dead.pid}-abc").mkdir()
    (tmp_path / f"memfs-jail-{dead.pid}-old" / "call-0").mkdir(parents=True)
    (tmp_path / f"memfs-jail-{os.getppid()}-live").mkdir()  # alive: kept
    (tmp_path / "memfs-jail-notapid").mkdir()  # not ours: kept
    (tmp_path / f"memfs-jail-{dead.pid}-link").symlink_to(tmp_path / "memfs-jail-notapid")
    theirs = tmp_path / f"memfs-jail-{dead.pid}-theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)  # not root's: kept
    removed = remove_stale_work_dirs(str(tmp_path))
    assert sorted(Path(p).name for p in removed) == [
        f"memfs-jail-{dead.pid}-abc",
        f"memfs-jail-{dead.pid}-old",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            f"memfs-jail-{os.getppid()}-live",
            "memfs-jail-notapid",
            f"memfs-jail-{dead.pid}-link",
            f"memfs-jail-{dead.pid}-theirs",
        ]
    )


def test_close_removes_the_work_folder(
    make_settings: Callable[..., JailSettings], tmp_path: Path
) -> None:
    work = work_parent()
    store = tmp_path / "store"
    store.mkdir()
    (store / "f.txt").write_text("x\n")
    with Jail.start(make_settings(work_dir=work)) as jail:
        (folder,) = list(work.iterdir())
        assert folder.stat().st_mode & 0o777 == 0o711
        assert jail.search({"s": store}, ["x"]).output == b"s/f.txt:x\n"
        assert list(folder.iterdir()) == []  # the stores were mounted elsewhere only
    assert list(work.iterdir()) == []


REFUSE_USER_NAMESPACES = r"""
import errno, os, sys
import pyseccomp as sc

# What systemd's RestrictNamespaces= does: user namespaces refused with EPERM (for
# this process and all it runs).
f = sc.SyscallFilter(defaction=sc.ALLOW)
f.add_rule(sc.ERRNO(errno.EPERM), "unshare", sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))
f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))
f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
f.load()
"""

NO_USER_NAMESPACES = REFUSE_USER_NAMESPACES + r"""
from memfs.jail import Jail, JailSettings, JailUnavailable

try:
    Jail.start(JailSettings(rg_path=sys.argv[1], sed_root=sys.argv[2])).close()
except JailUnavailable as error:
    print(error)
else:
    print("started")
"""


def test_no_user_namespaces_say_what_to_enable(rg_path: Path, sed_root: Path) -> None:
    """Where unprivileged user namespaces are refused (here by a seccomp filter like
    systemd's RestrictNamespaces=), the jail does not start, and says what to enable."""
    run = subprocess.run(
        [sys.executable, "-c", NO_USER_NAMESPACES, str(rg_path), str(sed_root)],
        capture_output=True, text=True, check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "unshare(CLONE_NEWUSER): Operation not permitted" in run.stdout
    for hint in ("unprivileged user namespaces", "kernel.unprivileged_userns_clone",
                 "kernel.apparmor_restrict_unprivileged_userns", "RestrictNamespaces"):
        assert hint in run.stdout


def test_a_normal_user_builds_the_sed_root_where_user_namespaces_are_refused(
        tmp_path: Path) -> None:
    """Where unprivileged user namespaces are refused (Ubuntu's AppArmor restriction;
    here a seccomp filter), a normal user's build-sed-jail cannot chroot to check the
    root: it builds it and says it is unchecked, rather than fail (a personal daemon
    would not start); the jail's self-test runs sed there once they are allowed."""
    uid, gid = service_ids()
    base = work_parent()
    dest = base / "sed-root"
    run = subprocess.run(
        [sys.executable, "-c",
         REFUSE_USER_NAMESPACES + "os.execv(sys.argv[1], sys.argv[1:])", str(SCRIPT),
         str(dest)],
        capture_output=True, text=True, user=uid, group=gid, extra_groups=[], check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "not checked" in run.stderr and "user namespaces are refused" in run.stderr
    assert (dest / "bin" / "sed").is_file()
    assert {p.stat().st_uid for p in [dest, *dest.rglob("*")]} == {uid}
    # as root, the same script checks the root it builds (chroot needs no namespace)
    checked = subprocess.run(
        [sys.executable, "-c",
         REFUSE_USER_NAMESPACES + "os.execv(sys.argv[1], sys.argv[1:])", str(SCRIPT),
         str(tmp_path / "sed-root")],
        capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and "not checked" not in checked.stderr, checked.stderr


UNPRIVILEGED_CALLER = r"""
import json, sys
from pathlib import Path
from memfs.jail import Jail, JailSettings
from memfs.daemon.serve import ensure_sed_root

base = Path(sys.argv[2])
ensure_sed_root(base / "state" / "sed-root")  # builds it: no root needed
store = base / "stores" / "notes"
store.mkdir(parents=True)
(store / "a.md").write_text("alpha\n")
with Jail.start(JailSettings(rg_path=sys.argv[1], sed_root=base / "state" / "sed-root")) as jail:
    status = Path(f"/proc/{jail.launcher_pid}/status").read_text()
    print(json.dumps({
        "sed": jail.sed(["s/alpha/beta/"], b"alpha\n").decode(),
        "rg": jail.search({"notes": store}, ["-n", "alpha"]).output.decode(),
        "launcher_uid": [line.split()[1] for line in status.splitlines()
                         if line.startswith("Uid:")][0],
    }))
"""


def test_a_normal_user_builds_the_sed_root_and_runs_the_jail(rg_path: Path) -> None:
    """As a normal user (the memfs service user, or anyone in personal mode): the sed
    root is built by that user, and the jail starts and runs both tools, under that uid."""
    uid, gid = service_ids()
    base = work_parent()  # of that uid
    run = subprocess.run(
        [sys.executable, "-c", UNPRIVILEGED_CALLER, str(rg_path), str(base)],
        capture_output=True, text=True, user=uid, group=gid, extra_groups=[], check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {
        "sed": "beta\n", "rg": "notes/a.md:1:alpha\n", "launcher_uid": str(uid)
    }
    sed_root = base / "state" / "sed-root"
    assert {p.stat().st_uid for p in [sed_root, *sed_root.rglob("*")]} == {uid}
