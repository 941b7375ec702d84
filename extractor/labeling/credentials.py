"""Customers' credentials: kept out of URLs, encrypted at rest, re-encrypted when keys rotate.

A custom API's secret is sealed with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``)
under the keys of ``EXTRACTOR_LABELING_SECRET_KEYS``: the first key encrypts, every key decrypts
(``MultiFernet``), so a key is rotated by putting a new one first, running
``extractor labeling rotate-secrets`` (re-encrypts every stored secret under it) and dropping the
old one. A database dump or backup alone then reveals no secret.

With no key configured, an SQLite deployment (one machine by nature) generates a key file in its
data directory on first start, so the single-user default keeps working; that protects a copied
database file, not a copied data directory. Any other database needs the setting: several
machines must share one key, and a key generated on one of them would lock the others out.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy import make_url, select

from extractor.config import LabelingSettings, SettingsError
from extractor.labeling.db import Database
from extractor.labeling.errors import SecretsUnavailableError, UserInputError
from extractor.labeling.models import CustomAPI

log = logging.getLogger(__name__)

KEYS_VARIABLE = LabelingSettings.variable("secret_keys")
#: The generated key file of an SQLite deployment without the setting, inside the data directory.
KEY_FILE_NAME = "secret-keys"
#: What ``shown_url`` puts in place of every query value.
REDACTED = "REDACTED"


# -- URLs -------------------------------------------------------------------------------------


def refuse_userinfo(url: str, what: str) -> None:
    """UserInputError when ``url`` carries ``user:password@``: such a secret would be stored in
    clear and shown back; the API's secret field is the place for it. Never quotes the URL."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UserInputError(f"{what} is not a valid URL") from exc
    if "@" in parts.netloc:
        raise UserInputError(
            f"{what} must not contain a user name or password (user:password@host); "
            "give the credential as the API's secret instead"
        )


def shown_url(url: str) -> str:
    """``url`` as it may be shown back: no user:password, every query value replaced by
    ``REDACTED`` (keys kept, so the user recognises the URL), no fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(invalid URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = "&".join(f"{quote(key, safe='')}={REDACTED}" for key, _ in pairs)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


# -- keys -------------------------------------------------------------------------------------


def new_key() -> str:
    """A fresh Fernet key (32 random bytes, URL-safe base64), for the setting or the key file."""
    return Fernet.generate_key().decode("ascii")


class SecretBox:
    """Seals and opens secrets under an ordered list of Fernet keys (the first one encrypts)."""

    def __init__(self, keys: list[str], origin: str) -> None:
        if not keys:
            raise SettingsError(f"{origin} holds no key")
        fernets = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.encode("ascii")))
            except (ValueError, UnicodeEncodeError) as exc:
                # Never quote the key: it is the secret that protects all the others.
                raise SettingsError(
                    f"{origin}: key {position} is not a Fernet key (32 bytes in URL-safe "
                    "base64; `extractor labeling new-secret-key` prints one)"
                ) from exc
        self._fernet = MultiFernet(fernets)
        self.origin = origin

    def seal(self, secret: str) -> str:
        """The secret encrypted under the first key, as ASCII text for a database column."""
        return self._fernet.encrypt(secret.encode("utf-8")).decode("ascii")

    def open(self, token: str) -> str:
        """The secret a ``seal`` produced; SecretsUnavailableError when no key opens it."""
        with self._undecryptable():
            return self._fernet.decrypt(token.encode("ascii")).decode("utf-8")

    def rotate(self, token: str) -> str:
        """``token`` re-encrypted under the first key (whichever key sealed it)."""
        with self._undecryptable():
            return self._fernet.rotate(token.encode("ascii")).decode("ascii")

    @contextmanager
    def _undecryptable(self) -> Iterator[None]:
        """Translate cryptography's errors for a token none of our keys opens, in one place."""
        try:
            yield
        except (InvalidToken, UnicodeError) as exc:
            raise SecretsUnavailableError(
                f"a stored secret cannot be decrypted with the keys of {self.origin}"
            ) from exc


#: Marks a sealed secret inside a job payload, where secrets from before sealing may still sit.
SEALED_PREFIX = "fernet:"


def seal_field(box: SecretBox | None, secret: str) -> str:
    """``secret`` sealed for a JSON payload (a job's), marked with ``SEALED_PREFIX``;
    SecretsUnavailableError when the deployment has no key."""
    if box is None:
        raise SecretsUnavailableError()
    return SEALED_PREFIX + box.seal(secret)


def _split_keys(text: str) -> list[str]:
    return [key.strip() for key in text.replace("\n", ",").split(",") if key.strip()]


def key_file(settings: LabelingSettings) -> Path | None:
    """Where an SQLite deployment without the setting keeps its generated key; None otherwise."""
    if settings.secret_keys.strip():
        return None
    if make_url(settings.resolved_database_url).get_backend_name() != "sqlite":
        return None
    return settings.data_dir / KEY_FILE_NAME


def load_secret_box(settings: LabelingSettings, *, create: bool = True) -> SecretBox | None:
    """The keys in force: the setting, else (SQLite) the key file, generated when missing and
    ``create``; None when neither applies, and secrets then cannot be stored."""
    if settings.secret_keys.strip():
        return SecretBox(_split_keys(settings.secret_keys), KEYS_VARIABLE)
    path = key_file(settings)
    if path is None:
        return None
    try:
        if not path.exists():
            if not create:
                return None
            _create_key_file(path)
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(
            f"cannot use the secret key file {path} ({exc}); set {KEYS_VARIABLE} instead"
        ) from exc
    return SecretBox(_split_keys(text), str(path))


def _create_key_file(path: Path) -> None:
    """Write a new key to ``path`` (mode 0600) unless another process just did.

    Written aside and hard-linked into place: link fails if the file exists, so gunicorn
    workers starting together all end up with the one key that won, never a half-written file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret-keys-")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(new_key() + "\n")
        try:
            os.link(temporary, path)
            log.warning(
                "no %s set: generated a secret key in %s (keep it with the database; "
                "set the variable to share keys between machines)",
                KEYS_VARIABLE,
                path,
            )
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)


# -- stored secrets ---------------------------------------------------------------------------


def seal_stored_secrets(db: Database, box: SecretBox | None) -> int:
    """Start-up check: encrypt secrets stored in clear (before migration 0003), and make sure
    every stored secret opens with the configured keys. Returns how many were encrypted.

    Fails with a SettingsError that says what to do when a secret is stored but no key is set,
    or when the keys cannot open one (a key dropped before ``rotate-secrets`` ran).
    """
    sealed = 0
    with db.session() as session:
        apis = session.scalars(
            select(CustomAPI).where(
                CustomAPI.legacy_secret.is_not(None) | CustomAPI.secret_token.is_not(None)
            )
        ).all()
        if apis and box is None:
            raise SettingsError(
                f"{len(apis)} custom API secret(s) are stored but {KEYS_VARIABLE} is not set: "
                f"set it to the key(s) they were encrypted with (or, for secrets stored before "
                f"encryption, to a new key from `extractor labeling new-secret-key`)"
            )
        for api in apis:
            assert box is not None
            if api.legacy_secret is not None:
                api.secret_token = box.seal(api.legacy_secret)
                api.legacy_secret = None
                sealed += 1
                continue
            try:
                box.open(api.secret_token or "")
            except SecretsUnavailableError as exc:
                raise SettingsError(
                    f"the secret of custom API {api.id} cannot be decrypted with the keys of "
                    f"{box.origin}: was a key removed before `extractor labeling rotate-secrets` "
                    "ran? Put it back after the new one."
                ) from exc
    if sealed:
        log.info("encrypted %d custom API secret(s) stored in clear", sealed)
    return sealed


def rotate_stored_secrets(db: Database, box: SecretBox) -> int:
    """Re-encrypt every stored secret under the first key; returns how many there were."""
    seal_stored_secrets(db, box)
    with db.session() as session:
        apis = session.scalars(select(CustomAPI).where(CustomAPI.secret_token.is_not(None))).all()
        for api in apis:
            api.secret_token = box.rotate(api.secret_token or "")
        return len(apis)
