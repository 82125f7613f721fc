"""schemathesis against a real daemon (scripts/schemathesis): every operation of
/v1/openapi.json, every phase (examples from stored test data, coverage, fuzzing,
stateful), every check, positive and negative data, seed 4242; it must find nothing.
Bounded to about two minutes here, times MEMFS_TEST_SLOWDOWN (scripts/schemathesis
alone runs longer)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import REPO, scaled


@pytest.mark.slow
@pytest.mark.timeout(scaled(900))
def test_schemathesis_finds_nothing() -> None:
    # two minutes stretched by the slowdown: a slow machine tests as many operations
    done = subprocess.run([sys.executable, "scripts/schemathesis_run.py", "--max-examples",
                           "10", "--max-time", str(round(scaled(120)))], cwd=REPO,
                          capture_output=True, timeout=scaled(840))
    output = done.stdout.decode(errors="replace")[-20000:]
    assert done.returncode == 0, output + done.stderr.decode(errors="replace")[-4000:]
