"""Who is asking and what they may touch (`Access`): the agent a kernel-verified uid
acts as (its own, a delegate's, or in personal mode the name it gives), and whether
that agent may read or write a store. The engine asks it before every read and write;
it reads the config and, in personal mode, the registry of agents (agents.py).
"""

from __future__ import annotations

from collections.abc import Collection

from memfs.config import Config
from memfs.store.access.agents import AgentRegistry, check_agent_name
from memfs.store.errors import AgentRequired, PermissionDenied
from memfs.store.read import near


class Access:
    """Identity and access for one memory (its config, and ``agents``: the agents'
    names, the config's or in personal mode those registered so far)."""

    def __init__(self, config: Config, agents: Collection[str]) -> None:
        self.config = config
        self.agents = agents

    @classmethod
    def of(cls, config: Config) -> Access:
        """The access of ``config``'s memory: in personal mode with the registry of
        agents under ROOT/state (which must exist)."""
        agents: Collection[str] = (
            config.agents if config.personal is None
            else AgentRegistry(config.root / "state", config.personal.owner))
        return cls(config, agents)

    def agent_for(self, uid: int, as_agent: str | None = None) -> str:
        """The agent a kernel-verified uid acts as: the uid's own agent; with
        ``as_agent``, that agent, if the uid is a delegate that may act for it. In
        personal mode only the owner's uid is served and ``as_agent`` names the
        agent it is (registered on first use, see `use_agent`): it must be given.

        Raises PermissionDenied for an unknown uid, a non-delegate using
        ``as_agent``, a delegate beyond its agents, an unknown agent name, or no
        name in personal mode; InvalidInput for an invalid name in personal mode.
        """
        config = self.config
        if config.personal is not None:
            if uid != config.personal.owner:
                raise PermissionDenied(f"uid {uid} is not mapped to any agent: this memory "
                                       f"is the personal memory of uid {config.personal.owner}")
            if as_agent is None:
                raise AgentRequired()
            return check_agent_name(as_agent)  # lowercase: one spelling, one agent
        if as_agent is not None:
            if not config.is_delegate(uid):
                raise PermissionDenied(
                    f"uid {uid} is not a delegate and cannot act as agent {as_agent!r} "
                    "(--as, --agent and MEMFS_AGENT name an agent only for a delegate uid, "
                    "or in personal mode)")
            if as_agent not in config.agents:
                raise PermissionDenied(f"no agent named {as_agent!r}")
            self.check_delegation(uid, as_agent)
            return as_agent
        agent = config.agent_for_uid(uid)
        if agent is None:
            raise PermissionDenied(
                f"uid {uid} is not mapped to any agent: give it one in the daemon's config "
                f"([agents.NAME] with uid = {uid}), or act for an agent from a delegate uid "
                "with --as AGENT")
        return agent

    def check_delegation(self, uid: int, agent: str) -> None:
        """Raise PermissionDenied, naming what it may act for, unless delegate ``uid``
        may act for ``agent``."""
        if not self.config.may_act_for(uid, agent):
            allowed = self.config.delegations.get(uid) or ()
            raise PermissionDenied(f"delegate uid {uid} may act only for "
                                   f"{', '.join(sorted(allowed))}, not for {agent!r}")

    def use_agent(self, agent: str) -> None:
        """Note that ``agent`` is acting (any way in): in personal mode a new name is
        registered and its last-seen time kept (agents.py). Raises InvalidInput,
        PermissionDenied (a name another uid registered), NoSpace."""
        if isinstance(self.agents, AgentRegistry):
            self.agents.use(agent)

    def readable_stores(self, agent: str) -> list[str]:
        """The stores ``agent`` may read, sorted."""
        if self.config.personal is not None:
            return sorted(self.config.stores)
        spec = self.config.agents[agent]
        return sorted(spec.stores)

    def check_access(self, agent: str, store: str, *, write: bool = False) -> None:
        """Raise NotFound unless ``agent`` is attached to ``store`` (a store it cannot
        see does not exist for it, and the stores it might have meant are its own
        only: no answer reveals another agent's store); PermissionDenied unless it may
        write there, for ``write``."""
        access = self.config.access(agent, store)
        if access is None:
            known = self.config.personal is not None or agent in self.config.agents
            raise near.no_store(store, self.readable_stores(agent) if known else [])
        if write and access != "read_write":
            raise PermissionDenied(f"agent {agent!r} has read-only access to store {store!r}")
