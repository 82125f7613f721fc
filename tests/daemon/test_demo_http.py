"""The demo's HTTP listener (127.0.0.1:7800) and its bearer token for agent demo: made
only once the daemon owns its root, kept in ROOT/state/demo-token (0600) and printed
again at every start until it is revoked; a second demo that fails to start changes
no token."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

from memfs.daemon.demo import DEMO_LISTEN, demo_banner, demo_config, demo_token
from memfs.tokens import Tokens
from tests.control.http.conftest import client
from tests.support import MEMFS, REPO, Daemon, daemon_ids, scaled


def test_the_demo_token_is_kept_until_revoked(tmp_path: Path) -> None:
    config = demo_config(4242).model_copy(update={"root": tmp_path})
    assert config.http is not None and config.http.listen == DEMO_LISTEN == "127.0.0.1:7800"
    first = demo_token(config)
    assert demo_token(config) == first  # the next start prints the same token
    kept = tmp_path / "state" / "demo-token"
    assert kept.read_text() == first + "\n" and stat.S_IMODE(kept.stat().st_mode) == 0o600
    tokens = Tokens(tmp_path / "state")
    record = tokens.verify(first)
    assert record is not None and record.agent == "demo"
    tokens.revoke(record.id)
    second = demo_token(config)  # revoked: a new one
    assert second != first and tokens.verify(second) is not None
    kept.unlink()
    third = demo_token(config)  # its one plain copy lost: a new one
    assert third not in (first, second) and tokens.verify(second) is not None
    banner = demo_banner(config, third)
    assert f"export MEMFS_TOKEN={third}" in banner
    assert 'curl -H "Authorization: Bearer $MEMFS_TOKEN" http://127.0.0.1:7800/v1/stores' in banner
    assert "http://127.0.0.1:7800/ui/ (sign in with that token)" in banner
    assert "MEMFS_TOKEN" not in demo_banner(config)


def demo(base: Path) -> Daemon:
    """``memfs serve --demo`` on a root in ``base``, its socket there too, no mount,
    HTTP on a free port (started as root: it serves as the memfs user)."""
    env = {"MEMFS_DEMO_ROOT": str(base / "root"), "MEMFS_DEMO_LISTEN": "127.0.0.1:0",
           "SUDO_UID": ""}  # agent demo is root, the test's uid
    socket = base / "demo.sock"
    return Daemon({"socket": str(socket), "http": {}}, env=env,
                  args=["--demo", "--no-mount", "--socket", str(socket)])


def printed_token(daemon: Daemon) -> str:
    """The token in the banner of the daemon's current start."""
    deadline = time.monotonic() + scaled(60)
    while True:
        this_start = daemon.log_path.read_bytes()[daemon._log_start:].decode(errors="replace")
        found = re.findall(r"export MEMFS_TOKEN=(\S+)", this_start)
        if found:
            return found[-1]
        assert daemon.alive() and time.monotonic() < deadline, daemon.log()
        time.sleep(0.05)


def signed_in(daemon: Daemon, token: str) -> int:
    with client(daemon, token) as http:
        return http.get("/v1/stores").status_code


def test_a_second_demo_or_a_restart_keeps_the_token(base: Path) -> None:
    first = demo(base).start()
    try:
        token = printed_token(first)
        assert signed_in(first, token) == 200
        with pytest.raises(RuntimeError, match="in use by another running daemon"):
            demo(base).start()  # on the same root: fails to start ...
        assert signed_in(first, token) == 200  # ... and the first's token still works
        kept = base / "root" / "state" / "demo-token"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert (kept.stat().st_uid, kept.stat().st_gid) == daemon_ids()  # the service user's
        first.stop()
        first.start()
        assert printed_token(first) == token  # a restart prints the same token
        assert signed_in(first, token) == 200
        revoked = subprocess.run([*MEMFS, "--socket", str(first.socket), "token", "revoke",
                                  token.split("_")[1]], capture_output=True, cwd=REPO,
                                 env={**os.environ, "SUDO_UID": ""}, timeout=60)
        assert revoked.returncode == 0, revoked.stderr
        first.stop()
        first.start()
        renewed = printed_token(first)  # revoked: a new one, printed
        assert renewed != token
        assert signed_in(first, renewed) == 200 and signed_in(first, token) == 401
    finally:
        if first.alive():
            first.stop()
