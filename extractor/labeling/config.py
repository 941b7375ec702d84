"""Settings of the labeling service: one frozen dataclass read from ``EXTRACTOR_LABELING_*``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from extractor.labeling.outbound import OutboundSettings

ENV_PREFIX = "EXTRACTOR_LABELING_"


class SettingsError(ValueError):
    """An environment variable holds a value the service cannot use."""


@dataclass(frozen=True)
class LabelingSettings:
    """Everything the labeling server and its workers can be told; defaults suit one machine."""

    # Where the embedded SQLite database lives when DATABASE_URL is not given.
    data_dir: Path = Path("./data")
    # SQLAlchemy URL; empty means sqlite:///<data_dir>/labeling.db. PostgreSQL to scale out.
    database_url: str = ""
    # Comma-separated [http|https://]HOST[:PORT|:*] entries outbound calls may reach although
    # private or loopback (outbound_policy has the syntax); ':*' is every port, and only if written.
    outbound_allow: str = ""
    # Worker threads run inside each server process; 0 leaves jobs to `extractor labeling worker`.
    embedded_workers: int = 2
    # seconds a claimed job stays owned without a heartbeat; after that another worker takes it
    job_lease_seconds: float = 60.0
    # seconds between two heartbeats of a running job (well below the lease)
    job_heartbeat_seconds: float = 10.0
    # seconds an idle worker sleeps between two looks at the jobs table
    job_poll_seconds: float = 1.0
    # claims of one job before it is failed for good (a job that keeps killing its worker)
    job_max_attempts: int = 5
    # seconds to resolve and connect to a custom or prediction API
    outbound_connect_timeout: float = OutboundSettings.connect_timeout
    # seconds an API may stay silent mid-reply; above the extractor's own 900 s request limit
    outbound_read_timeout: float = OutboundSettings.read_timeout
    # seconds for one whole call: every attempt, redirect and backoff wait together
    outbound_total_timeout: float = OutboundSettings.total_timeout
    # seconds before the first retry, doubling each time (Retry-After wins when sent)
    outbound_backoff_seconds: float = OutboundSettings.backoff_base
    # bytes; a longer reply fails the job rather than filling memory
    outbound_max_reply_bytes: int = OutboundSettings.max_reply_bytes
    # further attempts after a connection error, 429 or 5xx, with exponential backoff
    outbound_retries: int = OutboundSettings.retries
    # bytes; one GraphQL request with all its uploads (413 above)
    max_upload_bytes: int = 200 * 1024 * 1024
    # Run Alembic migrations when `serve`, `worker` or `add-user` start.
    auto_migrate: bool = True
    # Comma-separated Fernet keys sealing custom API secrets at rest: the first encrypts, all
    # decrypt (rotation). Empty: SQLite generates <data_dir>/secret-keys; other databases can't
    # store secrets.
    secret_keys: str = field(default="", repr=False)
    # days a bearer token stays valid after it was issued (also for tokens issued before a
    # change); 0 keeps tokens until they are revoked
    token_lifetime_days: float = 0.0

    @property
    def resolved_database_url(self) -> str:
        """The database URL in force: the explicit one, else SQLite inside the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'labeling.db').resolve()}"

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> LabelingSettings:
        """Read the defaults, then ``EXTRACTOR_LABELING_<FIELD>`` variables, then ``overrides``."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for spec in fields(cls):
            raw = environ.get(ENV_PREFIX + spec.name.upper())
            if raw is None or raw.strip() == "":
                continue
            values[spec.name] = _parse(spec.name, spec.type, raw.strip())
        return replace(cls(**values), **overrides)


def _parse(name: str, kind: Any, raw: str) -> Any:
    """Turn one environment string into the field's type, naming the variable when it is wrong."""
    kind = str(kind)
    try:
        if kind == "bool":
            if raw.lower() in {"1", "true", "yes", "on"}:
                return True
            if raw.lower() in {"0", "false", "no", "off"}:
                return False
            raise ValueError(raw)
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "Path":
            return Path(raw)
        return raw
    except ValueError as exc:
        raise SettingsError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind}") from exc
