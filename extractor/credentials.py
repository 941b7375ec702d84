"""Who a request is: the one check of a bearer token, used by every entrance (the routes'
``web/views.authorize`` and the job routes, the worker's refusal of an upload before its body
arrives in ``server/gunicorn_conf.py``, the live WebSocket's handshake in
``realtime/handshake.py``). In the base layer, so that each of them imports it from below.

Two kinds of credential: the shared secret (``EXTRACTOR_SECRET``, the identity ``shared``)
and named API keys (``EXTRACTOR_API_KEYS``, a file of ``name:key`` lines re-read when it
changes). A token is compared with every one of them, each time: as SHA-256 digests (all the
same length, so not even a key's length shows) with ``hmac.compare_digest`` and no early exit,
so the time taken depends on neither which key matched nor how much of one a wrong token
shares (only on how many keys there are). Only the standard library and the base layer are
imported: the worker's main loop calls this before Flask sees the request.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from extractor.config import Settings, SettingsError
from extractor.errors import Unauthorized

log = logging.getLogger(__name__)

SHARED = "shared"  # the shared secret's identity (its metrics label)
NOBODY = "none"  # the metrics label of a request with no identity (refused, or none needed)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
MIN_KEY_CHARS = 16
REFUSED = "a valid 'Authorization: Bearer <secret or key>' header is required"


@dataclass(frozen=True)
class Identity:
    """Whom a request's credential names: a named key's name, or the shared secret's."""

    name: str
    keyed: bool  # a named key: its jobs and live streams are its name's own


SHARED_SECRET = Identity(SHARED, keyed=False)
OPEN = Identity(NOBODY, keyed=False)  # no credential configured: everyone is this


class KeysFileError(ValueError):
    """The API keys file cannot be used; the message names the line, never a key."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def parse_keys(text: str) -> tuple[tuple[bytes, str], ...]:
    """The ``(digest of key, name)`` pairs of a keys file's text; ``KeysFileError`` if any
    line is not ``name:key`` with a valid name and key, or a key appears twice."""
    keys: dict[bytes, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, key = (part.strip() for part in line.partition(":"))
        if not colon or not NAME.fullmatch(name) or name in (SHARED, NOBODY):
            raise KeysFileError(
                f"line {number}: expected name:key, the name 1-32 of A-Z a-z 0-9 _ . -"
                f" (not {SHARED} or {NOBODY})"
            )
        if len(key) < MIN_KEY_CHARS or any(c.isspace() for c in key):
            raise KeysFileError(
                f"line {number} ({name}): a key is {MIN_KEY_CHARS} or more characters, no spaces"
            )
        digest = _digest(key)
        if digest in keys:
            raise KeysFileError(f"line {number} ({name}): this key is on an earlier line too")
        keys[digest] = name
    return tuple(keys.items())


class Credentials:
    """The credentials one deployment accepts: its shared secret and the keys of its file."""

    def __init__(self, secret: str | None, keys_file: str | None) -> None:
        self.secret = _digest(secret) if secret else None
        self.path = Path(keys_file) if keys_file else None
        self.keys: tuple[tuple[bytes, str], ...] = ()
        self._seen: tuple[int, ...] | None = None  # the file's stat when last read
        self._reading = threading.Lock()
        if self.path is not None:
            try:
                self.keys = self._read(self.path, self._stat(self.path))
            except (OSError, KeysFileError) as exc:
                raise SettingsError(f"EXTRACTOR_API_KEYS={keys_file}: {exc}") from None
            if self.secret is not None and any(d == self.secret for d, _ in self.keys):
                raise SettingsError("EXTRACTOR_API_KEYS holds EXTRACTOR_SECRET as a named key")

    @property
    def required(self) -> bool:
        """Whether a request needs a credential at all."""
        return self.secret is not None or self.path is not None

    def names(self) -> frozenset[str]:
        """The names of the keys in force."""
        return frozenset(name for _, name in self.current())

    def identify(self, authorization: str | None) -> Identity | None:
        """The identity of an ``Authorization`` header's bearer token; None: refused."""
        token = bearer_token(authorization)
        return self.identify_tokens([] if token is None else [token])

    def identify_tokens(self, tokens: Iterable[str]) -> Identity | None:
        """The identity of the first of ``tokens`` that is a credential; None: refused."""
        if not self.required:
            return OPEN
        keys = self.current()
        found: Identity | None = None
        for token in tokens:
            digest = _digest(token)
            # Every comparison made, whatever matched: the time is the same for all tokens.
            shared = self.secret is not None and hmac.compare_digest(digest, self.secret)
            named = [name for key, name in keys if hmac.compare_digest(digest, key)]
            if found is None and shared:
                found = SHARED_SECRET
            elif found is None and named:
                found = Identity(named[0], keyed=True)
        return found

    def current(self) -> tuple[tuple[bytes, str], ...]:
        """The keys in force: the file read again when its stat changed since last read."""
        if self.path is None:
            return self.keys
        try:
            seen = self._stat(self.path)
        except OSError as exc:
            if self._seen is not None:
                log.error("cannot read the API keys file; keeping its last keys: %s", exc)
                self._seen = None
            return self.keys
        if seen != self._seen:
            with self._reading:
                if seen != self._seen:
                    try:
                        self.keys = self._read(self.path, seen)
                    except (OSError, KeysFileError) as exc:
                        self._seen = seen  # logged once per change, not once per request
                        log.error("API keys file not used; keeping its last keys: %s", exc)
        return self.keys

    def _read(self, path: Path, seen: tuple[int, ...]) -> tuple[tuple[bytes, str], ...]:
        keys = parse_keys(path.read_text(encoding="utf-8"))
        self._seen = seen
        log.info(
            "API keys read",
            extra={"keys": len(keys), "names": sorted({name for _, name in keys})},
        )
        return keys

    @staticmethod
    def _stat(path: Path) -> tuple[int, ...]:
        # The inode too: a new file renamed over the old one may have its size and mtime.
        stat = os.stat(path)
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def require_identity(settings: Settings, authorization: str | None) -> Identity:
    """The identity of an ``Authorization`` header, or ``Unauthorized`` (401)."""
    identity = credentials(settings).identify(authorization)
    if identity is None:
        raise Unauthorized(REFUSED)
    return identity


@lru_cache(maxsize=8)
def _credentials(secret: str | None, keys_file: str | None) -> Credentials:
    return Credentials(secret, keys_file)


def credentials(settings: Settings) -> Credentials:
    """The deployment's credentials, one object per process and settings (the keys file is
    read once, then again only when it changes)."""
    return _credentials(settings.secret, settings.api_keys)


__all__ = [
    "NOBODY",
    "OPEN",
    "REFUSED",
    "SHARED",
    "SHARED_SECRET",
    "Credentials",
    "Identity",
    "KeysFileError",
    "bearer_token",
    "credentials",
    "parse_keys",
    "require_identity",
]
