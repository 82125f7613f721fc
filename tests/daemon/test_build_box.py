"""vagrant/build-box bakes into the box the apt packages scripts/setup and
scripts/cluster install (the guest has no network): it reads them from those
scripts' text, so a change of that text must not make it miss one (`--test`'s
browser packages and the cluster's GlusterFS included)."""

from __future__ import annotations

import subprocess

from tests.support import REPO


def setup_packages() -> set[str]:
    """What scripts/setup --test and scripts/cluster install install, as bash itself
    reads their arrays."""
    script = ('source <(grep -E "^(test_)?packages=\\(" scripts/setup); '
              'source <(grep -E "^cluster_packages=\\(" scripts/cluster); '
              'echo "${packages[@]}" "${test_packages[@]}" "${cluster_packages[@]}"')
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True,
                          text=True, check=True)
    return set(done.stdout.split())


def test_the_box_gets_every_package_scripts_setup_installs() -> None:
    wanted = setup_packages()
    assert {"fuse3", "libfuse3-dev", "git", "chromium", "chromium-driver",
            "glusterfs-server"} <= wanted
    done = subprocess.run(["vagrant/build-box", "--packages"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == wanted
