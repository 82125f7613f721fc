"""``memfs mount URL``'s refusals, before anything is mounted: no token file, one that
others may read, a URL that is not http(s), a daemon that is not there."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import MEMFS, REPO


def mount(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMFS, "mount", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_refusals_say_why(tmp_path: Path) -> None:
    where = tmp_path / "memory"
    done = mount("http://127.0.0.1:9", str(where))
    assert done.returncode == 2 and "--token-file" in done.stderr
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    token.chmod(0o644)
    done = mount("http://127.0.0.1:9", str(where), "--token-file", str(token))
    assert done.returncode == 2 and "chmod 600" in done.stderr
    token.chmod(0o600)
    done = mount("ftp://example", str(where), env={"MEMFS_TOKEN_FILE": str(token)})
    assert done.returncode == 2 and "must start with https:// or http://" in done.stderr
    done = mount("http://192.0.2.1:8420", str(where), env={"MEMFS_TOKEN_FILE": str(token)})
    assert done.returncode == 2 and "clear text" in done.stderr  # the CLI's --url rule
    done = mount("http://127.0.0.1:9", str(where), "--token-file", str(token), "--wait", "0.3")
    assert done.returncode == 1 and "cannot reach the daemon at http://127.0.0.1:9" in \
        done.stderr
    assert not where.exists()  # nothing made, nothing mounted
    assert "secret-token" not in done.stderr
