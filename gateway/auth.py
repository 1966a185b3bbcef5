"""API keys for the gateway's clients, stored as SHA-256 digests and compared in constant time.

The keys file has one key per line, as ``sha256:<hex digest>`` (what ``hash_key`` prints,
so the file never holds a usable key) or, for development, the plain key; blank lines and
``#`` comments are ignored. A client sends its key as ``Authorization: Bearer <key>`` or
``X-API-Key: <key>``: no key is a 401 (with ``WWW-Authenticate: Bearer``), a wrong one a
403. A changed file is read again while the gateway runs (``ApiKeys.refresh``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ConfigError, ModelfnError

if TYPE_CHECKING:
    from pathlib import Path

PREFIX = "sha256:"
logger = logging.getLogger("modelfn.gateway")


class NoApiKey(ModelfnError):
    status_code = 401

    def __init__(self) -> None:
        super().__init__("an API key is required: send 'Authorization: Bearer <key>' or "
                         "'X-API-Key: <key>'")


class InvalidApiKey(ModelfnError):
    status_code = 403

    def __init__(self) -> None:
        super().__init__("the API key is not valid")


def hash_key(key: str) -> str:
    return PREFIX + hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    """The keys the gateway takes. Loaded from a file, they follow it: ``refresh`` (the
    gateway calls it as often as it reloads routes) reads the file again once it changed,
    so a key added or revoked takes effect without a restart; a file that cannot be read
    or holds no valid key then keeps the keys there were, and says why."""

    def __init__(self, digests: list[bytes], path: Path | None = None) -> None:
        if not digests:
            raise ConfigError("the API keys file holds no key")
        self._digests = digests
        self.path = path
        self._seen = _stamp(path) if path is not None else None

    @classmethod
    def load(cls, path: Path) -> ApiKeys:
        stamp = _stamp(path)  # before the read: a change while reading is read again
        keys = cls(_read(path), path)
        keys._seen = stamp
        return keys

    def refresh(self) -> bool:
        """Read the file again if it changed since it was read; True when the keys did."""
        if self.path is None:
            return False
        stamp = _stamp(self.path)
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            digests = _read(self.path)
            if not digests:
                raise ConfigError("the API keys file holds no key")
        except ConfigError as exc:
            logger.warning("API keys at %s not reloaded, keeping the last ones: %s",
                           self.path, exc)
            return False
        changed = digests != self._digests
        self._digests = digests
        if changed:
            logger.info("API keys reloaded from %s: %d key(s)", self.path, len(digests))
        return changed
    def check(self, authorization: str | None, api_key: str | None) -> None:
        """Raise ``NoApiKey`` or ``InvalidApiKey`` unless the request carries a known key."""
        key = (api_key or "").strip() or None  # a blank X-API-Key is no key: try the other
        if key is None and authorization is not None:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer":
                key = value.strip()
        if not key:
            raise NoApiKey()
        digest = hashlib.sha256(key.encode()).digest()
        # compare against every key, so the time taken does not say which one nearly matched
        found = False
        for known in self._digests:
            found |= hmac.compare_digest(digest, known)
        if not found:
            raise InvalidApiKey()


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a changed file apart: its inode, size and modification time."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def _read(path: Path) -> list[bytes]:
    """The key digests in the file at ``path``."""
    digests = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
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
    return digests
