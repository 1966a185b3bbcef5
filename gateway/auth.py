"""API keys for the gateway's clients, stored as SHA-256 digests and compared in constant time.

The keys file has one key per line, as ``sha256:<hex digest>`` (what ``hash_key`` prints,
so the file never holds a usable key) or, for development, the plain key; blank lines and
``#`` comments are ignored. A client sends its key as ``Authorization: Bearer <key>`` or
``X-API-Key: <key>``: no key is a 401, a wrong one a 403.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ConfigError, ModelfnError

if TYPE_CHECKING:
    from pathlib import Path

PREFIX = "sha256:"


class Unauthorized(ModelfnError):
    status_code = 401

    def __init__(self) -> None:
        super().__init__("an API key is required: send 'Authorization: Bearer <key>' or "
                         "'X-API-Key: <key>'")


class Forbidden(ModelfnError):
    status_code = 403

    def __init__(self) -> None:
        super().__init__("the API key is not valid")


def hash_key(key: str) -> str:
    return PREFIX + hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    def __init__(self, digests: list[bytes]) -> None:
        if not digests:
            raise ConfigError("the API keys file holds no key")
        self._digests = digests

    @classmethod
    def load(cls, path: Path) -> ApiKeys:
        digests = []
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read the API keys file: {exc}") from exc
        for number, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(PREFIX):
                try:
                    digest = bytes.fromhex(line[len(PREFIX):])
                except ValueError:
                    digest = b""
                if len(digest) != hashlib.sha256().digest_size:
                    raise ConfigError("not a sha256 digest", path=str(path), line=number)
                digests.append(digest)
            else:
                digests.append(hashlib.sha256(line.encode()).digest())
        return cls(digests)

    def check(self, authorization: str | None, api_key: str | None) -> None:
        """Raise ``Unauthorized`` or ``Forbidden`` unless the request carries a known key."""
        key = (api_key or "").strip() or None  # a blank X-API-Key is no key: try the other
        if key is None and authorization is not None:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer":
                key = value.strip()
        if not key:
            raise Unauthorized()
        digest = hashlib.sha256(key.encode()).digest()
        # compare against every key, so the time taken does not say which one nearly matched
        found = False
        for known in self._digests:
            found |= hmac.compare_digest(digest, known)
        if not found:
            raise Forbidden()
