"""HTTP test helpers: a real daemon with its listener on 127.0.0.1 (port 0: it logs
the port it bound) and the stores of tests/memory (a structured store ``team``),
bearer tokens made with the real ``memfs token create``, and httpx clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.memory.conftest import memory_config
from tests.support import Daemon, public_tmpdir, scaled


def http_config(prefix: str = "memfs-http-", **http: Any) -> dict[str, Any]:
    config = memory_config(public_tmpdir(prefix))
    config["http"] = {"listen": "127.0.0.1:0", **http}
    return config


def client(daemon: Daemon, token: str | None) -> httpx.Client:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=daemon.http_url, headers=headers, timeout=scaled(60))


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(http_config()) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(daemon: Daemon) -> dict[str, str]:
    return {agent: daemon.token(agent, "--label", f"tests {agent}")
            for agent in ("alice", "bob", "carol", "dave")}


@pytest.fixture
def alice(daemon: Daemon, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with client(daemon, tokens["alice"]) as http:
        yield http


@pytest.fixture
def bob(daemon: Daemon, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with client(daemon, tokens["bob"]) as http:
        yield http


@pytest.fixture
def carol(daemon: Daemon, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with client(daemon, tokens["carol"]) as http:
        yield http


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert an RFC 9457 problem with ``status`` and memfs ``code``; return it."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["code"] == code, body
    assert body["detail"] and isinstance(body["details"], dict)
    return body
