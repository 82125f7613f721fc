"""Mirrors: each store's history pushed to the git remotes of its ``mirror`` setting,
in the background, so that a lost host can be started again from a backup
(memfs/store/history/restore.py).

A pusher per store (`StoreMirror`, a thread) is woken when a commit lands (the
engine's commit listeners call `Mirrors.committed`) and also looks at ``main`` every
POLL_SECONDS (commits of another daemon on the root, ``recover:`` commits at start).
Woken, it lets the commits of a burst gather for BATCH_SECONDS, then pushes whatever
has accumulated since the last push, one push of a store at a time:
``git push`` of the commit ``main`` points at to the remote's ``refs/heads/main``,
never forced (memfs/store/history/gitcli.py runs git). Pushes happen outside the store lock,
from the repository's files: a mirror never slows or refuses a write, whatever it does.

What becomes of a push, for each mirror (`Record.state`):

* ``ok``: the remote's ``main`` is ours (``pending`` while newer commits wait);
* ``down``: the push failed (unreachable, timed out): tried again after RETRY_FIRST
  seconds, doubling up to RETRY_MAX;
* ``diverged``: the remote refused a push that is not a fast-forward (someone pushed
  another history to it, or rewrote it): reported and never overwritten; tried again
  only when ``main`` moves or on `Mirrors.push` (``memfs mirror push``);
* ``refused``: the remote refused the update for another reason (a hook, a protected
  branch): the same. Or the daemon's user may not use the remote (git's "detected
  dubious ownership", "permission denied", a read-only file system, "not a git
  repository": `access_refusal`): that lasts until someone changes the remote, so it
  is tried again after ACCESS_RETRY_FIRST seconds, doubling up to ACCESS_RETRY_MAX
  (whether main moves or not), and its error says what git said first and whose
  access is missing.

Each store's records are kept in ``ROOT/state/mirrors/STORE.json`` (so status is right
after a restart), and a push holds the flock of ``STORE.lock`` beside it, so that
several daemons on one root never push one store at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import random
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pygit2

from memfs.config import Config
from memfs.errors import MemfsError
from memfs.store.errors import NotFound
from memfs.store.fs import statefile
from memfs.store.fs.paths import MemPath
from memfs.store.history.gitcli import GitRun, GitRunner

log = logging.getLogger("memfs.mirror")

REF = "refs/heads/main"
PUSH_TIMEOUT = 600.0  # seconds a push may take (a first push of a long history too)
LS_REMOTE_TIMEOUT = 60.0
POLL_SECONDS = 5.0  # how often a pusher looks at main without being woken
BATCH_SECONDS = 1.0  # how long a woken pusher lets commits gather before it pushes
RETRY_FIRST = 2.0  # seconds before a mirror that is down is tried again ...
RETRY_MAX = 300.0  # ... doubling up to this
ACCESS_RETRY_FIRST = 300.0  # seconds before a mirror refused for access is tried again
ACCESS_RETRY_MAX = 3600.0  # ... doubling up to this
STOP_SECONDS = 5.0  # how long a stopping daemon waits for a pusher to end

OK, PENDING, DOWN, DIVERGED, REFUSED = "ok", "pending", "down", "diverged", "refused"
STATES = (OK, PENDING, DOWN, DIVERGED, REFUSED)
_NEVER = "new"  # a record that never pushed (shown as ok or pending)


class MirrorFailed(MemfsError):
    """A push asked for (``memfs mirror push``) did not bring a mirror up to date: it
    is down, or refused the push (diverged, refused). ``mirrors`` holds the status of
    each mirror of the request."""

    code = "mirror_failed"

    def __init__(self, message: str, mirrors: list[MirrorStatus]) -> None:
        super().__init__(message)
        self.mirrors = mirrors


def shown(url: str) -> str:
    """A URL as memfs shows and logs it: without a password (the config refuses URLs
    that hold one; this is the second guard)."""
    if "://" not in url:
        return url
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}@" if parts.username else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}{host}"))


@dataclass
class Record:
    """What is known of one mirror, kept in the store's state file."""

    state: str = _NEVER
    remote_head: str | None = None  # the remote's main as last known
    last_success: float | None = None  # epoch seconds of the last push that made it ok
    last_attempt: float | None = None
    last_error: str | None = None
    failures: int = 0  # failed pushes in a row (down, or refused for access)
    retry_at: float | None = None  # epoch seconds: a mirror waits till then (down, or
    # refused for access)
    rejected_head: str | None = None  # our main when the remote refused it

    @classmethod
    def parse(cls, data: object) -> Record:
        if not isinstance(data, dict):
            return cls()
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        try:
            return cls(**known)
        except TypeError:
            return cls()


@dataclass(frozen=True)
class MirrorStatus:
    """One mirror of one store, as `memfs mirror status` shows it."""

    store: str
    url: str  # without secrets (`shown`)
    state: str  # one of STATES
    pushing: bool  # a push of this daemon is under way
    commits_behind: int  # commits on main that the remote's main (as last known) lacks
    head: str | None  # our main
    remote_head: str | None
    last_success: float | None
    last_attempt: float | None
    last_error: str | None
    retry_at: float | None

    def fields(self) -> dict[str, Any]:
        return asdict(self)


class StoreMirror:
    """One store's mirrors: their records, and the pusher thread."""

    def __init__(self, store: str, urls: tuple[str, ...], repository: Path, state: Path,
                 runner: GitRunner) -> None:
        self.store = store
        self.urls = urls
        self.repository = repository
        self.state_file = state / f"{store}.json"
        self.lock_file = state / f"{store}.lock"
        self.runner = runner
        self._pushes = threading.Lock()  # one push of this store at a time in this daemon
        self._cond = threading.Condition()
        self._woken = False
        self._stopping = False
        self._pushing: str | None = None  # the URL being pushed
        self._thread: threading.Thread | None = None
        self._behind: dict[tuple[str | None, str | None], int] = {}  # (head, remote) -> n
        self._outcomes: dict[tuple[str, str], int] = {}  # (url, outcome) -> pushes
        self._counting = threading.Lock()

    # -- the pusher --------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"mirror-{self.store}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            # not for long: it may wait for another daemon's push (the lock file); as
            # a daemon thread it ends with the process anyway
            self._thread.join(timeout=STOP_SECONDS)

    def wake(self) -> None:
        """``main`` may have moved: push soon. Never blocks for long (a commit calls
        it)."""
        with self._cond:
            self._woken = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            idle = self._idle_seconds()  # reads the state file: not under the condition
            with self._cond:
                woken = self._cond.wait_for(lambda: self._woken or self._stopping,
                                            timeout=idle)
                if woken and not self._stopping:
                    # let the commits of a burst gather: one push takes them all
                    self._cond.wait_for(lambda: self._stopping, timeout=BATCH_SECONDS)
                if self._stopping:
                    return
                self._woken = False
            try:
                self.push(explicit=False)
            except Exception as error:  # never end the pusher; the next round tries again
                log.warning("store %s: pushing to its mirrors failed: %r", self.store, error)

    def _idle_seconds(self) -> float:
        """Until the next look at main: POLL_SECONDS, or less when a retry is due."""
        now = time.time()
        due = [r.retry_at for r in self._records().values() if r.retry_at is not None]
        return max(0.05, min([POLL_SECONDS, *(at - now for at in due)]))

    # -- pushing ------------------------------------------------------------------------

    def push(self, *, explicit: bool) -> None:
        """Push ``main`` to every mirror that needs it: one whose remote's main is not
        ours, unless (``explicit`` False) it is down and its retry is not due, or it
        refused this very ``main``. ``explicit``: push now to each mirror that is not
        up to date, whatever its state (never forced)."""
        head = self._head()
        if not explicit and not any(self._due(r, head) for r in self._records().values()):
            return
        with self._pushes, statefile.locked(self.lock_file):
            records = self._records()  # another daemon may have pushed meanwhile
            head = self._head()
            for url in self.urls:
                record = records[url]
                if head is None or not (explicit or self._due(record, head)):
                    continue
                if explicit and record.remote_head == head:
                    continue
                self._pushing = url
                try:
                    pushed = self._push(url, record, head)
                finally:
                    self._pushing = None
                if pushed:
                    self._save(records)

    @staticmethod
    def _due(record: Record, head: str | None) -> bool:
        if head is None or record.remote_head == head:
            return False
        if record.state in (DIVERGED, REFUSED) and record.rejected_head == head:
            return False  # until main moves, or someone asks
        return not (record.state in (DOWN, REFUSED) and record.retry_at is not None
                    and time.time() < record.retry_at)

    def _push(self, url: str, record: Record, head: str) -> bool:
        """One push of ``head`` to ``url``'s main; updates ``record``. False when the
        daemon stopped it: nothing is known then (the next start pushes again)."""
        run = self.runner.run(["push", "--porcelain", "--no-verify", "--", url,
                               f"{head}:{REF}"], git_dir=self.repository,
                              timeout=PUSH_TIMEOUT)
        if run.stopped:
            return False
        now = time.time()
        record.last_attempt = now
        if run.ok:
            if record.state != OK and record.state != _NEVER:
                log.info("store %s: mirror %s is up to date again", self.store, shown(url))
            record.state, record.remote_head, record.last_success = OK, head, now
            record.last_error = record.retry_at = record.rejected_head = None
            record.failures = 0
            self._count(url, "ok")
            return True
        refusal = access_refusal(url, run)
        if refusal is not None:
            # the remote refuses the daemon's user until someone changes it: later and
            # later, never at every commit
            record.failures = record.failures + 1 if record.state == REFUSED else 1
            wait = min(ACCESS_RETRY_MAX, ACCESS_RETRY_FIRST * 2 ** (record.failures - 1))
            record.retry_at = now + wait * random.uniform(0.9, 1.1)
            record.state, record.last_error, record.rejected_head = REFUSED, refusal, None
            log.warning("store %s: mirror %s refused: %s; pushing again in %.0f s (or "
                        "with `memfs mirror push`)", self.store, shown(url),
                        record.last_error, record.retry_at - now)
            self._count(url, REFUSED)
            return True
        rejected = _rejected(run.stdout)
        if rejected is not None:
            remote, reason = rejected
            diverged = not remote and reason in ("non-fast-forward", "fetch first",
                                                 "stale info", "already exists")
            record.state = DIVERGED if diverged else REFUSED
            record.rejected_head, record.failures, record.retry_at = head, 0, None
            if diverged:
                record.last_error = (
                    f"the remote's main is not an ancestor of this store's ({reason}): "
                    "someone pushed another history to it or rewrote it; it is never "
                    "overwritten")
            else:
                record.last_error = f"the remote refused the push: {reason}"
            found = self._remote_head(url)
            if found is not None:
                record.remote_head = found or None
            log.warning("store %s: mirror %s %s: %s (tried again when the history "
                        "changes, or with `memfs mirror push`)", self.store, shown(url),
                        record.state, record.last_error)
            self._count(url, record.state)
            return True
        record.failures = record.failures + 1 if record.state == DOWN else 1
        wait = min(RETRY_MAX, RETRY_FIRST * 2 ** (record.failures - 1))
        record.retry_at = now + wait * random.uniform(0.9, 1.1)
        record.state, record.last_error = DOWN, run.said()
        log.warning("store %s: mirror %s is down (%s); pushing again in %.0f s",
                    self.store, shown(url), record.last_error, record.retry_at - now)
        self._count(url, DOWN)
        return True

    def _remote_head(self, url: str) -> str | None:
        """The remote's main now ("" when it has none; None: not known)."""
        run = self.runner.run(["ls-remote", "--", url, REF], git_dir=self.repository,
                              timeout=LS_REMOTE_TIMEOUT)
        if not run.ok:
            return None
        for line in run.stdout.splitlines():
            oid, _, name = line.partition("\t")
            if name == REF and len(oid) == 40:
                return oid
        return ""

    def _count(self, url: str, outcome: str) -> None:
        with self._counting:
            self._outcomes[url, outcome] = self._outcomes.get((url, outcome), 0) + 1

    def outcomes(self) -> dict[tuple[str, str], int]:
        """(URL, outcome) -> pushes of this daemon with that outcome (ok, down,
        diverged, refused)."""
        with self._counting:
            return dict(self._outcomes)

    # -- state --------------------------------------------------------------------------

    def _records(self) -> dict[str, Record]:
        """Each mirror's record from the state file (a fresh one for a new URL)."""
        try:
            text = statefile.read_text(self.state_file)
            data = json.loads(text) if text else {}
        except (MemfsError, ValueError):
            data = {}
        kept = data.get("mirrors", {}) if isinstance(data, dict) else {}
        if not isinstance(kept, dict):
            kept = {}
        return {url: Record.parse(kept.get(url)) for url in self.urls}

    def _save(self, records: dict[str, Record]) -> None:
        """Write the records (under the store's mirror lock). A failure is logged: the
        next push writes them again."""
        text = json.dumps({"mirrors": {url: asdict(r) for url, r in records.items()}},
                          indent=1, sort_keys=True)
        try:
            statefile.write_atomically(self.state_file, text + "\n")
        except OSError as error:
            log.warning("store %s: cannot write %s: %s", self.store, self.state_file, error)

    def note_remote_head(self, url: str, head: str) -> None:
        """Record that ``url``'s main is ``head`` (a restore fetched it from there)."""
        with statefile.locked(self.lock_file):
            records = self._records()
            record = records[url]
            record.state, record.remote_head, record.last_success = OK, head, time.time()
            self._save(records)

    def _head(self) -> str | None:
        """Our main now (None: no history yet, or not readable now)."""
        try:
            repo = pygit2.Repository(str(self.repository))
            ref = repo.references.get(REF)
        except (pygit2.GitError, KeyError, ValueError):
            return None
        return None if ref is None else str(ref.target)

    # -- status -------------------------------------------------------------------------

    def status(self) -> list[MirrorStatus]:
        """Each mirror's status now."""
        head = self._head()
        found = []
        for url, record in self._records().items():
            state = record.state
            if state in (OK, _NEVER):
                state = OK if head is None or record.remote_head == head else PENDING
            found.append(MirrorStatus(
                self.store, shown(url), state, self._pushing == url,
                self._commits_behind(head, record.remote_head), head, record.remote_head,
                record.last_success, record.last_attempt, record.last_error,
                record.retry_at if record.state in (DOWN, REFUSED) else None))
        return found

    def _commits_behind(self, head: str | None, remote: str | None) -> int:
        """Commits on our main that ``remote`` lacks: all of them when ``remote`` is
        not a commit we know (none yet, or another history)."""
        if head is None or head == remote:
            return 0
        key = (head, remote)
        known = self._behind  # one (head, remote) remembered; status may run in threads
        if key in known:
            return known[key]
        try:
            count = _count_behind(self.repository, head, remote)
        except (pygit2.GitError, KeyError, ValueError) as error:
            log.warning("store %s: cannot count the commits behind: %s", self.store, error)
            return 0
        self._behind = {key: count}
        return count


def _count_behind(repository: Path, head: str, remote: str | None) -> int:
    repo = pygit2.Repository(str(repository))
    walker = repo.walk(pygit2.Oid(hex=head), pygit2.enums.SortMode.NONE)
    if remote is not None:
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
            walker.hide(pygit2.Oid(hex=remote))  # unknown here: every commit counts
    return sum(1 for _ in walker)


# What git says when the remote refuses the daemon's user, lowercased: (words, what is
# missing). A refusal lasts until someone changes the remote, unlike an outage.
_ACCESS = (
    ("detected dubious ownership", "the repository is not owned by the daemon's user "
     "{user} (uid {uid}): git refuses it unless it is theirs or in their "
     "safe.directory"),
    ("read-only file system", "the daemon's user {user} (uid {uid}) may not write "
     "there: the file system is read-only"),
    ("unable to create temporary object directory", "the daemon's user {user} (uid "
     "{uid}) may not write to the repository (its permissions, or a read-only file "
     "system)"),
    ("insufficient permission", "the daemon's user {user} (uid {uid}) may not write to "
     "the repository's files"),
    ("permission denied", "the daemon's user {user} (uid {uid}) has no access to it"),
    ("not a git repository", "it is no repository the daemon's user {user} (uid {uid}) "
     "may push to"),
)


def access_refusal(url: str, run: GitRun) -> str | None:
    """Why the remote refused the daemon's user, when a failed push says so: what git
    said first (its first error line), then whose access is missing (the daemon's user
    and uid). None for any other failure (the remote unreachable, a hook). A local
    path git cannot find is looked at too: one the daemon's user may not reach is a
    refusal; one that does not exist is not (a disk not mounted yet)."""
    lines = [line.strip() for line in run.stderr.splitlines() if line.strip()]
    said = run.stderr.lower()
    for words, missing in _ACCESS:
        if words in said:
            first = next((line for line in lines if words in line.lower()), lines[0])
            return _naming(first, missing)
    path = _local_path(url)
    if path is not None and "does not appear to be a git repository" in said:
        try:
            os.stat(path)
        except PermissionError:
            return _naming(f"{lines[0]} (permission denied)",
                           "the daemon's user {user} (uid {uid}) may not reach it")
        except OSError:
            return None
        return _naming(lines[0], _ACCESS[-1][1])
    return None


def _naming(said: str, missing: str) -> str:
    """``said``, then ``missing`` naming the daemon's user and uid."""
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = "?"
    for prefix in ("fatal: ", "error: "):
        said = said.removeprefix(prefix)
    return f"{said[:300]}: {missing.format(user=user, uid=uid)}"


def _local_path(url: str) -> str | None:
    """The directory a file:// URL or a plain path names; None for a network URL."""
    if url.startswith("file://"):
        return urllib.parse.unquote(url.removeprefix("file://"))
    if url.startswith("/"):
        return url
    return None


def _rejected(porcelain: str) -> tuple[bool, str] | None:
    """(refused by the remote itself, reason) when ``git push --porcelain`` says main
    was rejected, else None: ``!<TAB>FROM:TO<TAB>[rejected] (non-fast-forward)`` or
    ``... [remote rejected] (hook declined)``."""
    for line in porcelain.splitlines():
        flag, _, rest = line.partition("\t")
        if flag != "!" or f":{REF}\t" not in rest:
            continue
        summary = rest.partition("\t")[2]
        reason = summary.partition("(")[2].rstrip(")").strip() or summary.strip()
        return summary.startswith("[remote rejected]"), reason
    return None


class Mirrors:
    """Every store's mirrors (only stores with a ``mirror`` setting have one). Made
    cheaply (nothing starts); `start` starts the pushers, `close` stops them and any
    git under way."""

    def __init__(self, config: Config) -> None:
        state = config.root / "state"
        self.runner = GitRunner()
        self.stores: dict[str, StoreMirror] = {
            name: StoreMirror(name, spec.mirrors, state / "history" / f"{name}.git",
                              state / "mirrors", self.runner)
            for name, spec in config.stores.items() if spec.mirrors and spec.history}
        self._started = False

    def start(self) -> None:
        """Start a pusher per store with mirrors; each looks at main at once."""
        for mirror in self.stores.values():
            mirror.state_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            mirror.start()
            mirror.wake()
        self._started = True

    def close(self) -> None:
        """Stop the pushers (a push under way is killed: the remote keeps what it had)."""
        self.runner.stop()
        if self._started:
            for mirror in self.stores.values():
                mirror.stop()

    def committed(self, path: MemPath) -> None:
        """A commit listener (Engine.commit_listeners): wake the store's pusher."""
        mirror = self.stores.get(path.store)
        if mirror is not None:
            mirror.wake()

    def of(self, store: str) -> StoreMirror:
        """The mirrors of ``store``; raises NotFound when it has none."""
        mirror = self.stores.get(store)
        if mirror is None:
            raise NotFound(f"store {store} has no mirror (set mirror = \"URL\" in its "
                           "[stores.NAME] table)")
        return mirror

    def status(self, stores: list[str]) -> list[MirrorStatus]:
        """The status of every mirror of ``stores`` (those without mirrors skipped)."""
        return [status for store in stores if store in self.stores
                for status in self.stores[store].status()]

    def push(self, stores: list[str]) -> list[MirrorStatus]:
        """Push each of ``stores`` to its mirrors now and wait for the result; raises
        MirrorFailed when a mirror is not up to date afterwards."""
        found = []
        for store in stores:
            mirror = self.of(store)
            mirror.push(explicit=True)
            found += mirror.status()
        failed = [s for s in found if s.state != OK]
        if failed:
            raise MirrorFailed("; ".join(
                f"store {s.store}: mirror {s.url} is {s.state}: {s.last_error or '?'}"
                for s in failed), found)
        return found
