"""Who a daemon started as root serves as: the config's ``user`` or, for a personal
memory, its owner (docs/operate/privilege.md). The daemon hands that user its folders and
drops to it (memfs/daemon/privilege.py); ``memfs attach`` checks that the daemon whose
FUSE session it mounts runs as that user (memfs/fuse/attach.py).
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass

from memfs.config import Config
from memfs.errors import MemfsError


class PrivilegeError(MemfsError):
    """The service user is missing or is root, or the daemon could not give up a
    privilege (the message says which)."""


@dataclass(frozen=True)
class ServiceUser:
    name: str
    uid: int
    gid: int


def service_user(config: Config) -> ServiceUser:
    """The unprivileged user a daemon started as root serves as: the config's ``user``
    or, for a personal memory, its owner. Raises PrivilegeError saying how to fix it
    when that user does not exist or is root."""
    if config.personal is not None:
        owner = config.personal.owner
        if owner == 0:
            raise PrivilegeError("a personal memory serves one normal user's agents: run "
                                 "`memfs serve --personal` as that user, or set [personal] "
                                 "owner to that user's uid")
        try:
            entry = pwd.getpwuid(owner)
        except KeyError:  # fusermount3 mounts only for a user with a name
            raise PrivilegeError(f"the personal memory's owner (uid {owner}) is no user of "
                                 "this machine: set [personal] owner to a user's uid") from None
        return ServiceUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    name = config.user
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise PrivilegeError(
            f"the service user {name!r} does not exist: create it with `useradd --system "
            f"--no-create-home --shell /usr/sbin/nologin {name}` (scripts/setup does), or "
            "name another unprivileged user with `user =` in the config") from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise PrivilegeError(f"the service user {name!r} is root (uid or gid 0): the daemon "
                             "serves unprivileged; name another user with `user =`")
    return ServiceUser(name, entry.pw_uid, entry.pw_gid)
