"""control.client.tokenfile: the checks on a token file, on real files."""

import os

import pytest

from memfs.control.client.tokenfile import TokenFileError, read_token_file, token_file_path


def write(tmp_path, data: bytes, mode: int = 0o600) -> str:
    path = tmp_path / "token"
    path.write_bytes(data)
    os.chmod(path, mode)
    return str(path)


def test_reads_a_private_token(tmp_path):
    assert read_token_file(write(tmp_path, b"mfs_abc123\n")) == "mfs_abc123"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o666])
def test_refuses_a_file_others_can_reach(tmp_path, mode):
    with pytest.raises(TokenFileError, match="chmod 600"):
        read_token_file(write(tmp_path, b"mfs_abc123\n", mode))


@pytest.mark.parametrize("data,why", [
    (b"", "empty"), (b"  \n", "empty"), (b"a b\n", "more than one"),
    (b"a\nb\n", "more than one"), (b"\xff\xfe", "not ASCII"), (b"x" * 5000, "longer"),
])
def test_refuses_what_is_not_a_token(tmp_path, data, why):
    with pytest.raises(TokenFileError, match=why):
        read_token_file(write(tmp_path, data))


def test_missing_and_directory(tmp_path):
    with pytest.raises(TokenFileError, match="no such file"):
        read_token_file(str(tmp_path / "nope"))
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_token_file(str(tmp_path))


def test_path_from_flag_then_environment(monkeypatch):
    monkeypatch.setenv("MEMFS_TOKEN_FILE", "/env/token")
    assert token_file_path("/flag/token") == "/flag/token"
    assert token_file_path(None) == "/env/token"
    monkeypatch.delenv("MEMFS_TOKEN_FILE")
    assert token_file_path(None) is None
