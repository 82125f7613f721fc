"""vagrant/build-box bakes into the box the apt packages scripts/setup installs (the
guest has no network): it reads them from scripts/setup's text, so a change of that
text must not make it miss one (`--test`'s browser packages included)."""

from __future__ import annotations

import subprocess

from tests.support import REPO


def setup_packages() -> set[str]:
    """What scripts/setup --test installs, as bash itself reads its arrays."""
    script = ('source <(grep -E "^(test_)?packages=\\(" scripts/setup); '
              'echo "${packages[@]}" "${test_packages[@]}"')
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True,
                          text=True, check=True)
    return set(done.stdout.split())


def test_the_box_gets_every_package_scripts_setup_installs() -> None:
    wanted = setup_packages()
    assert {"fuse3", "libfuse3-dev", "git", "chromium", "chromium-driver"} <= wanted
    done = subprocess.run(["vagrant/build-box", "--packages"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == wanted
