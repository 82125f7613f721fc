"""The ways in to memfs, one subpackage each: `control.protocol` (the wire protocol's
models and line codec, no I/O), `control.ops` (the dispatcher that carries out every
request against the engine and the memory model), `control.socket` (the trio server of
the Unix control socket), `control.client` (the Python client, over the socket or in
process), `control.http` (the HTTP listener: REST, the MCP endpoint, metrics and the web
view in `control.http.web`) and `control.mcp` (the tools for models and the MCP
server over stdio). `control.ratelimit` is the rate-limited log line they share, `control.lazy`
the names a package re-exports on first use.

Installed as `memfs.control` (memfs/control is a symlink to this folder): it imports the
core library under it, never `memfs.daemon` or `memfs.cli` above it."""
