"""Who is asking: the identities the store knows.

* `agents`: the agents of a personal memory, registered on first use, renamed and
  retired (`AgentRegistry`, `check_agent_name`).

This ``__init__`` imports nothing: import the module you need.
"""
