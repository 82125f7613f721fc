"""The embedded default behind ``memfs serve --demo``: a private root with two demo
stores and a few notes, a structured store ``team`` with a task and a decision, the
invoking uid (the one behind sudo, under sudo) mapped to agent ``demo``, and the HTTP
listener on 127.0.0.1:7800 with a bearer token for ``demo`` printed in the banner.
Started as root (scripts/demo), the daemon serves as the service user ``memfs``, which
it hands the demo root /var/lib/memfs-demo to; the stores are seeded and the token
made after that drop (`prepare_demo`), never as root, and only once this daemon owns
the root (its control socket and HTTP listener are bound: a second demo has failed
by then and touches nothing). The token stays the same across restarts until it is
revoked (`demo_token`). ``MEMFS_DEMO_ROOT`` and ``MEMFS_DEMO_LISTEN`` put the root and
the listener elsewhere (the tests do)."""

from __future__ import annotations

import os
from pathlib import Path

from memfs.config import Config, parse_config
from memfs.memory.model import Memory
from memfs.store.engine import Engine
from memfs.store.fs import statefile
from memfs.store.fs.paths import parse_path
from memfs.tokens import Tokens

DEMO_ROOT = Path("/var/lib/memfs-demo")
REVIEWER_UID = 61002  # a second agent, for trying conflicts with --as reviewer
DEMO_LISTEN = "127.0.0.1:7800"
DEMO_TOKEN_LABEL = "demo banner"
DEMO_TOKEN_FILE = "demo-token"  # in ROOT/state: the banner's token, the one plain copy

NOTES = {
    "oncall-notes/README.md": (
        "# On-call notes\n\nWhat each on-call agent learned, for the next one.\n"
    ),
    "oncall-notes/incidents/checkout-timeouts.md": (
        "# Checkout timeouts\n\n"
        "- 2026-10-21: p99 of POST /checkout above 8 s for 20 min.\n"
        "- Cause: the payments-retry queue backed up after a deploy; consumers at 2 of 8.\n"
        "- Fix: scale payments-retry consumers back to 8, then drain.\n"
    ),
    "payments/runbooks/retry-queue.md": (
        "# payments-retry queue\n\n"
        "Consumers: 8. Alert when lag > 5,000 messages.\n"
        "Scale: `kubectl scale deploy/payments-retry --replicas=8`.\n"
    ),
}


def demo_uid() -> int:
    """The uid agent ``demo`` is: the invoking user's (``SUDO_UID`` when root runs the
    demo through sudo)."""
    behind_sudo = os.environ.get("SUDO_UID", "")
    return int(behind_sudo) if os.getuid() == 0 and behind_sudo.isdigit() else os.getuid()


def demo_config(uid: int) -> Config:
    """The demo's config, agent ``demo`` being ``uid``; its root is ``MEMFS_DEMO_ROOT``,
    else DEMO_ROOT when started as root, else under ``$XDG_RUNTIME_DIR``; its HTTP
    listener ``MEMFS_DEMO_LISTEN``, else DEMO_LISTEN."""
    root = Path(os.environ.get("MEMFS_DEMO_ROOT") or (
        DEMO_ROOT if os.geteuid() == 0
        else Path(os.environ.get("XDG_RUNTIME_DIR", "/tmp")) / "memfs-demo"))
    agents = {"demo": {"uid": uid, "stores": {"oncall-notes": "read_write",
                                              "payments": "read_write", "team": "read_write"}}}
    if uid != REVIEWER_UID:
        agents["reviewer"] = {"uid": REVIEWER_UID, "stores": {"oncall-notes": "read",
                                                              "team": "read_write"}}
    return parse_config(
        {
            "root": str(root),
            "mount": "/memory",
            "socket": "/run/memfs/control.sock",
            "delegates": [uid],
            "stores": {"oncall-notes": {}, "payments": {}, "team": {"structured": True}},
            "agents": agents,
            "http": {"listen": os.environ.get("MEMFS_DEMO_LISTEN") or DEMO_LISTEN},
        },
        source="demo config",
    )


def seed(engine: Engine) -> None:
    """Write the demo notes, a task and a decision that are missing; never overwrites."""
    for raw, text in NOTES.items():
        path = parse_path(raw)
        if engine.current_digest(path) is None:
            engine.write("demo", path, text.encode(), force=True)
    memory = Memory(engine)
    if not memory.task_list("reviewer", "team"):
        memory.task_add("reviewer", "team", "drain-retry-queue",
                        "Drain the payments-retry queue after scaling consumers",
                        "See payments/runbooks/retry-queue.md.")
    if not memory.decision_list("reviewer", "team"):
        memory.decision_record(
            "reviewer", "team", title="Scale retry consumers before draining",
            decision="Scale payments-retry to 8 consumers first, then drain.",
            reason="Draining with 2 consumers took 40 minutes on 2026-10-21.")


def prepare_demo(engine: Engine) -> str:
    """Seed what is missing and get the token for ``demo``; returns the banner. The
    daemon calls it once its engine has recovered, before it serves: after it has
    bound its socket and listener (a second demo on the root fails before), and as
    the service user (who then owns the token's file)."""
    seed(engine)
    return demo_banner(engine.config, demo_token(engine.config))


def demo_token(config: Config) -> str:
    """The bearer token for agent ``demo`` that the banner prints: the one kept in
    ``ROOT/state/demo-token`` (mode 0600) while it is active, so that every start
    prints the same token and agents using it go on working; a new one (kept there)
    when that one was revoked or expired, or the file is missing. The tokens file
    keeps only hashes: that file is the token's one plain copy."""
    state = config.root / "state"
    kept = state / DEMO_TOKEN_FILE
    tokens = Tokens(state)
    with statefile.locked(state / "locks" / f"{DEMO_TOKEN_FILE}.lock"):
        token = (statefile.read_text(kept) or "").strip()
        if token and tokens.verify(token) is not None:
            return token
        token, _record = tokens.create("demo", DEMO_TOKEN_LABEL)
        statefile.write_atomically(kept, token + "\n")
        return token


def demo_banner(config: Config, token: str | None = None) -> str:
    url = f"http://{config.http.listen if config.http else DEMO_LISTEN}"
    http = "" if token is None else f"""
HTTP API (REST under /v1, MCP at /mcp, /metrics) on {url}, as agent "demo":
  export MEMFS_TOKEN={token}
  (the same at every start until revoked: memfs token list, memfs token revoke ID)
  curl -H "Authorization: Bearer $MEMFS_TOKEN" {url}/v1/stores
  curl -i -H "Authorization: Bearer $MEMFS_TOKEN" {url}/v1/stores/oncall-notes/files/README.md
Web view (read-only) in a browser: {url}/ui/ (sign in with that token)
"""
    return f"""
memfs demo is running (agent "demo" = uid {config.agents['demo'].uid}); root {config.root}
In another terminal:
  ls {config.mount}    cat {config.mount}/oncall-notes/README.md
  getfattr -d {config.mount}/payments/runbooks/retry-queue.md
  memfs ls 'oncall-notes/**'
  memfs cat oncall-notes/incidents/checkout-timeouts.md
  echo '- 2026-11-29: seen again' | memfs write --append oncall-notes/incidents/checkout-timeouts.md
  memfs grep -i -C 1 timeout
  memfs edit payments/runbooks/retry-queue.md -e 's/Consumers: 8/Consumers: 10/'
  memfs --as reviewer cat oncall-notes/README.md
  memfs brief                      # sessions, tasks, decisions of the store "team"
  memfs log oncall-notes -n 5      # every change is a git commit
{http}Stop with Ctrl-C (unmounts cleanly).
"""
