"""Web view test helpers: a real daemon with its HTTP listener on 127.0.0.1 (the stores
of tests/memory: notes, ops, secret, structured team and team2), tokens made with
the real ``memfs token create``, signing in through the real form (httpx or a real
headless Chromium driven by Selenium with Debian's chromedriver), and where the
browser's screenshots go."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.control.http.conftest import http_config
from tests.support import Daemon

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("MEMFS_WEB_ARTIFACTS") or "/tmp/memfs-web-artifacts")


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with Daemon(http_config("memfs-web-")) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(daemon: Daemon) -> dict[str, str]:
    return {agent: daemon.token(agent, "--label", f"web tests {agent}")
            for agent in ("alice", "bob", "carol", "dave")}


def nonce_of(page: str) -> str:
    found = re.search(r'name="nonce" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def sign_in(daemon: Daemon, token: str, **post: Any) -> httpx.Client:
    """An httpx client signed in to the web view through the real form."""
    web = httpx.Client(base_url=daemon.http_url, timeout=60, follow_redirects=False)
    form = web.get("/ui/login")
    response = web.post("/ui/login", data={"token": token, "nonce": nonce_of(form.text),
                                          "next": "/ui/"},
                        headers={"Origin": daemon.http_url, **post})
    assert response.status_code == 303, response.text
    assert "memfs_ui" in web.cookies
    return web


@pytest.fixture
def alice_web(daemon: Daemon, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    web = sign_in(daemon, tokens["alice"])
    yield web
    web.close()


@pytest.fixture
def carol_web(daemon: Daemon, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    web = sign_in(daemon, tokens["carol"])
    yield web
    web.close()


# -- the browser -------------------------------------------------------------------------


def chromium() -> Any:
    """A fresh headless Chromium (Debian's) under Debian's chromedriver, with its
    console log kept. Fails (never skips) when they are missing: scripts/setup
    installs them."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for binary in (CHROMIUM, CHROMEDRIVER):
        if not Path(binary).exists():
            pytest.fail(f"{binary} is missing: scripts/setup installs chromium and "
                        "chromium-driver for the browser tests")
    profile = tempfile.mkdtemp(prefix="memfs-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.memfs_profile = profile
    return driver


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(driver.memfs_profile, ignore_errors=True)


def screenshot(driver: Any, name: str) -> Path:
    """Save the browser's view as ARTIFACTS/NAME.png (printed at the end of the run)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    SAVED.append(path)
    return path


SAVED: list[Path] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SAVED:
        terminalreporter.write_line(f"web view screenshots ({len(SAVED)}): {ARTIFACTS}/")
