"""The real ``memfs`` CLI on "another machine": every command through ``--url`` and
``--token-file`` (or MEMFS_URL, MEMFS_TOKEN_FILE) against a real daemon's HTTP
listener on loopback, and each way it can go wrong said in one line with the CLI's
exit code."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.control.http.conftest import http_config
from tests.support import MEMFS, REPO, Daemon, scaled


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(http_config("memfs-remote-cli-")) as running:
        yield running


def private(folder: Path, name: str, token: str) -> str:
    path = folder / name
    path.write_text(token + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture(scope="module")
def token_files(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("remote-tokens")
    return {agent: private(folder, agent, daemon.token(agent)) for agent in ("alice", "bob")}


def run(*args: str, input: bytes = b"", env: Mapping[str, str] | None = None,
        cwd: Path | str = REPO) -> subprocess.CompletedProcess[bytes]:
    """``memfs ARGS`` with no MEMFS_* of this process's environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMFS_")}
    return subprocess.run([*MEMFS, *args], input=input, capture_output=True, cwd=cwd,
                          env={**clean, **(env or {})}, timeout=scaled(60))


def remote(daemon: Daemon, token_file: str, *args: str, input: bytes = b""
           ) -> subprocess.CompletedProcess[bytes]:
    return run("--url", daemon.http_url, "--token-file", token_file, *args, input=input)


def ok(done: subprocess.CompletedProcess[bytes]) -> str:
    assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    return done.stdout.decode()


def one_line(done: subprocess.CompletedProcess[bytes], code: int, *words: str) -> str:
    """Assert exit ``code`` and a single line on stderr holding ``words``."""
    text = done.stderr.decode()
    assert done.returncode == code, (done.returncode, text)
    assert text.startswith("memfs: ") and text.count("\n") == 1, text
    for word in words:
        assert word in text, (word, text)
    return text


def test_file_commands(daemon: Daemon, token_files: dict[str, str], tmp_path: Path) -> None:
    alice = token_files["alice"]

    def memfs(*args: str, input: bytes = b"") -> str:
        return ok(remote(daemon, alice, *args, input=input))

    assert memfs("write", "notes/remote/a.md", input=b"one\ntwo\n").startswith(
        "wrote notes/remote/a.md (8 bytes")
    assert memfs("cat", "notes/remote/a.md") == "one\ntwo\n"
    assert memfs("cat", "notes/remote/a.md", "--offset", "2") == "two\n"
    assert "last_writer: alice" in memfs("stat", "notes/remote/a.md")
    assert memfs("write", "--append", "notes/remote/a.md", input=b"three\n").startswith(
        "appended to notes/remote/a.md (14 bytes")
    assert memfs("edit", "notes/remote/a.md", "-e", "s/one/ONE/").startswith("edited")
    assert memfs("ls", "notes/remote/*") == "notes/remote/a.md\n"
    assert "notes/remote/a.md\n" in memfs("ls")
    assert memfs("grep", "-n", "ONE", "notes/remote") == "notes/remote/a.md:1:ONE\n"
    assert '"path":"notes/remote/a.md"' in memfs("grep", "--json", "ONE", "notes")
    log = memfs("log", "notes/remote/a.md")
    assert [line.split()[4] for line in log.splitlines()] == ["edit", "append", "write"]
    assert "+ONE" in memfs("diff", "notes/remote/a.md", "HEAD~1")
    assert memfs("cat", "notes/remote/a.md", "--at", "HEAD~2") == "one\ntwo\n"
    assert memfs("restore", "notes/remote/a.md", "HEAD~1").startswith("restored")
    assert memfs("cat", "notes/remote/a.md") == "one\ntwo\nthree\n"
    local = tmp_path / "copy.md"
    assert memfs("download", "notes/remote/a.md", str(local)).startswith("downloaded")
    local.write_bytes(b"uploaded\n")
    assert memfs("upload", str(local), "notes/remote/a.md").startswith("uploaded")
    ok(remote(daemon, alice, "reindex", "notes"))
    assert "notes/remote/a.md" in memfs("recall", "uploaded")
    assert memfs("rm", "notes/remote/a.md") == "removed notes/remote/a.md\n"
    one_line(remote(daemon, alice, "cat", "notes/remote/a.md"), 5, "not found")


def test_memory_commands(daemon: Daemon, token_files: dict[str, str]) -> None:
    bob = token_files["bob"]  # one structured store (team): --store may be left out

    def memfs(*args: str) -> str:
        return ok(remote(daemon, bob, *args)).strip()

    assert memfs("task", "add", "remote-t", "--title", "do it") == "remote-t"
    assert "remote-t" in memfs("task", "list", "--store", "team")
    assert memfs("task", "claim", "remote-t", "--ttl", "5m").startswith("claimed remote-t")
    assert memfs("task", "checkpoint", "remote-t", "half").startswith("checkpoint on")
    assert memfs("task", "complete", "remote-t") == "completed remote-t"
    assert "status: done" in memfs("task", "show", "remote-t")
    session = memfs("session", "start", "--goal", "from afar")
    assert memfs("session", "checkpoint", session, "noted").startswith("checkpoint added")
    assert memfs("session", "handoff", session, "--summary", "s", "--next", "n").startswith(
        "handed off")
    assert session in memfs("session", "list")
    assert "checkpoint: noted" in memfs("session", "show", session)
    made = memfs("decision", "record", "--title", "far", "--decision", "d", "--reason", "r")
    assert made in memfs("decision", "list")
    assert "far" in memfs("decision", "show", made)
    assert memfs("brief").startswith("# Brief for bob")
    assert "tasks" in memfs("summary")
    ok(remote(daemon, bob, "mirror", "status"))  # none configured: nothing to say
    claimed = remote(daemon, token_files["alice"], "task", "claim", "remote-t", "--store",
                     "team")
    one_line(claimed, 3, "closed")  # done: closed to claims, exit 3 as over the socket


def test_lost_update_is_refused(daemon: Daemon, token_files: dict[str, str]) -> None:
    """alice reads through --url, bob writes, alice's write through --url is refused."""
    alice, bob = token_files["alice"], token_files["bob"]
    ok(remote(daemon, alice, "write", "notes/remote/lost.md", input=b"v1\n"))
    assert ok(remote(daemon, alice, "cat", "notes/remote/lost.md")) == "v1\n"
    ok(remote(daemon, bob, "cat", "notes/remote/lost.md"))
    ok(remote(daemon, bob, "write", "notes/remote/lost.md", input=b"bob's\n"))
    stale = remote(daemon, alice, "write", "notes/remote/lost.md", input=b"alice's\n")
    one_line(stale, 3, "conflict", "changed since you last read it", "bob")
    assert ok(remote(daemon, alice, "cat", "notes/remote/lost.md")) == "bob's\n"
    ok(remote(daemon, alice, "write", "notes/remote/lost.md", input=b"alice's\n"))


def test_environment_variables(daemon: Daemon, token_files: dict[str, str]) -> None:
    env = {"MEMFS_URL": daemon.http_url, "MEMFS_TOKEN_FILE": token_files["alice"]}
    ok(run("write", "notes/remote/env.md", input=b"env\n", env=env))
    assert ok(run("cat", "notes/remote/env.md", env=env)) == "env\n"
    # --socket names the daemon: MEMFS_URL does not apply
    assert ok(run("--socket", str(daemon.socket), "--as", "alice", "cat",
                  "notes/remote/env.md", env=env)) == "env\n"


def test_token_file_mode_0644_is_refused(daemon: Daemon, token_files: dict[str, str],
                                         tmp_path: Path) -> None:
    shared = tmp_path / "token"
    shutil.copy(token_files["alice"], shared)
    shared.chmod(0o644)
    one_line(remote(daemon, str(shared), "cat", "notes/x.md"), 2, "mode 0644",
             f"chmod 600 {shared}")
    one_line(run("--url", daemon.http_url, "cat", "notes/x.md"), 2, "--token-file",
             "MEMFS_TOKEN_FILE")


def test_revoked_token(daemon: Daemon, tmp_path: Path) -> None:
    token = daemon.token("alice", "--label", "revoked")
    path = private(tmp_path, "token", token)
    ok(remote(daemon, path, "ls"))
    ok(run("--socket", str(daemon.socket), "token", "revoke", token.split("_")[1]))
    text = one_line(remote(daemon, path, "ls"), 1, "unauthenticated", "revoked", path,
                    "memfs token create")
    assert token not in text


def test_bad_url_and_unreachable(token_files: dict[str, str]) -> None:
    alice = token_files["alice"]
    one_line(run("--url", "localhost:7800", "--token-file", alice, "ls"), 2, "bad URL",
             "https://")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
    one_line(run("--url", f"http://127.0.0.1:{port}", "--token-file", alice, "ls"), 1,
             "connection", f"cannot reach the memfs daemon at http://127.0.0.1:{port}")


@pytest.mark.parametrize("args", [
    ("token", "list"), ("agent", "list"), ("serve",), ("mcp",),
])
def test_host_only_commands_say_so(daemon: Daemon, token_files: dict[str, str],
                                   args: tuple[str, ...]) -> None:
    done = remote(daemon, token_files["alice"], *args)
    one_line(done, 2, f"memfs {args[0]} works only on the daemon's host")


def test_as_does_not_go_with_a_url(daemon: Daemon, token_files: dict[str, str]) -> None:
    one_line(remote(daemon, token_files["alice"], "--as", "bob", "ls"), 2,
             "the token names the agent")
    one_line(run("--url", daemon.http_url, "--socket", str(daemon.socket), "ls"), 2,
             "two daemons")


def test_tls(tmp_path: Path) -> None:
    """A self-signed daemon: refused without --cacert (one line saying what to do),
    trusted with it or MEMFS_CACERT; plain http:// to it fails clearly."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: no certificate to test TLS with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=120)
    config = http_config("memfs-remote-tls-", tls_cert=str(cert), tls_key=str(key))
    with Daemon(config) as daemon:
        url = daemon.http_url
        assert url.startswith("https://")
        token = private(tmp_path, "token", daemon.token("alice"))
        one_line(run("--url", url, "--token-file", token, "ls"), 1, "TLS",
                 "not trusted: self-signed certificate", "--cacert", "MEMFS_CACERT")
        ok(run("--url", url, "--token-file", token, "--cacert", str(cert), "write",
               "notes/tls.md", input=b"secure\n"))
        assert ok(run("--url", url, "--token-file", token, "cat", "notes/tls.md",
                      env={"MEMFS_CACERT": str(cert)})) == "secure\n"
        plain = url.replace("https://", "http://")
        one_line(run("--url", plain, "--token-file", token, "ls"), 1, "connection", plain)
