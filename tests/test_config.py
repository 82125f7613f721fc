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
    assert config.recall.enabled and config.recall.model == "packaged"


def test_recall_is_a_switch_or_a_table() -> None:
    assert not parse_config(with_(recall=False)).recall.enabled
    assert parse_config(with_(recall=True)).recall.model == "packaged"
    assert parse_config(with_(recall={"model": "none"})).recall.model == "none"
    chosen = parse_config(with_(recall={"model": "/opt/models/minilm.onnx"})).recall
    assert chosen.enabled and chosen.model == "/opt/models/minilm.onnx"


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
        (with_(recall={"model": "models/minilm.onnx"}), 'want "packaged", "none" or an '
         "absolute path"),
        (with_(recall={"modle": "none"}), "recall.modle: unknown key"),
        (with_(recall="yes"), "recall"),
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
        (with_(stores={"a": {"mirror": "https://bob:s3cret@example.org/a.git"}}),
         "stores.a.mirror: a mirror URL holds no password"),
        (with_(stores={"a": {"mirror": "backups/a.git"}}), "stores.a.mirror: mirror URL "
         "'backups/a.git': give an absolute path"),
        (with_(stores={"a": {"mirror": "ext::sh -c touch% /tmp/x"}}), "stores.a.mirror"),
        (with_(stores={"a": {"mirror": "fd::3"}}), "TRANSPORT::ADDRESS form is refused"),
        (with_(stores={"a": {"mirror": "--upload-pack=touch /tmp/x"}}), "stores.a.mirror"),
        (with_(stores={"a": {"mirror": "ftp://example.org/a.git"}}), "scheme 'ftp'"),
        (with_(stores={"a": {"mirror": "file://host/srv/a.git"}}), "file:///ABSOLUTE/PATH"),
        (with_(stores={"a": {"mirror": ["/srv/a.git", "/srv/a.git"]}}), "given twice"),
        (with_(stores={"a": {"mirror": "/srv/a.git", "history": False}}),
         "stores.a.mirror: a mirror receives the store's history, and this store has "
         "history = false"),
    ],
)
def test_bad_configs_name_the_key(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert fragment in str(caught.value)


def test_mirrors_take_every_url_git_takes() -> None:
    urls = ["file:///srv/a.git", "/srv/a.git", "ssh://git@example.org:2222/a.git",
            "git@example.org:memfs/a.git", "git://example.org/a.git",
            "https://bob@example.org/a.git", "http://[::1]:8080/a.git"]
    config = parse_config(with_(stores={**GOOD["stores"], "a": {"mirror": urls},
                                        "b": {"mirror": urls[0]}, "c": {}}))
    assert config.stores["a"].mirrors == tuple(urls)
    assert config.stores["b"].mirrors == ("file:///srv/a.git",)
    assert config.stores["c"].mirrors == ()


def test_every_mistake_is_reported_at_once(tmp_path: Path) -> None:
    """An unknown key does not hide a store typo, nor a bad value a duplicate uid: one
    run of the config tells every mistake, each naming its key."""
    bad = tmp_path / "bad.toml"
    bad.write_text('root = "/srv/m"\ncolour = "blue"\nmount = "/srv/m/mnt"\n'
                   '[stores.payments]\nhistory = "maybe"\n'
                   '[agents.oncall]\nuid = 7\nstores = { paymnts = "read" }\n'
                   '[agents.reviewer]\nuid = 7\nshoe = 1\n'
                   '[limits]\nmax_jail_runs = 0\n')
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"config {bad} is invalid:"
    expected = [
        "colour: unknown key",
        "stores.payments.history: Input should be a valid boolean",
        "agents.reviewer.shoe: unknown key",
        "limits.max_jail_runs: Input should be greater than or equal to 1",
        "agents.oncall.stores.paymnts: no such store (defined: payments)",
        "agents.reviewer.uid: uid 7 is already used by agent 'oncall'; each agent needs its "
        "own uid",
        "mount: must not be inside root",
    ]
    for problem in expected:
        assert sum(line.strip().startswith(problem) for line in lines) == 1, (problem, lines)
    assert len(lines) == 1 + len(expected), lines


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
    from memfs.daemon.serve import connection_limits  # the server stack: only this test needs it
    from memfs.errors import MemfsError

    config = parse_config(GOOD)
    assert connection_limits(config, 1 << 20)[0].max_connections == 1024
    assert connection_limits(config, 1024)[0].max_connections == 1024 - 512
    assert connection_limits(config, 1024)[1] is None  # no [http]
    with pytest.raises(MemfsError, match="fd_reserve"):
        connection_limits(config, 515)


def test_control_and_http_connections_share_one_budget() -> None:
    from memfs.daemon.serve import connection_limits
    from memfs.errors import MemfsError

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


# -- delegates ----------------------------------------------------------------------------


def test_delegates_as_a_list_may_act_for_any_agent() -> None:
    config = parse_config(with_(delegates=[0, 1001]))
    assert config.delegations == {0: None, 1001: None}
    assert config.may_act_for(1001, "reviewer") and not config.may_act_for(1002, "oncall")
    assert config.known_uid(1001) and config.known_uid(2001) and not config.known_uid(5)


def test_delegates_as_a_table_are_limited_to_their_agents() -> None:
    config = parse_config(with_(delegates={"1001": ["oncall"], "0": "*"}))
    assert config.delegations == {1001: frozenset({"oncall"}), 0: None}
    assert config.may_act_for(1001, "oncall") and not config.may_act_for(1001, "reviewer")
    assert config.may_act_for(0, "reviewer") and config.is_delegate(1001)
    assert not config.is_delegate(2001)


@pytest.mark.parametrize(("delegates", "fragment"), [
    ({"1001": ["oncal"]}, "delegates.1001: no agent named 'oncal' (defined: oncall, reviewer)"),
    ({"1001": []}, 'delegates.1001: name the agents it may act for, or "*" for any'),
    ({"1001": "oncall"}, 'delegates: 1001: want a list of agent names or "*" (any agent)'),
    ({"root": "*"}, "delegates: 'root' is not a uid"),
    ({"-1": "*"}, "delegates: '-1' is not a uid"),
    ({"4294967295": "*"}, "is not a uid"),
    ("root", "delegates: want a list of uids (delegates = [0, 1001]: any agent) or a table"),
    (["0"], "delegates: a list of delegates holds uids (integers), got '0'"),
    ([True], "got True"),
    ([-1], "got -1"),
])
def test_bad_delegates_say_what_is_wrong(delegates: object, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(with_(delegates=delegates))
    assert fragment in str(caught.value)


def test_a_name_with_a_line_break_is_refused() -> None:
    """``$`` also matches before a final newline: names are matched whole."""
    from memfs.config import check_name

    for name in ("oncall\n", "a\nb", "x" * 65):
        with pytest.raises(ValueError, match="bad agent name"):
            check_name("agent", name)
    with pytest.raises(ConfigError, match="bad agent name"):
        parse_config(with_(agents={"oncall\n": {"uid": 5}}))


# -- personal mode ------------------------------------------------------------------------


def test_personal_mode_knows_no_agents_by_uid() -> None:
    config = parse_config({"root": "/srv/m", "stores": {"notes": {}},
                           "personal": {"owner": 1000}})
    assert config.personal is not None and config.personal.owner == 1000
    assert config.access("anyone", "notes") == "read_write"
    assert config.access("anyone", "other") is None
    assert config.agent_for_uid(1000) is None
    assert config.known_uid(1000) and not config.known_uid(0)
    import os

    assert parse_config({"root": "/srv/m", "personal": {}}).personal.owner == os.getuid()  # type: ignore[union-attr]


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"agents": {"a": {"uid": 5}}}, "agents: personal mode knows agents by name"),
    ({"delegates": [0]}, "delegates: in personal mode the owner acts for its own agents"),
    ({"personal": {"owner": -1}}, "personal.owner"),
    ({"personal": {"uid": 5}}, "personal.uid: unknown key"),
])
def test_bad_personal_configs(extra: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"root": "/srv/m", "personal": {}, **extra})
    assert fragment in str(caught.value)


def test_personal_config_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memfs.config import personal_config

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    config = personal_config()
    assert config.root == tmp_path / "data" / "memfs"
    assert config.mount == tmp_path / "memory"
    assert config.socket == tmp_path / "run" / "memfs" / "control.sock"
    assert list(config.stores) == ["notes"] and config.stores["notes"].structured
    assert config.stores["notes"].history and config.http is None
    assert config.personal is not None
    assert personal_config(http_port=7801).http.listen == "127.0.0.1:7801"  # type: ignore[union-attr]

    advanced = tmp_path / "advanced.toml"
    advanced.write_text('[limits]\nmax_jail_runs = 2\n[http]\npublic_metrics = true\n')
    config = personal_config(advanced, http_port=7800)
    assert config.limits.max_jail_runs == 2 and config.root == tmp_path / "data" / "memfs"
    assert config.http is not None and config.http.public_metrics
    assert config.http.listen == "127.0.0.1:7800"
    advanced.write_text('[agents.claude]\nuid = 5\n')
    with pytest.raises(ConfigError, match="with --personal"):
        personal_config(advanced)
