"""memfs: shared memory for agents as plain files. Its layers, bottom up:
`memfs.store` (the engine: versions, seen records, commits, git history), then
`memfs.memory` (sessions, tasks and decisions on the engine's commits) and
`memfs.fuse` (the read-only mount), beside `memfs.config` (the configuration),
`memfs.places` (where things live, and making those folders), `memfs.service_user`
(who a daemon started as root serves as) and `memfs.tokens` (the HTTP listener's
bearer tokens); over them `memfs.control` (the ways in: the folder control/, which
memfs/control links to) and on top `memfs.daemon` (the composition root of ``memfs
serve``) and `memfs.cli` (the ``memfs`` command). `memfs.jail` (the folder jail/) is
the sandbox, under them all. The rules are a contract `lint-imports` checks
(pyproject.toml; docs/design/architecture.md, "Layers"). This package
stays import-light on purpose: the client CLI (`memfs cat`) must start fast, so
nothing here imports the server stack (trio, pyfuse3, pydantic).
"""

__version__ = "0.1.0"
