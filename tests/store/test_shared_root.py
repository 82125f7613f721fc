"""The parsing behind the start-up check of a Gluster root (memfs/store/fs/shared_root.py);
the check itself runs against a real volume in tests/cluster/test_options.py."""

from __future__ import annotations

from pathlib import Path

from memfs.store.fs.shared_root import mount_of, parse_volume_get, parse_volume_info

MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
98 22 0:52 / /var/tmp/c/mnt/h1 rw,relatime shared:50 - fuse.glusterfs 10.0.0.1:/memfs rw,user_id=0
99 22 0:53 / /var/tmp/c/mnt/h1\\040x rw,relatime shared:51 - fuse.glusterfs srv:/vol2/sub rw
"""


def test_mount_of_picks_the_longest_mount_point_above_the_path() -> None:
    found = mount_of(Path("/var/tmp/c/mnt/h1/root"), MOUNTINFO)
    assert found is not None
    assert (found.point, found.fstype, found.source) == (
        "/var/tmp/c/mnt/h1", "fuse.glusterfs", "10.0.0.1:/memfs")
    spaced = mount_of(Path("/var/tmp/c/mnt/h1 x/root"), MOUNTINFO)
    assert spaced is not None and spaced.source == "srv:/vol2/sub"
    other = mount_of(Path("/var/tmp/c/mnt/h10"), MOUNTINFO)
    assert other is not None and other.fstype == "ext4"


def test_volume_info_gives_the_reconfigured_options_only() -> None:
    info = """
Volume Name: memfs
Status: Started
Options Reconfigured:
performance.stat-prefetch: off
performance.open-behind: on
nfs.disable: on
"""
    assert parse_volume_info(info) == {"performance.stat-prefetch": "off",
                                       "performance.open-behind": "on",
                                       "nfs.disable": "on"}


def test_volume_get_gives_every_option() -> None:
    get = """Option                                   Value
------                                   -----
performance.quick-read                   on (DEFAULT)
performance.stat-prefetch                off
"""
    assert parse_volume_get(get) == {"performance.quick-read": "on",
                                     "performance.stat-prefetch": "off"}
