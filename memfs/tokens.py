"""Bearer tokens for the HTTP listener: created by a delegate, kept only as hashes.

A token reads ``memfs_<id>_<secret>``: ``id`` (12 hex digits) names it in ``memfs
token list`` and ``revoke``; ``secret`` is 32 random bytes (base64url). The file
``ROOT/state/tokens.json`` (mode 0600, in the private state directory) holds per
token its id, agent, label, times and the sha256 of the whole token, never the token
itself, so the config holds no secret and a leaked state file grants nothing.

The file is shared by every daemon on the root: changes are made under an flock
(``ROOT/state/locks/tokens.lock``) by re-reading it, and written atomically (temp
file, fsync, rename, fsync of the directory). `verify` answers from memory and
re-reads the file only when its stat changed, so a revocation by any daemon is seen
by the next request. Use is noted in memory and written by `flush_usage` (the daemon
calls it once a minute): no disk write per request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memfs.errors import MemfsError
from memfs.store.errors import InvalidInput, NotFound
from memfs.store.fs import statefile

log = logging.getLogger("memfs.tokens")

PREFIX = "memfs_"
ID_HEX = 12
SECRET_BYTES = 32
MAX_LABEL = 200
MAX_DAYS = 3650.0
_DUMMY_HASH = hashlib.sha256(b"memfs: no such token").hexdigest()


@dataclasses.dataclass(frozen=True)
class TokenRecord:
    id: str
    agent: str
    label: str
    created: float
    hash: str
    expires: float | None = None
    last_used: float | None = None
    revoked: float | None = None

    def state(self, now: float) -> str:
        """``active``, ``expired`` or ``revoked``."""
        if self.revoked is not None:
            return "revoked"
        if self.expires is not None and now >= self.expires:
            return "expired"
        return "active"

    def public(self, now: float | None = None) -> dict[str, Any]:
        """Everything but the hash, plus the state: what ``memfs token list`` shows."""
        fields = dataclasses.asdict(self)
        del fields["hash"]
        fields["state"] = self.state(time.time() if now is None else now)
        return fields


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def _records(data: object) -> dict[str, TokenRecord]:
    """The records of a parsed tokens file; raises ValueError when it is malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
        raise ValueError("no token list")
    names = {field.name for field in dataclasses.fields(TokenRecord)}
    records = {}
    for item in data["tokens"]:
        if not isinstance(item, dict) or not set(item) <= names:
            raise ValueError("a malformed token entry")
        record = TokenRecord(**item)
        records[record.id] = record
    return records


class Tokens:
    """The token file of one root; thread-safe."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "tokens.json"
        self._lock_path = state_dir / "locks" / "tokens.lock"
        self._mutex = threading.Lock()
        self._signature: tuple[int, int, int] | None = None
        self._records: dict[str, TokenRecord] = {}
        self._used: dict[str, float] = {}  # id -> last use not yet written
        self._broken_logged = False

    # -- reading ------------------------------------------------------------------

    def _read(self) -> dict[str, TokenRecord]:
        """The records on disk (none when there is no file); raises MemfsError when
        the file is unreadable or malformed (it is then never overwritten)."""
        text = statefile.read_text(self.path)
        if text is None:
            return {}
        try:
            return _records(json.loads(text))
        except (ValueError, TypeError) as error:
            raise MemfsError(f"{self.path} is malformed ({error}); fix or remove it") from None

    def _fresh(self) -> dict[str, TokenRecord]:
        """The records, re-read when the file changed since last time (one stat)."""
        try:
            st = os.stat(self.path)
            signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            signature = (0, 0, 0)
        with self._mutex:
            if signature != self._signature:
                try:
                    self._records = self._read()
                    self._broken_logged = False
                except MemfsError as error:
                    if not self._broken_logged:
                        log.error("%s: no token is accepted until it is fixed", error)
                        self._broken_logged = True
                    self._records = {}
                self._signature = signature
            return self._records

    def verify(self, token: str, now: float | None = None) -> TokenRecord | None:
        """The record of an active token (not revoked, not expired), else None.
        Compared in constant time; notes the use in memory (see `flush_usage`)."""
        now = time.time() if now is None else now
        record = None
        if token.startswith(PREFIX) and len(token) <= 200:
            record = self._fresh().get(token[len(PREFIX):len(PREFIX) + ID_HEX])
        matches = hmac.compare_digest(_hash(token), record.hash if record else _DUMMY_HASH)
        if record is None or not matches or record.state(now) != "active":
            return None
        with self._mutex:
            self._used[record.id] = now
        return record

    def active(self, token_id: str, now: float | None = None) -> TokenRecord | None:
        """The record of the token named ``token_id`` while it is active (not
        revoked, not expired), else None; for what was opened with a verified token
        (the web view's sign-ins), so that revoking or expiring the token ends it.
        Re-reads the file when it changed, like `verify`; notes the use."""
        now = time.time() if now is None else now
        record = self._fresh().get(token_id)
        if record is None or record.state(now) != "active":
            return None
        with self._mutex:
            self._used[record.id] = now
        return record

    def list(self) -> list[TokenRecord]:
        """Every token on file, oldest first, with uses not yet written merged in."""
        records = self._read()
        with self._mutex:
            used = dict(self._used)
        merged = [dataclasses.replace(r, last_used=max(r.last_used or 0, used[r.id]))
                  if r.id in used else r for r in records.values()]
        return sorted(merged, key=lambda r: (r.created, r.id))

    # -- changing -----------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, TokenRecord]]:
        """The records on disk under the shared lock; whatever the body leaves in the
        dict is written back atomically when it changed."""
        with statefile.locked(self._lock_path):
            records = self._read()
            before = dict(records)
            yield records
            if records != before:
                data = {"tokens": [dataclasses.asdict(r) for r in records.values()]}
                statefile.write_atomically(self.path,
                                           json.dumps(data, indent=1, sort_keys=True) + "\n")

    def create(self, agent: str, label: str = "", expires_days: float | None = None,
               now: float | None = None) -> tuple[str, TokenRecord]:
        """A new token for ``agent``: (the token, to be shown once; its record).
        Raises InvalidInput for a bad label or expiry."""
        if len(label) > MAX_LABEL or not label.isprintable():
            raise InvalidInput(f"a label is at most {MAX_LABEL} printable characters")
        if expires_days is not None and not 0 < expires_days <= MAX_DAYS:
            raise InvalidInput(f"--expires takes a number of days, more than 0 and at most "
                               f"{MAX_DAYS:g}")
        now = time.time() if now is None else now
        with self._locked() as records:
            token_id = secrets.token_hex(ID_HEX // 2)
            while token_id in records:
                token_id = secrets.token_hex(ID_HEX // 2)
            token = f"{PREFIX}{token_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
            expires = None if expires_days is None else now + expires_days * 86400
            record = TokenRecord(token_id, agent, label, now, _hash(token), expires)
            records[token_id] = record
        return token, record

    def revoke(self, token_id: str, now: float | None = None) -> TokenRecord:
        """Revoke a token for good (its record stays, for the list); raises NotFound.
        Revoking a revoked token changes nothing."""
        with self._locked() as records:
            record = records.get(token_id)
            if record is None:
                raise NotFound(f"no token with id {token_id!r} (see `memfs token list`)")
            if record.revoked is None:
                record = dataclasses.replace(record, revoked=time.time() if now is None else now)
                records[token_id] = record
        with self._mutex:
            self._signature = None  # re-read at the next verify
        return record

    def flush_usage(self) -> int:
        """Write the last-use times noted since the previous flush (one locked
        read-modify-write for all of them); returns how many tokens were updated."""
        with self._mutex:
            used, self._used = self._used, {}
        if not used:
            return 0
        updated = 0
        try:
            with self._locked() as records:
                for token_id, at in used.items():
                    record = records.get(token_id)
                    if record is not None and (record.last_used or 0) < at:
                        records[token_id] = dataclasses.replace(record, last_used=at)
                        updated += 1
        except BaseException:
            with self._mutex:  # keep them for the next round
                for token_id, at in used.items():
                    self._used[token_id] = max(at, self._used.get(token_id, 0))
            raise
        return updated
