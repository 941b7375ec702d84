"""Settings of the extractor's asynchronous jobs (``POST /v1/jobs``): where the job database is,
how many jobs a process runs and how nicely, leases, time to live, caps and webhooks.

Declared apart from the rest of :class:`~extractor.config.extraction.Settings` (which derives
from :class:`JobSettings`) because they are a concern of their own; the README shows them in a
table of their own under "Asynchronous jobs".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .fields import SettingsBase, SettingsError, setting

OUTBOUND_ALLOW_SYNTAX = "[http|https://]HOST[:PORT|:*]"


@dataclass(frozen=True)
class JobSettings(SettingsBase):
    """How one extractor deployment runs asynchronous jobs; part of Settings."""

    env_prefix: ClassVar[str] = "EXTRACTOR_"

    data_dir: str = setting(
        "./data",
        "",
        "Directory of the job database (jobs.db, SQLite) when EXTRACTOR_DATABASE_URL is unset.",
    )
    database_url: str | None = setting(
        None,
        "",
        "SQLAlchemy URL of the job database (postgresql+psycopg://...): every server on it"
        " shares one queue; uploads and results are kept in it too. Unset: SQLite in"
        " EXTRACTOR_DATA_DIR (one machine).",
        secret=True,
    )
    job_workers: int = setting(
        1,
        "jobs",
        "Asynchronous jobs one server worker process runs at once, on threads of their own"
        " outside the engine slots of synchronous requests (0: this server only queues them).",
        at_least=0,
    )
    job_niceness: int = setting(
        10,
        "nice levels",
        "How much nicer (lower CPU priority) job threads and the processes they start are than"
        " request threads, so synchronous requests come first on a busy CPU (0: equal).",
        at_least=0,
        at_most=19,
    )
    job_timeout: float = setting(
        14400.0,
        "seconds",
        "Seconds of work one job may use over all its attempts; then it fails (job_timeout).",
        above=0,
    )
    job_lease_seconds: float = setting(
        30.0,
        "seconds",
        "A running job's lease, renewed every third of it: a job whose server died (SIGKILL)"
        " is taken again this long after its last renewal, by a restarted server or another.",
        above=0,
    )
    job_ttl_seconds: float = setting(
        86400.0,
        "seconds",
        "How long a finished job and its result are kept; then both are deleted (404).",
        above=0,
    )
    max_queued_jobs_per_client: int = setting(
        20,
        "jobs",
        "Queued jobs one client address may have waiting; one more gets 429 with Retry-After.",
        at_least=1,
    )
    webhook_secret: str | None = setting(
        None,
        "",
        "Key of the HMAC-SHA256 signatures of webhook calls (Standard Webhooks'"
        " webhook-signature and X-Signature); without it a job's callback_url is refused (400).",
        secret=True,
    )
    webhook_attempts: int = setting(
        8,
        "attempts",
        "Tries of one webhook call: timeouts, connection errors, 408, 429 and 5xx are retried"
        " after 1, 2, 4 ... s (at most 5 min apart).",
        at_least=1,
    )
    webhook_timeout: float = setting(
        10.0,
        "seconds",
        "Seconds one webhook attempt may take in all; also the most a callback URL's host"
        " lookup may take when the job is submitted (then 400 invalid_callback_url).",
        above=0,
    )
    webhook_senders: int = setting(
        16,
        "threads",
        "Webhook attempts one server process makes at once, each on a thread of its own: a"
        " receiver that hangs holds one of them, never the others' deliveries.",
        at_least=1,
    )
    webhook_sends_per_host: int = setting(
        2,
        "attempts",
        "Webhook attempts in flight to one destination (scheme, host and port) per server"
        " process; its other deliveries wait their turn.",
        at_least=1,
    )
    webhook_sends_per_client: int = setting(
        4,
        "attempts",
        "Webhook attempts in flight for the jobs of one client address per server process,"
        " whichever destinations they name.",
        at_least=1,
    )
    max_pending_webhooks_per_client: int = setting(
        50,
        "webhooks",
        "Webhooks of one client address not yet delivered or given up (its jobs with a"
        " callback_url, running or ended); one more job with a callback_url gets 429.",
        at_least=1,
    )
    webhook_max_reply_bytes: int = setting(
        65536,
        "bytes",
        "Bytes of a webhook receiver's reply read (only its status counts); the rest is"
        " dropped with the connection.",
        at_least=0,
    )
    outbound_allow: str = setting(
        "",
        "",
        f"Comma-separated {OUTBOUND_ALLOW_SYNTAX} webhook destinations allowed although"
        " private, loopback or link-local (refused otherwise); the syntax of"
        " EXTRACTOR_LABELING_OUTBOUND_ALLOW.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        # A typo in the allow-list stops the server at start, not a webhook hours later. The
        # policy lives in extractor.net, which imports nothing of the project.
        from extractor.net.ssrf import OutboundPolicy

        try:
            OutboundPolicy(self.outbound_allow, setting=self.variable("outbound_allow"))
        except ValueError as exc:
            raise SettingsError(str(exc)) from None

    @property
    def job_database_url(self) -> str:
        """EXTRACTOR_DATABASE_URL, or the SQLite file in EXTRACTOR_DATA_DIR."""
        return self.database_url or f"sqlite:///{Path(self.data_dir) / 'jobs.db'}"
