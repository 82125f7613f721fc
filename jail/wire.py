"""What the client (``jail.api``) and the launcher (``jail.launcher``) say to each other.

The client runs the launcher with FD: one end of a SOCK_SEQPACKET socketpair.
Messages are JSON; file descriptors travel with SCM_RIGHTS:

1. hello (client -> launcher): ``{"tools": {"rg": Tool, "sed": Tool}, "work_dir": ...,
   "seccomp": BASE64, "level": Level}`` (the BPF program for the level, compiled by
   the client: libseccomp is not loaded in the launcher; the level of
   ``jail.kernel``), with fds: for each tool, its binary then the files its policy
   names (``policy.Opened.fds``), opened by the client (the launcher's uid may not
   reach them); then the jail's user and network namespaces (``jail.userns``, made
   by the client). The launcher prepares each tool's policy, makes its work
   directory and answers ``{"ok": true, "abi": N, "pid": PID}`` or
   ``{"ok": false, "error": "..."}``.
2. each call (client -> launcher): ``{"tool": "rg", "argv": [...], "stores": [names],
   "paths": [...]}`` with fds ``[reply socket, stdin, stdout, stderr]``, then, if the
   call has stores, their common directory and the store directories; ``paths`` are
   the stores relative to that directory. The launcher hands the call to the spare of
   its tool, a child forked ahead. rg's makes the view of the stores in a mount
   namespace of its own (see ``jail.mounts``: each store looked up from the common
   directory and checked against its fd), applies the rest of the policy and execs
   rg. sed's has applied its whole policy but seccomp before the call (read-only
   chroot, limits, Landlock, no capability): it puts the stdio fds in place, loads
   the filter and execs sed.
   When the child is reaped it sends one JSON reply on the reply socket:
   ``{"status": "exited", "code": N}``, ``"signaled"`` (+``signal``), ``"timeout"``,
   ``"cancelled"`` or ``"failed"`` (+``error``, the policy could not be applied).
   If the client shuts the reply socket down (output limit, gave up), the child is
   killed. When the control socket closes, every child is killed and the launcher exits.

This module is imported by the launcher: it must stay light (no pydantic).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memfs.jail.policy import Policy

MAX_MESSAGE = 1 << 20
MAX_FDS = 250
EXEC_FAILED = 127  # child exit status when the tool could not be executed


@dataclass(frozen=True)
class Tool:
    """How to run one tool: its binary (host path), environment and base policy."""

    exe: str
    env: Mapping[str, str]
    policy: Policy

    def to_json(self) -> dict[str, Any]:
        return {"exe": self.exe, "env": dict(self.env), "policy": self.policy.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tool:
        if set(data) != {"exe", "env", "policy"}:
            raise ValueError(f"bad tool description: keys {sorted(data)}")
        env = {str(k): str(v) for k, v in dict(data["env"]).items()}
        return cls(str(data["exe"]), env, Policy.from_json(data["policy"]))
