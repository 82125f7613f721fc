"""What ``memfs serve`` prints once it serves, personal and system: the web view's URL
and the command that makes a token to sign in with (or how to get a listener)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from memfs.config import parse_config, personal_config
from memfs.daemon.serve import TOKEN_COMMAND, personal_banner, system_banner
from tests.support import MEMFS, REPO


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60,
                          check=False)


def engine(config: Any) -> Any:
    return SimpleNamespace(config=config)  # a banner reads the engine's config only


def test_the_personal_banner_names_the_web_view_and_the_token_command() -> None:
    served = personal_banner(engine(personal_config(http_port=7811)))
    assert f"Web view: http://127.0.0.1:7811/ui/ (sign in with a token: {TOKEN_COMMAND}" \
        in served
    off = personal_banner(engine(personal_config()))
    assert "Web view, REST and MCP over HTTP: off (start with --http)" in off


def test_the_system_banner_names_the_web_view_and_the_token_command(tmp_path: Path) -> None:
    base = {"root": str(tmp_path), "stores": {"notes": {}},
            "agents": {"claude": {"uid": 2001, "stores": {"notes": "read_write"}}}}
    served = system_banner(engine(parse_config({**base, "http": {"listen": "127.0.0.1:7812"}})))
    assert "serving the stores notes" in served
    assert f"Web view: http://127.0.0.1:7812/ui/ (sign in with a token: {TOKEN_COMMAND}" \
        in served
    off = system_banner(engine(parse_config(base)))
    assert "off (set [http] listen in the config)" in off


def test_the_token_command_is_the_clis() -> None:
    words = TOKEN_COMMAND.split()
    helped = run([*MEMFS, *words[1:-1], "--help"])
    assert helped.returncode == 0 and "AGENT" in helped.stdout, helped


def test_version() -> None:
    shown = run([*MEMFS, "--version"])
    assert shown.returncode == 0 and shown.stdout.startswith("memfs 0."), shown
