"""Bearer tokens: missing, wrong, revoked and expired tokens are 401 with
WWW-Authenticate; only delegates manage them (exit 4 otherwise); only hashes are kept;
last use is written without a disk write per request; daemons on one root share them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.control.http.conftest import client, http_config, problem
from tests.support import MEMFS, REPO, UID_A, Daemon, memfs_as

PROTECTED = ("/v1/stores", "/v1/stores/notes/files/a.md", "/mcp", "/metrics")


def cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMFS, "--socket", str(daemon.socket), "token", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def unauthorized(response: httpx.Response, *, invalid: bool) -> None:
    problem(response, 401, "unauthenticated")
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer")
    assert ('error="invalid_token"' in challenge) is invalid


def test_missing_and_wrong_tokens_are_401(daemon: Daemon, tokens: dict[str, str]) -> None:
    real = tokens["alice"]
    token_id = real.split("_")[1]
    wrong = [
        "nonsense", "memfs_", real[:-1] + ("A" if real[-1] != "A" else "B"),
        f"memfs_{token_id}_{'x' * 43}", "memfs_000000000000_" + real.split("_", 2)[2],
        real + "x", "x" * 10_000,
    ]
    with httpx.Client(base_url=daemon.http_url, timeout=60) as anonymous:
        for path in PROTECTED:
            unauthorized(anonymous.get(path), invalid=False)
            for token in wrong:
                unauthorized(anonymous.get(path, headers={"Authorization": f"Bearer {token}"}),
                             invalid=True)
            unauthorized(anonymous.get(path, headers={"Authorization": f"Basic {real}"}),
                         invalid=True)
        assert anonymous.get("/v1/stores", headers={
            "Authorization": f"bearer {real}"}).status_code == 200  # the scheme is caseless


def test_revoked_token_is_401_at_once(daemon: Daemon) -> None:
    token = daemon.token("bob", "--label", "to revoke")
    with client(daemon, token) as http:
        assert http.get("/v1/stores").status_code == 200
        token_id = token.split("_")[1]
        done = cli(daemon, "revoke", token_id)
        assert done.returncode == 0 and token_id in done.stdout
        unauthorized(http.get("/v1/stores"), invalid=True)
    assert cli(daemon, "revoke", token_id).returncode == 0  # again: nothing changes
    listed = json.loads(cli(daemon, "list", "--json").stdout)["tokens"]
    assert {t["id"]: t["state"] for t in listed}[token_id] == "revoked"
    missing = cli(daemon, "revoke", "0123456789ab")
    assert missing.returncode == 5 and "no token" in missing.stderr


def test_a_token_revoked_by_the_token_itself(daemon: Daemon) -> None:
    """`memfs token revoke TOKEN` takes the token as printed (only its id is sent)."""
    token = daemon.token("bob", "--label", "held")
    with client(daemon, token) as http:
        done = cli(daemon, "revoke", token)
        assert done.returncode == 0 and token.split("_")[1] in done.stdout, done.stderr
        unauthorized(http.get("/v1/stores"), invalid=True)


def test_expired_token_is_401(daemon: Daemon) -> None:
    token = daemon.token("alice", "--expires", "0.00002")  # 1.7 seconds
    listed = json.loads(cli(daemon, "list", "--json").stdout)["tokens"]
    record = next(t for t in listed if t["id"] == token.split("_")[1])
    assert record["expires"] is not None
    while time.time() < record["expires"] + 0.2:
        time.sleep(0.2)
    with client(daemon, token) as http:
        unauthorized(http.get("/v1/stores"), invalid=True)
    listed = json.loads(cli(daemon, "list", "--json").stdout)["tokens"]
    assert {t["id"]: t["state"] for t in listed}[record["id"]] == "expired"


def test_only_delegates_manage_tokens(daemon: Daemon) -> None:
    for args in (["token", "create", "alice"], ["token", "list"],
                 ["token", "revoke", "0123456789ab"], ["--as", "alice", "token", "create",
                                                       "alice"]):
        refused = memfs_as(UID_A, daemon.socket, *args)
        assert refused.returncode == 4, refused
        assert b"delegate" in refused.stderr
        assert refused.stdout == b""
    unknown = cli(daemon, "create", "mallory")
    assert unknown.returncode == 5 and "no agent named 'mallory'" in unknown.stderr
    assert cli(daemon, "create", "alice", "--expires", "-1").returncode == 2
    assert cli(daemon, "create", "alice", "--label", "bad\nlabel").returncode == 2


def test_create_prints_the_token_alone_and_keeps_only_a_hash(daemon: Daemon) -> None:
    made = cli(daemon, "create", "carol", "--label", "ci job", "--expires", "30")
    assert made.returncode == 0
    token = made.stdout.strip()
    assert made.stdout == token + "\n" and token.startswith("memfs_")
    assert "ci job" not in made.stdout and "shown only now" in made.stderr
    state = Path(daemon.config["root"]) / "state" / "tokens.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    text = state.read_text()
    secret = token.split("_", 2)[2]
    assert secret not in text and token not in text
    listed = cli(daemon, "list")
    assert listed.returncode == 0 and secret not in listed.stdout
    assert "ci job" in listed.stdout and "carol" in listed.stdout
    with client(daemon, token) as http:
        assert http.get("/v1/stores").json()["agent"] == "carol"
    assert secret not in daemon.log()


@pytest.fixture
def pair() -> Iterator[tuple[Daemon, Daemon]]:
    config = http_config("memfs-http-pair-")
    base = Path(config["socket"]).parent
    second = dict(config, socket=str(base / "second.sock"), mount=str(base / "m2"))
    first = Daemon(config).start()
    try:
        other = Daemon(second).start()
    except BaseException:
        first.stop()
        raise
    yield first, other
    for running in (first, other):
        if running.alive():
            running.stop()


def test_daemons_on_one_root_share_tokens_and_last_use(pair: tuple[Daemon, Daemon]) -> None:
    first, second = pair
    state = Path(first.config["root"]) / "state" / "tokens.json"
    token = first.token("alice", "--label", "shared")
    token_id = token.split("_")[1]
    written = os.stat(state).st_mtime_ns
    with client(second, token) as http:
        for _ in range(20):
            assert http.get("/v1/stores").status_code == 200
    assert os.stat(state).st_mtime_ns == written, "a request must not write the token file"
    # the daemon that served them knows the last use before it is written
    listed = json.loads(cli(second, "list", "--json").stdout)["tokens"]
    assert {t["id"]: t["last_used"] for t in listed}[token_id] is not None
    # revoked through one daemon, refused by the other at once
    assert cli(first, "revoke", token_id).returncode == 0
    with client(second, token) as http:
        unauthorized(http.get("/v1/stores"), invalid=True)
    assert second.stop() == 0  # writes the last use on the way out
    on_disk = {t["id"]: t for t in json.loads(state.read_text())["tokens"]}
    assert on_disk[token_id]["last_used"] is not None
    assert on_disk[token_id]["revoked"] is not None
