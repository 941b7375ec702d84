"""Settings of the labeling service (``EXTRACTOR_LABELING_*``), read once when a command starts.

Declared like the extractor's (:mod:`extractor.config.fields`): each field's ``setting()`` gives
its environment variable, default, unit, checks and its row of the README's table
(``make settings-table``). ``extractor labeling serve | worker | add-user | migrate`` all read the
same variables, so ``add-user`` writes to the database the server uses. The outbound client's
defaults are these settings' (``OutboundSettings`` reads them from here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from extractor.config.fields import setting
from extractor.config.labeling_limits import LabelingLimits, MiB


@dataclass(frozen=True)
class LabelingSettings(LabelingLimits):
    """Everything the labeling server and its workers can be told; defaults suit one machine.

    The limits one tenant's requests and APIs are held to are declared in
    :class:`LabelingLimits` (their own README table); these are the rest.
    """

    # -- storage and accounts ---------------------------------------------------------------------
    data_dir: Path = setting(
        Path("./data"),
        "",
        "Folder of the embedded SQLite database (`labeling.db`).",
        shown="./data",
    )
    database_url: str = setting(
        "",
        "",
        "SQLAlchemy URL. PostgreSQL to scale out: `postgresql+psycopg://user:pass@host/db` (needs"
        " the `postgres` extra).",
        shown="sqlite:///<data dir>/labeling.db",
    )
    auto_migrate: bool = setting(
        True,
        "",
        "Run the Alembic migrations when `serve`, `worker` or `add-user` starts (concurrent"
        " starts on PostgreSQL wait on an advisory lock). `false`: run `extractor labeling"
        " migrate` yourself.",
    )
    secret_keys: str = setting(
        "",
        "",
        "Comma-separated Fernet keys sealing custom API secrets at rest; the first encrypts,"
        " every one decrypts. Empty: an SQLite deployment generates `<data dir>/secret-keys`"
        " (mode 0600) on first start; any other database then refuses custom API secrets and"
        " auto-labeling `secretKey`s (`SECRETS_UNAVAILABLE`), and a start with secrets already"
        ' stored fails saying what to set. See "Outbound allow-list and credentials".',
        secret=True,
    )
    token_lifetime_days: float = setting(
        0.0,
        "days",
        "Days a bearer token works after it was issued, counted from its creation (so lowering"
        " it also retires older tokens); `0`: until revoked with `extractor labeling"
        " revoke-token`.",
        at_least=0,
    )
    metrics: bool = setting(
        True,
        "",
        "Serve Prometheus metrics at `GET /metrics`: `labeling_jobs{kind,status}` and"
        " `labeling_queue_depth` read from the database at scrape time,"
        " `labeling_job_claim_latency_seconds{kind}`,"
        " `labeling_outbound_calls_total{target,outcome}`; open like the extractor's (counts"
        " only, no tenant data). A separate `extractor labeling worker --metrics-bind HOST:PORT`"
        " serves its own.",
    )

    # -- jobs -------------------------------------------------------------------------------------
    embedded_workers: int = setting(
        2,
        "threads",
        "Job threads inside each server process; `0` leaves jobs to `extractor labeling worker`"
        " processes.",
        at_least=0,
    )
    job_lease_seconds: float = setting(
        60.0,
        "seconds",
        "How long a claimed job stays owned without a heartbeat; after that a dead worker's job"
        " is claimed again and resumed.",
        above=0,
    )
    job_heartbeat_seconds: float = setting(
        10.0,
        "seconds",
        "Seconds between two lease renewals of a running job (keep well below the lease).",
        above=0,
    )
    job_poll_seconds: float = setting(
        1.0,
        "seconds",
        "Seconds an idle worker waits before looking for jobs again (jobs created by the same"
        " process wake it at once).",
        above=0,
    )
    job_max_attempts: int = setting(
        5,
        "claims",
        "Claims of one job before it is failed for good (a job that keeps killing its worker).",
        at_least=1,
    )
    # Job fairness and deadlines (issue 11); a running auto-labeling job hands its worker over
    # at the next batch, checkpoint kept.
    job_tenant_share: float = setting(
        0.5,
        "fraction",
        "Job fairness: the largest fraction of the running jobs one team (or one user's personal"
        " jobs) may hold while another team's job waits. Claims go to the team with the fewest"
        " running jobs, then the one served longest ago; a job over the share hands its worker"
        " over after its current batch or document (its results kept, nothing redone). `1`"
        " turns that hand-over off.",
        above=0,
        at_most=1,
    )
    job_deadline_seconds: float = setting(
        7200.0,
        "seconds",
        "Seconds of worker time one job may use, summed over its runs (time spent waiting in the"
        " queue does not count); past it the job ends FAILED saying so. A call in flight is not"
        " cut: it ends within its own timeouts.",
        above=0,
    )

    # -- outbound calls to customers' APIs -------------------------------------------------------
    outbound_allow: str = setting(
        "",
        "",
        "Comma-separated destinations that outbound calls may reach although loopback, private,"
        " link-local or metadata, each `[http|https://]HOST[:PORT|:*]`: HOST a name, an IP"
        " address, a CIDR or `[IPv6]`; no scheme means both; no port means the scheme's"
        " default, and `:*` (written out) every port; an entry with neither scheme nor port is a"
        " start-up error. E.g. `http://127.0.0.1:8000` for a local extractor, `10.0.0.0/8:*`."
        " Everything else non-public is refused, after DNS resolution and on every redirect hop,"
        " each judged by its own scheme, host and port.",
    )
    outbound_connect_timeout: float = setting(
        10.0,
        "seconds",
        "Seconds to resolve and connect to a custom extraction or prediction API.",
        above=0,
    )
    outbound_read_timeout: float = setting(
        920.0,
        "seconds",
        "Seconds such an API may stay silent while replying (above the extractor's own 900 s"
        " limit, so its 504 arrives rather than this timeout).",
        above=0,
    )
    outbound_total_timeout: float = setting(
        1200.0,
        "seconds",
        "Seconds for one whole call: attempts, redirects and backoff waits together.",
        above=0,
    )
    outbound_retries: int = setting(
        3,
        "attempts",
        "Extra attempts after a connection error, 429 or 5xx (`Retry-After` honoured).",
        at_least=0,
    )
    outbound_backoff_seconds: float = setting(
        0.5,
        "seconds",
        "Wait before the first retry, doubling each time, with jitter.",
        at_least=0,
    )
    outbound_max_reply_bytes: int = setting(
        32 * MiB,
        "bytes",
        "Largest reply read from an API (after undoing gzip or deflate); a longer one fails the"
        " job.",
        at_least=1,
    )
    prediction_connect_timeout: float = setting(
        10.0,
        "seconds",
        "Seconds to resolve and connect to a prediction API (custom extraction APIs keep the"
        " `OUTBOUND_*` timeouts above).",
        above=0,
    )
    prediction_read_timeout: float = setting(
        60.0,
        "seconds",
        "Seconds a prediction API may stay silent while answering one batch.",
        above=0,
    )
    prediction_total_timeout: float = setting(
        120.0,
        "seconds",
        "Seconds for one whole prediction call (attempts, redirects and backoff waits together)."
        " A stopping worker waits for a batch in flight rather than sending it twice later, so"
        " give the process manager's stop timeout (gunicorn's 30 s `graceful_timeout`,"
        " Kubernetes' `terminationGracePeriodSeconds`) at least this much.",
        above=0,
    )

    # -- requests (issue 18: they arrive whole before a request thread sees them) ----------------
    max_upload_bytes: int = setting(
        200 * MiB,
        "bytes",
        "Largest GraphQL request with its uploads; above it: HTTP 413.",
        at_least=1,
    )

    @property
    def resolved_database_url(self) -> str:
        """The database URL in force: the explicit one, else SQLite inside the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'labeling.db').resolve()}"
