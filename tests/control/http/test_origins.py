"""Which Host and Origin a request to /mcp may carry (control/http/origins.py), as pure
logic; the real listener's answers are in test_http_mcp.py."""

from __future__ import annotations

from typing import Any

import pytest

from memfs.config import HttpConfig
from memfs.control.http.origins import ListenerNames

LOCAL = ("127.0.0.1", 7800)


def names(**http: Any) -> ListenerNames:
    return ListenerNames(HttpConfig(**http))


@pytest.mark.parametrize("host", [
    None, "127.0.0.1:7800", "localhost:7800", "LOCALHOST:7800", "[::1]:7800"])
def test_loopback_names_with_the_bound_port(host: str | None) -> None:
    assert names(listen="127.0.0.1:0").refusal("http", LOCAL, host, None) is None


@pytest.mark.parametrize("host", [
    "127.0.0.1", "localhost", "127.0.0.1:7801", "evil.example:7800", "127.0.0.1.nip.io:7800",
    "192.0.2.1:7800", ""])
def test_other_hosts_are_refused(host: str) -> None:
    why = names(listen="127.0.0.1:0").refusal("http", LOCAL, host, None)
    if host == "":
        assert why is None  # no Host at all: no browser sent it
    else:
        assert why is not None and "Host" in why and "127.0.0.1:7800" in why


def test_the_default_port_may_be_left_out() -> None:
    listener = names(listen="localhost:80")
    for host in ("localhost", "localhost:80", "127.0.0.1"):
        assert listener.refusal("http", ("127.0.0.1", 80), host, "http://localhost") is None


def test_the_listen_name_and_the_address_the_connection_came_to() -> None:
    listener = names(listen="memfs.internal:8443", tls_cert="/c.pem", tls_key="/k.pem")
    assert listener.own_hosts("https", ("192.0.2.7", 8443)) == {
        "memfs.internal:8443", "192.0.2.7:8443"}
    assert listener.own_hosts("https", ("2001:db8::7", 8443)) == {
        "memfs.internal:8443", "[2001:db8::7]:8443"}


@pytest.mark.parametrize("origin,allowed", [
    ("http://127.0.0.1:7800", True), ("http://localhost:7800", True),
    ("http://[::1]:7800", True), ("HTTP://Localhost:7800", True),
    ("https://127.0.0.1:7800", False), ("http://127.0.0.1:7801", False),
    ("http://127.0.0.1", False), ("http://evil.example:7800", False), ("null", False),
    ("http://127.0.0.1:7800/", False), ("file://", False), ("", False),
    ("http://app.example.org:3000", True), ("https://app.example.org:3000", False),
])
def test_origins(origin: str, allowed: bool) -> None:
    listener = names(listen="127.0.0.1:0", allowed_origins=["http://app.example.org:3000"])
    why = listener.refusal("http", LOCAL, "127.0.0.1:7800", origin)
    assert (why is None) == allowed, why
    if not allowed:
        assert why is not None and "Origin" in why and "allowed_origins" in why


def test_an_allowed_origins_host_names_the_listener_behind_a_proxy() -> None:
    listener = names(listen="127.0.0.1:0", allowed_origins=["https://memfs.example.org"])
    assert listener.refusal("http", LOCAL, "memfs.example.org",
                            "https://memfs.example.org") is None
    # that host is a name of the listener, not an origin of it over another scheme
    assert listener.refusal("http", LOCAL, "memfs.example.org",
                            "http://memfs.example.org") is not None


def test_tls_takes_any_host_and_its_own_origin() -> None:
    """The browser checked the name against the certificate: a rebound name cannot
    get this far. The page's origin must still be the name it reached."""
    listener = names(listen="0.0.0.0:443", tls_cert="/c.pem", tls_key="/k.pem")
    local = ("192.0.2.7", 443)
    assert listener.refusal("https", local, "memfs.example.org", None) is None
    for host in ("memfs.example.org", "memfs.example.org:443", "MEMFS.example.org"):
        assert listener.refusal("https", local, host, "https://memfs.example.org") is None
    assert listener.refusal("https", local, "memfs.example.org",
                            "https://evil.example") is not None
    assert listener.refusal("https", local, "memfs.example.org",
                            "http://memfs.example.org") is not None
    assert listener.refusal("https", local, None, "https://memfs.example.org") is not None
