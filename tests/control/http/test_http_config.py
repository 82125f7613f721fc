"""The [http] config table: listen addresses, TLS pairs, and the refusal to serve
beyond loopback without TLS (naming why)."""

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
