"""Config validation: every mistake names the key and the problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memfs.config import ConfigError, load_config, parse_config

GOOD: dict[str, Any] = {
    "root": "/var/lib/memfs",
    "stores": {"oncall-notes": {}, "payments": {}},
    "agents": {
        "oncall": {"uid": 2001, "stores": {"oncall-notes": "read_write", "payments": "read"}},
        "reviewer": {"uid": 2002, "stores": {"oncall-notes": "read"}},
    },
}


def with_(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def test_good_config_and_defaults() -> None:
    config = parse_config(GOOD)
    assert config.mount == Path("/memory")
    assert config.max_file_size == 16 * 1024 * 1024
    assert config.agent_for_uid(2002) == "reviewer"
    assert config.agent_for_uid(9) is None
    assert config.access("oncall", "payments") == "read"
    assert config.access("reviewer", "payments") is None


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (with_(rooot="/x"), "rooot: unknown key"),
        (with_(root="relative/dir"), "root: must be an absolute path"),
        ({k: v for k, v in GOOD.items() if k != "root"}, "root: Field required"),
        (with_(agents={"a": {"uid": 1, "stores": {"paymnts": "read"}}}),
         "agents.a.stores.paymnts: no such store"),
        (with_(agents={"a": {"uid": 1}, "b": {"uid": 1}}), "uid 1 is already used by agent 'a'"),
        (with_(stores={"bad/name": {}}), "bad store name 'bad/name'"),
        (with_(stores={"..": {}}), "bad store name"),
        (with_(agents={"a b": {"uid": 1}}), "bad agent name 'a b'"),
        (with_(agents={"a": {"uid": -1}}), "agents.a.uid"),
        (with_(agents={"a": {"uid": 5, "stores": {"payments": "write"}}}),
         "agents.a.stores.payments"),
        (with_(agents={"a": {"uid": 5, "color": "red"}}), "agents.a.color: unknown key"),
        (with_(max_file_size=0), "max_file_size"),
        (with_(delegates="root"), "delegates"),
        (with_(mount="/var/lib/memfs/mnt"), "mount: must not be inside root"),
        (with_(jail={"uid": 65534}), "jail.uid is no longer used: jailed tools run in a user "
         "namespace under the daemon's own uid"),
        (with_(jail={"gid": 65534}), "jail.gid is no longer used"),
        (with_(limits={"max_conections": 5}), "limits.max_conections: unknown key"),
        (with_(limits={"max_jail_runs": 0}), "limits.max_jail_runs"),
        (with_(limits={"jail_queue_per_uid": -1}), "limits.jail_queue_per_uid"),
        (with_(limits={"jail_queue_seconds": 61}), "limits.jail_queue_seconds"),
        (with_(limits={"max_connections_per_uid": 0}), "limits.max_connections_per_uid"),
        (with_(limits={"fd_reserve": 10}), "limits.fd_reserve"),
    ],
)
def test_bad_configs_name_the_key(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert fragment in str(caught.value)


def test_load_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("root = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    good = tmp_path / "good.toml"
    good.write_text('root = "/srv/m"\n[stores.a]\n[agents.x]\nuid = 7\nstores = { a = "read" }\n')
    assert load_config(good).agents["x"].stores == {"a": "read"}


def test_limits_defaults() -> None:
    limits = parse_config(GOOD).limits
    assert limits.max_connections_unknown_uid == 4
    assert limits.max_connections_per_uid == 64
    assert limits.max_jail_runs == 4
    assert (limits.jail_queue_per_uid, limits.jail_queue_seconds) == (4, 5.0)
    assert limits.fd_reserve == 512


def test_connection_limits_leave_the_fd_reserve_free() -> None:
    from memfs.daemon import connection_limits  # the server stack: only this test needs it
    from memfs.store.errors import MemfsError

    config = parse_config(GOOD)
    assert connection_limits(config, 1 << 20)[0].max_connections == 1024
    assert connection_limits(config, 1024)[0].max_connections == 1024 - 512
    assert connection_limits(config, 1024)[1] is None  # no [http]
    with pytest.raises(MemfsError, match="fd_reserve"):
        connection_limits(config, 515)


def test_control_and_http_connections_share_one_budget() -> None:
    from memfs.daemon import connection_limits
    from memfs.store.errors import MemfsError

    config = parse_config({**GOOD, "http": {"listen": "127.0.0.1:0"},
                           "limits": {"max_connections": 300, "http_max_connections": 100,
                                      "http_max_connections_per_address": 80}})
    control, http = connection_limits(config, 1 << 20)
    assert (control.max_connections, http and http.max_connections) == (300, 100)
    control, http = connection_limits(config, 512 + 200)  # room for 200: shared 3:1
    assert http is not None
    assert (control.max_connections, http.max_connections) == (150, 50)
    assert http.max_connections_per_address == 50
    assert control.max_connections + http.max_connections + 512 <= 512 + 200
    with pytest.raises(MemfsError, match="fd_reserve"):
        connection_limits(config, 512 + 20)  # HTTP would get fewer than 8
