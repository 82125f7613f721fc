"""The HTTP listener: our own HTTP/1.1 server on trio (`control.http.server`, with its
connection and time limits; its framing `control.http.h1`, request heads parsed by
llhttp) serving one Starlette app (`control.http.app`): REST under /v1 (`files`:
stores, files, search; `op_routes`: the endpoints that mirror protocol ops; `openapi`;
RFC 9457 problems in `problems`), bearer-token identity (`auth`), MCP streamable HTTP
at /mcp (`mcp`), Prometheus /metrics (`metrics`) and the web view
(`control.http.web`). Every endpoint builds the request model the socket decodes and
hands it to the same dispatcher."""

from __future__ import annotations

from memfs.control import lazy

# each public name and the module defining it, imported on first use: they pull in
# heavy libraries that a process using one sibling module alone should not pay for
_WHERE = {
    "BoundHttp": "memfs.control.http.app",
    "bind_http": "memfs.control.http.app",
    "build_app": "memfs.control.http.app",
    "serve_http": "memfs.control.http.app",
    "HttpLimits": "memfs.control.http.server",
    "HttpServer": "memfs.control.http.server",
    "MeasuredControlServer": "memfs.control.http.metrics",
    "MeasuredDispatcher": "memfs.control.http.metrics",
    "Metrics": "memfs.control.http.metrics",
}
__all__ = sorted(_WHERE)

__getattr__ = lazy.exports(__name__, _WHERE)
