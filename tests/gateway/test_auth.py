"""API keys: hashed at rest, compared in constant time, 401 without and 403 with a wrong one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from modelfn.gateway.auth import ApiKeys, InvalidApiKey, NoApiKey, hash_key
from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def keys(tmp_path: Path, text: str) -> ApiKeys:
    path = tmp_path / "keys"
    path.write_text(text)
    return ApiKeys.load(path)


def test_hashed_and_plain_keys(tmp_path: Path) -> None:
    api = keys(tmp_path, f"# ops\n{hash_key('alpha')}\n\nbeta\n")
    api.check("Bearer alpha", None)
    api.check(None, "beta")
    api.check("bearer  alpha", None)
    with pytest.raises(NoApiKey):
        api.check(None, None)
    with pytest.raises(NoApiKey):
        api.check("Basic YWxwaGE=", None)
    with pytest.raises(InvalidApiKey):
        api.check("Bearer gamma", None)
    assert NoApiKey().status_code == 401 and InvalidApiKey().status_code == 403


def test_a_blank_x_api_key_does_not_hide_a_bearer_key(tmp_path: Path) -> None:
    """curl -H 'X-API-Key;' sends the header empty: the Authorization key still counts."""
    api = keys(tmp_path, "alpha\n")
    api.check("Bearer alpha", "")
    api.check("Bearer alpha", "  ")
    with pytest.raises(NoApiKey):
        api.check(None, "")


def test_bad_key_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"keys:2: not a sha256 digest"):
        keys(tmp_path, "alpha\nsha256:abc\n")
    with pytest.raises(ConfigError, match="holds no key"):
        keys(tmp_path, "# nothing\n")
    with pytest.raises(ConfigError, match="cannot read the API keys file"):
        ApiKeys.load(tmp_path / "missing")


def test_a_changed_keys_file_is_read_again_and_a_bad_one_keeps_the_keys(
        tmp_path: Path) -> None:
    """Keys are added and revoked without a restart; a file that breaks while the gateway
    runs keeps the keys it had instead of locking every client out."""
    path = tmp_path / "keys"
    path.write_text("alpha\n")
    api = ApiKeys.load(path)
    assert api.refresh() is False  # unchanged
    path.write_text(f"{hash_key('beta')}\n")
    assert api.refresh() is True
    api.check(None, "beta")
    with pytest.raises(InvalidApiKey):
        api.check(None, "alpha")  # revoked
    for broken in ("# nothing left\n", "beta\nsha256:abc\n"):
        path.write_text(broken)
        assert api.refresh() is False
        api.check(None, "beta")
    path.unlink()
    assert api.refresh() is False
    api.check(None, "beta")
    path.write_text("gamma\n")
    assert api.refresh() is True
    api.check(None, "gamma")
