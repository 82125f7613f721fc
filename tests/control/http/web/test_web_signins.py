"""The web view's sign-in table (control/http/web/signin.py) on its own, with a real token
file and a clock the test moves: per-agent and global caps, and ended sessions (expired,
token revoked, agent gone) that free their places only when they really ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.control.http.web.signin import SignIns, TooManySessions
from memfs.tokens import Tokens


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_ended_sessions_free_their_places_and_live_ones_never_do(tmp_path: Path) -> None:
    tokens, clock = Tokens(tmp_path), Clock()
    agents = {"alice", "bob", "carol"}
    signins = SignIns(tokens, agents, lifetime=100, clock=clock, most=3, per_agent=2)
    records = {agent: tokens.create(agent, now=clock.now)[1] for agent in sorted(agents)}
    a1, _ = signins.open(records["alice"])
    clock.now += 50
    a2, _ = signins.open(records["alice"])
    b1, _ = signins.open(records["bob"])
    with pytest.raises(TooManySessions) as full:
        signins.open(records["carol"])
    assert full.value.retry_after == 51  # alice's first session expires in 50 s
    assert all(signins.check(c) for c in (a1, a2, b1)) and len(signins) == 3
    # a session of a revoked token is an ended one: it makes room
    tokens.revoke(records["bob"].id, now=clock.now)
    c1, _ = signins.open(records["carol"])
    assert signins.check(b1) is None and signins.check(c1) is not None
    # so does an expired one
    clock.now += 51
    c2, _ = signins.open(records["carol"])
    assert signins.check(a1) is None and signins.check(a2) and signins.check(c2)
    # past her own cap, carol's oldest ends, nobody else's
    c3, _ = signins.open(records["carol"])
    assert signins.check(c1) is None and signins.check(a2) and signins.check(c3)
    assert len(signins) == 3
    # signing out frees the place at once
    signins.close(a2)
    assert signins.check(a2) is None and len(signins) == 2
