"""The control socket: wire protocol, trio server, Python client and MCP tool layer."""
