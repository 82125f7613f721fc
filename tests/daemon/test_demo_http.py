"""The demo's HTTP listener: 127.0.0.1:7800, and a fresh token for agent demo in the
banner at each start (the previous one revoked)."""

from __future__ import annotations

from pathlib import Path

from memfs.daemon.demo import DEMO_LISTEN, demo_banner, demo_config, demo_token
from memfs.tokens import Tokens


def test_demo_serves_http_with_a_printed_token(tmp_path: Path) -> None:
    config = demo_config(4242).model_copy(update={"root": tmp_path})
    assert config.http is not None and config.http.listen == DEMO_LISTEN == "127.0.0.1:7800"
    first = demo_token(config)
    second = demo_token(config)
    tokens = Tokens(tmp_path / "state")
    assert tokens.verify(first) is None  # revoked by the next start
    record = tokens.verify(second)
    assert record is not None and record.agent == "demo"
    banner = demo_banner(config, second)
    assert f"export MEMFS_TOKEN={second}" in banner
    assert 'curl -H "Authorization: Bearer $MEMFS_TOKEN" http://127.0.0.1:7800/v1/stores' in banner
    assert "http://127.0.0.1:7800/ui/ (sign in with that token)" in banner
    assert "MEMFS_TOKEN" not in demo_banner(config)
