"""Who is asking and what they may touch.

* `access`: the agent a uid acts as, delegation, and whether an agent may read or
  write a store (`Access`: `agent_for`, `check_delegation`, `use_agent`,
  `readable_stores`, `check_access`): where access is decided, for every read and write.
* `agents`: the agents of a personal memory, registered on first use, renamed and
  retired (`AgentRegistry`, `check_agent_name`).

This ``__init__`` imports nothing: import the module you need.
"""
