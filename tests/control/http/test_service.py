"""memfs as a system service: sd_notify READY=1 only once the mount is usable and the
socket and HTTP listener answer (a fake NOTIFY_SOCKET stands in for systemd), then
STOPPING=1; TLS serves HTTPS; a non-loopback listen without TLS is refused at start
(the unit file: tests/daemon/test_system_service.py)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from memfs.daemon.sdnotify import notify
from tests.control.http.conftest import http_config
from tests.support import (
    MEMFS,
    REPO,
    UID_A,
    Daemon,
    connect_as,
    dump_toml,
    run_as,
    scaled,
)


def receive(listener: socket.socket, timeout: float = 60.0) -> str:
    listener.settimeout(scaled(timeout))
    return listener.recv(4096).decode()


def test_ready_after_everything_is_up_then_stopping(tmp_path: Path) -> None:
    config = http_config("memfs-http-notify-")
    address = str(Path(config["socket"]).parent / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(address)
        os.chmod(address, 0o666)  # as systemd's own: the daemon drops root before READY
        daemon = Daemon(config, mount=True)  # writes the config; started by hand below,
        argv = [*MEMFS, "serve", "--config", str(daemon.config_path)]  # with no polling
        log = open(daemon.log_path, "ab")  # noqa: SIM115 - closed below
        daemon.proc = subprocess.Popen(argv, stdout=log, stderr=log, cwd=REPO,
                                       env={**os.environ, "NOTIFY_SOCKET": address})
        try:
            ready = receive(listener)
            # Nothing below waits or retries: all of it must already be up.
            assert ready.startswith("READY=1\n") and "STATUS=serving" in ready, ready
            assert os.path.ismount(daemon.mountpoint)
            with connect_as(UID_A, daemon.socket) as alice:
                alice.write("notes/ready.md", "up\n")
            listed = run_as(UID_A, ["ls", str(daemon.mountpoint)])
            assert listed.returncode == 0 and b"notes" in listed.stdout.split(), listed
            shown = run_as(UID_A, ["cat", f"{daemon.mountpoint}/notes/ready.md"])
            assert shown.stdout == b"up\n"
            assert httpx.get(f"{daemon.http_url}/healthz", timeout=scaled(30)).status_code == 200
            daemon.proc.terminate()
            assert receive(listener) == "STOPPING=1"
            assert daemon.proc.wait(60) == 0
            assert not os.path.ismount(daemon.mountpoint)
        finally:
            if daemon.proc.poll() is None:
                daemon.proc.kill()
                daemon.proc.wait()
            log.close()


def test_notify_without_a_manager_and_with_an_abstract_socket(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False
    name = f"memfs-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("READY=1") is True
        assert receive(listener, 10) == "READY=1"
    monkeypatch.setenv("NOTIFY_SOCKET", "/nonexistent/notify.sock")
    assert notify("READY=1") is False  # logged, never raised


def test_non_loopback_without_tls_is_refused_at_start(tmp_path: Path) -> None:
    config = http_config("memfs-http-refuse-")
    config["http"] = {"listen": "0.0.0.0:7800"}
    path = Path(config["socket"]).with_suffix(".toml")
    path.write_text(dump_toml(config))
    done = subprocess.run([*MEMFS, "serve", "--config", str(path), "--no-mount"],
                          capture_output=True, text=True, cwd=REPO, timeout=scaled(60))
    assert done.returncode == 2
    assert "not a loopback address" in done.stderr and "tls_cert" in done.stderr
    assert not Path(config["socket"]).exists()


def test_tls_listener(tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: no certificate to test TLS with")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=scaled(120))
    config = http_config("memfs-http-tls-", tls_cert=str(cert), tls_key=str(key))
    with Daemon(config) as daemon:
        assert daemon.http_url.startswith("https://")
        token = daemon.token("alice")
        trusted = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(base_url=daemon.http_url, verify=trusted, timeout=scaled(60),
                          headers={"Authorization": f"Bearer {token}"}) as https:
            assert https.get("/v1/stores").json()["agent"] == "alice"
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served there
            httpx.get(daemon.http_url.replace("https://", "http://") + "/healthz",
                      timeout=scaled(10))


def test_unreadable_certificate_or_busy_port_is_refused_at_start(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        for http, message in (
            ({"listen": "127.0.0.1:0", "tls_cert": str(tmp_path / "none.pem"),
              "tls_key": str(tmp_path / "none.key")}, "cannot load [http] tls_cert"),
            ({"listen": f"127.0.0.1:{port}"},
             f"cannot listen on 127.0.0.1:{port} ([http] listen): the address is in use"),
        ):
            config = http_config("memfs-http-refuse-", **http)
            path = Path(config["socket"]).with_suffix(".toml")
            path.write_text(dump_toml(config))
            done = subprocess.run([*MEMFS, "serve", "--config", str(path), "--no-mount"],
                                  capture_output=True, text=True, cwd=REPO, timeout=scaled(120))
            assert done.returncode == 1 and message in done.stderr, done.stderr
            assert not Path(config["socket"]).exists()
    finally:
        taken.close()
