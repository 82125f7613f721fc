"""Web view sign-ins are bounded without letting one agent sign the others out: past
its own cap (`[http] max_web_sessions_per_agent`) an agent's own oldest sessions end;
at the global cap (`max_web_sessions`) a new sign-in is refused (503, Retry-After)
and every live session goes on working. Real daemon, real sign-ins through the form,
caps made small through the config."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.control.http.conftest import http_config
from tests.control.http.web.conftest import nonce_of, sign_in
from tests.support import Daemon

PER_AGENT = 3
MOST = 6


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    config = http_config("memfs-web-caps-", max_web_sessions=MOST,
                         max_web_sessions_per_agent=PER_AGENT)
    with Daemon(config) as running:
        yield running


@pytest.fixture
def tokens(daemon: Daemon) -> dict[str, str]:
    return {agent: daemon.token(agent, "--label", f"caps {agent}")
            for agent in ("alice", "bob", "carol")}


def signed_in(web: httpx.Client) -> bool:
    """Whether the client's session still opens a page (else: to the sign-in form)."""
    response = web.get("/ui/stores/notes/", follow_redirects=False)
    assert response.status_code in (200, 303), response.text
    return response.status_code == 200


def test_past_its_cap_an_agent_loses_only_its_own_oldest_sessions(
        daemon: Daemon, tokens: dict[str, str]) -> None:
    bob = sign_in(daemon, tokens["bob"])
    alice = [sign_in(daemon, tokens["alice"]) for _ in range(PER_AGENT)]
    assert all(signed_in(web) for web in [bob, *alice])
    newer = [sign_in(daemon, tokens["alice"]) for _ in range(2)]  # two past her cap
    assert [signed_in(web) for web in alice] == [False, False, True]  # her two oldest
    assert all(signed_in(web) for web in newer)
    assert signed_in(bob)  # another agent's session is untouched
    # signing in many more times still ends only alice's own sessions
    for _ in range(3 * MOST):
        sign_in(daemon, tokens["alice"]).close()
    assert signed_in(bob)
    assert sign_in(daemon, tokens["carol"]) is not None and signed_in(bob)


def test_at_the_global_cap_a_new_sign_in_is_refused_and_nobody_is_signed_out(
        daemon: Daemon, tokens: dict[str, str]) -> None:
    alice = [sign_in(daemon, tokens["alice"]) for _ in range(PER_AGENT)]
    bob = [sign_in(daemon, tokens["bob"]) for _ in range(PER_AGENT)]
    assert len(alice) + len(bob) == MOST
    with httpx.Client(base_url=daemon.http_url, timeout=60) as carol:
        form = carol.get("/ui/login")
        refused = carol.post("/ui/login", data={"token": tokens["carol"],
                                                "nonce": nonce_of(form.text), "next": "/ui/"},
                             headers={"Origin": daemon.http_url})
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert "too many" in refused.text and "sign out" in refused.text
        assert "memfs_ui" not in carol.cookies
    assert all(signed_in(web) for web in [*alice, *bob])  # every live session works
    # an agent at its own cap still signs in: its own oldest session makes the room
    again = sign_in(daemon, tokens["alice"])
    assert signed_in(again) and not signed_in(alice[0])
    assert all(signed_in(web) for web in [*alice[1:], *bob])
    # a sign-out frees a place for the next person
    page = bob[0].get("/ui/").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    out = bob[0].post("/ui/logout", data={"csrf": csrf}, headers={"Origin": daemon.http_url},
                      follow_redirects=False)
    assert out.status_code == 303
    carol_web = sign_in(daemon, tokens["carol"])
    assert signed_in(carol_web) and all(signed_in(web) for web in [*alice[1:], again, *bob[1:]])
