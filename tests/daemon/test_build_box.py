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
    assert set(done.stdout.split()) == wanted | {"npm"}  # setup adds npm where it is missing


def test_the_box_gets_the_npm_packages_scripts_setup_installs() -> None:
    """scripts/setup --test installs Node 22, the conformance suite and the TypeScript
    SDK with npm --offline from the box's npm cache: build-box must fill it with them."""
    script = ("source <(grep -E '^(conformance_version|ts_sdk_version|npm_pins)=' "
              "scripts/setup); echo \"${npm_pins[@]}\"")
    pinned = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split()
    assert "node@22" in pinned and any("conformance@" in pin for pin in pinned)
    done = subprocess.run(["vagrant/build-box", "--npm-pins"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == pinned


def test_the_box_gets_the_wheels_of_scripts_setups_pins() -> None:
    """scripts/setup --test installs schemathesis, pinned, with --no-index from the
    box's wheelhouse: build-box must put its wheels (and its dependencies') there."""
    pinned = subprocess.run(["bash", "-c", "grep -E '^schemathesis_version=' scripts/setup"],
                            cwd=REPO, capture_output=True, text=True, check=True)
    version = pinned.stdout.strip().split("=", 1)[1]
    done = subprocess.run(["vagrant/build-box", "--pins"], cwd=REPO, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"schemathesis=={version}"]


def test_its_closing_hint_names_the_driver_readme_names() -> None:
    script = (REPO / "vagrant" / "build-box").read_text()
    hint = [line for line in script.splitlines() if 'say "use it:' in line]
    assert len(hint) == 1 and "MEMFS_VAGRANT_DRIVER=qemu" in hint[0]
    doc = (REPO / "docs" / "operate" / "vagrant.md").read_text()
    assert "MEMFS_VAGRANT_DRIVER=qemu" in doc


def test_it_refuses_a_release_it_cannot_build() -> None:
    """MEMFS_BOX_SUITE names the release (bookworm, trixie for Debian 13, noble for
    Ubuntu 24.04); another name is refused before anything is read or done, saying
    which are known."""
    done = subprocess.run(["vagrant/build-box", "--packages"], cwd=REPO, capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin",
                                                      "MEMFS_BOX_SUITE": "sid"})
    assert done.returncode == 1 and done.stdout == ""
    assert ("MEMFS_BOX_SUITE must be bookworm (Debian 12), trixie (Debian 13) or noble "
            "(Ubuntu 24.04)") in done.stderr
    for suite in ("bookworm", "trixie", "noble"):
        known = subprocess.run(["vagrant/build-box", "--packages"], cwd=REPO,
                               capture_output=True, text=True, timeout=30,
                               env={"PATH": "/usr/bin:/bin", "MEMFS_BOX_SUITE": suite})
        assert known.returncode == 0 and "fuse3" in known.stdout.split(), known.stderr


def test_the_ubuntu_box_leaves_out_only_the_browser() -> None:
    """Ubuntu 24.04 has no chromium or chromium-driver package (its chromium-browser is
    a wrapper that installs the snap, which cannot work offline): the noble box gets
    every other package."""
    done = subprocess.run(["vagrant/build-box", "--packages"], cwd=REPO, capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin",
                                                      "MEMFS_BOX_SUITE": "noble"})
    assert done.returncode == 0, done.stderr
    wanted = setup_packages() | {"npm"}
    assert set(done.stdout.split()) == wanted - {"chromium", "chromium-driver"}
