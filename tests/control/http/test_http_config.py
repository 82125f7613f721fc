"""The [http] config table: listen addresses, TLS pairs, the refusal to serve
beyond loopback without TLS (naming why), and allowed_origins (checked, normalized as
a browser sends them)."""

from __future__ import annotations

from typing import Any

import pytest

from memfs.config import ConfigError, parse_config, parse_listen


def config(**http: Any) -> dict[str, Any]:
    return {"root": "/var/lib/memfs", "http": http}


def test_absent_means_no_listener() -> None:
    assert parse_config({"root": "/r"}).http is None
    assert parse_config(config()).http is not None
    assert parse_config(config()).http.address == ("127.0.0.1", 7800)  # type: ignore[union-attr]


@pytest.mark.parametrize("listen,address", [
    ("127.0.0.1:7800", ("127.0.0.1", 7800)), ("[::1]:0", ("::1", 0)),
    ("localhost:80", ("localhost", 80)), ("127.5.6.7:65535", ("127.5.6.7", 65535)),
])
def test_loopback_listen(listen: str, address: tuple[str, int]) -> None:
    assert parse_listen(listen) == address
    assert parse_config(config(listen=listen)).http is not None


@pytest.mark.parametrize("listen", ["0.0.0.0:7800", "[::]:7800", "192.0.2.1:443",
                                    "memfs.example:443"])
def test_beyond_loopback_needs_tls(listen: str) -> None:
    with pytest.raises(ConfigError, match=r"needs tls_cert and tls_key.*clear text"):
        parse_config(config(listen=listen))
    tls = parse_config(config(listen=listen, tls_cert="/etc/memfs/c.pem",
                              tls_key="/etc/memfs/k.pem")).http
    assert tls is not None and tls.tls_cert is not None


@pytest.mark.parametrize("http,fragment", [
    ({"listen": "127.0.0.1"}, "http.listen"), ({"listen": "127.0.0.1:99999"}, "http.listen"),
    ({"listen": ":80"}, "http.listen"), ({"tls_cert": "/c.pem"}, "both"),
    ({"public_metrics": "perhaps"}, "public_metrics"), ({"port": 80}, "http.port: unknown key"),
])
def test_bad_http_tables(http: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_config(config(**http))


def test_allowed_origins_are_normalized() -> None:
    http = parse_config(config(allowed_origins=[
        "https://app.example.org", "HTTPS://App.Example.org:443", "http://localhost:3000",
        "http://[::1]:8080", "http://192.0.2.7:80"])).http
    assert http is not None
    assert http.allowed_origins == [
        "https://app.example.org", "https://app.example.org", "http://localhost:3000",
        "http://[::1]:8080", "http://192.0.2.7"]
    assert parse_config(config()).http.allowed_origins == []  # type: ignore[union-attr]


@pytest.mark.parametrize("origin", [
    "app.example.org", "https://app.example.org/", "https://app.example.org/mcp",
    "ftp://app.example.org", "https://", "https://user@app.example.org", "null", "*",
    "https://*.example.org", "https://app.example.org:0", "https://app.example.org:70000",
    "https://app.example.org:", "https://[not-v6]:80", "https://-bad-.org",
    "https://app.example.org?x=1",
])
def test_bad_allowed_origins(origin: str) -> None:
    with pytest.raises(ConfigError, match=r"http\.allowed_origins.*scheme://host\[:port\]"):
        parse_config(config(allowed_origins=[origin]))
