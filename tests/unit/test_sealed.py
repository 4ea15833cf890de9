"""The sealer's key file: made private, never taken through a symbolic link, and a key
that is not one said in a line (crashsafe/sealed.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crashsafe.errors import ConfigError
from crashsafe.sealed import Sealer, secret_body


def sealer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sealer:
    monkeypatch.delenv("CRASHSAFE_SECRET_KEY", raising=False)
    return Sealer(key_file=tmp_path / "c.db.key")


def test_a_key_file_is_made_private_and_opens_what_it_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = sealer(tmp_path, monkeypatch).seal("s3cret", "a header")
    assert oct((tmp_path / "c.db.key").stat().st_mode & 0o777) == "0o600"
    assert sealer(tmp_path, monkeypatch).open(token) == "s3cret"  # a new process, same file


@pytest.mark.parametrize("target", ["elsewhere.key", "nowhere.key"])
def test_a_key_file_that_is_a_symbolic_link_is_refused(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a review of #24: a dangling link gave a raw FileNotFoundError, a link was followed)
    if target == "elsewhere.key":
        (tmp_path / target).write_text("a key planted elsewhere\n")
    os.symlink(tmp_path / target, tmp_path / "c.db.key")
    with pytest.raises(ConfigError, match="it is a symbolic link"):
        sealer(tmp_path, monkeypatch).seal("s3cret", "a header")


def test_a_key_that_is_not_one_is_said_in_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "c.db.key").write_text("not a key\n")
    with pytest.raises(ConfigError, match="is not a key: use `crashsafe secret-key`"):
        sealer(tmp_path, monkeypatch).seal("s3cret", "a header")


def test_bodies_naming_a_credential_field_are_secret() -> None:
    for body in ("user=me&password=x", "pass=x", "u=1&pwd=x", '{"token": "x"}',
                 "user=m\xe9&pass=x".encode("latin-1"), b"otp=123456"):  # fmt: skip
        assert secret_body(body), body
    for body in ("q=lamps&page=2", '{"query": "lamps"}', b"\x00\x01binary"):
        assert not secret_body(body), body
