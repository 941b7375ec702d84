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
from typing import ClassVar

from extractor.config.fields import SettingsBase, setting

MiB = 1024 * 1024


@dataclass(frozen=True)
class LabelingSettings(SettingsBase):
    """Everything the labeling server and its workers can be told; defaults suit one machine."""

    env_prefix: ClassVar[str] = "EXTRACTOR_LABELING_"

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

    # -- limits and multi-tenancy (issue 11): one tenant cannot exhaust the others' server ------
    # A project job holds its documents until delivery. Measured: a project at the defaults
    # (two documents of 50,000 lines of 10 tokens) grows the worker by 115 MB and makes 20 MB of
    # JSON; the issue's `"a\n" * 10**6` (2 MB) would have grown it by 459 MB.
    max_document_bytes: int = setting(
        10 * MiB,
        "bytes",
        "Bytes of one TOKEN_BASED text file, checked when the upload is received.",
        at_least=1,
    )
    max_document_lines: int = setting(
        50_000,
        "lines",
        "Non-empty lines (cells) of one document: checked on upload for text files, "
        "and on the extraction API's reply for OCR and AUDIO.",
        at_least=1,
    )
    max_document_tokens: int = setting(
        500_000,
        "tokens",
        "Tokens (whitespace-separated words) of one document, checked like lines.",
        at_least=1,
    )
    max_project_documents: int = setting(
        500, "files", "Files in one `createProject` request.", at_least=1
    )
    max_project_bytes: int = setting(
        50 * MiB,
        "bytes",
        "Bytes of all the text files of one TOKEN_BASED project together.",
        at_least=1,
    )
    max_project_lines: int = setting(
        100_000,
        "lines",
        "Non-empty lines of all the documents of one project together.",
        at_least=1,
    )
    max_project_tokens: int = setting(
        1_000_000, "tokens", "Tokens of all the documents of one project together.", at_least=1
    )
    max_queued_jobs_per_user: int = setting(
        20,
        "jobs",
        "Unfinished (queued or running) jobs one user may have; more is refused until one ends.",
        at_least=1,
    )
    max_request_json_bytes: int = setting(
        MiB,
        "bytes",
        "Bytes of a request's JSON: a JSON body, or a multipart request's `operations` and "
        "`map` fields (files aside); HTTP 413 above it.",
        at_least=1,
    )
    max_json_depth: int = setting(
        32,
        "levels",
        "Nesting of arrays and objects in a request's JSON (HTTP 400 deeper).",
        at_least=1,
    )
    max_query_tokens: int = setting(
        5000,
        "tokens",
        "Lexical tokens (names, punctuation) and comments of one GraphQL query.",
        at_least=1,
    )
    max_query_depth: int = setting(
        8,
        "levels",
        "Nesting of fields in one GraphQL operation (the schema's deepest is 3), introspection "
        "included (`ofType` chains aside: the schema's type wrapping bounds them).",
        at_least=1,
    )
    max_query_aliases: int = setting(
        10,
        "aliases",
        "Aliased fields in one GraphQL request (100 aliases of one field are 100 queries).",
        at_least=1,
    )
    max_query_cost: int = setting(
        1000,
        "cost",
        "Cost of one GraphQL request: each field costs 1, a document's `importable` 10, "
        "times the `limit` of every `documents` page and the ids of `getJobs` around it; "
        "inside `__schema` and `__type`, each value of the reply (counted exactly from the "
        "schema). A request of introspection alone may cost up to the schema's full "
        "description (about 2,070), answered from a cache.",
        at_least=1,
    )
    header_timeout: float = setting(
        10.0,
        "seconds",
        "Seconds a request's line and headers may take to arrive; then HTTP 408 and the "
        "connection closed (one that sent nothing is just closed). No thread waits meanwhile.",
        above=0,
    )
    body_timeout: float = setting(
        30.0,
        "seconds",
        "Seconds a request body may take to arrive, plus 1 s per `BODY_MIN_RATE` bytes "
        "received; then HTTP 408 and the connection closed.",
        above=0,
    )
    body_min_rate: int = setting(
        100_000,
        "bytes/s",
        "Bytes per second an upload at least this fast never times out (200 MiB: 30 s + "
        "2,097 s); a body dribbled slower gets its 408 after about `BODY_TIMEOUT`.",
        at_least=1,
    )
    send_timeout: float = setting(
        30.0,
        "seconds",
        "Seconds a client may take to read a reply, plus 1 s per `BODY_MIN_RATE` bytes of it; "
        "then the connection is closed and the thread serving it freed.",
        above=0,
    )
    keepalive_timeout: int = setting(
        75,
        "seconds",
        "Seconds an idle kept-alive connection waits for the client's next request (it holds no "
        "thread meanwhile). Longer than common clients' and proxies' own idle limits (httpx "
        "5 s, nginx upstream 60 s), so they close first instead of sending a request into a "
        "connection being closed.",
        above=0,
    )
    max_pending_connections: int = setting(
        256,
        "requests",
        "Requests one server process may be receiving at once (bodies spooled in memory up to "
        "64 KiB, then in an unlinked temporary file); a connection beyond them gets HTTP 503.",
        at_least=1,
    )
    max_documents_page: int = setting(
        20,
        "documents",
        "Most documents one `documents(offset, limit)` page returns (its default `limit`).",
        at_least=1,
    )
    max_tags_per_owner: int = setting(
        1000,
        "tags",
        "Tags one user keeps (personal), and one team keeps: their lists are not paged, so this "
        "bounds `getPersonalTags`, `getTags` and a project's `tags`.",
        at_least=1,
    )
    max_custom_apis_per_team: int = setting(
        100, "APIs", "Custom APIs one team keeps (`getCustomAPIs` is not paged).", at_least=1
    )
    max_reply_bytes: int = setting(
        32 * MiB,
        "bytes",
        "Bytes of documents (`importable`, counted as stored) one GraphQL reply may carry; a "
        "request asking for more is refused whole before any document is read. Documents are "
        "copied into the reply as stored, in pieces (1 MiB on SQLite, 8 MiB on PostgreSQL), so "
        "a request holds at most one piece in memory, whatever its reply size.",
        at_least=1,
    )

    # -- replies of customers' APIs (issue 18): measured on the raw text before parsing ---------
    # Parsed JSON costs up to ~70 MB per million values (empty lists or objects), whatever its
    # size in bytes; a document at the line and token limits is ~1.05 million values (59 MB).
    max_api_reply_depth: int = setting(
        32,
        "levels",
        "Nesting of arrays and objects in a JSON reply of a custom extraction or prediction API "
        "(a prediction reply's deepest is 7), measured before the reply is parsed.",
        at_least=1,
    )
    max_api_reply_number_chars: int = setting(
        64, "characters", "Characters of one number in such a reply.", at_least=1
    )
    max_extraction_reply_values: int = setting(
        1_500_000,
        "values",
        "Values (scalars, arrays, objects and keys) in one JSON reply of a custom extraction "
        "API, counted before it is parsed (a document at the line and token limits has ~1.05 "
        "million).",
        at_least=1,
    )
    max_prediction_reply_values: int = setting(
        500_000,
        "values",
        "Values in one reply of a prediction API, counted before it is parsed (50,000 "
        "sentences with 20,000 entities are ~470,000).",
        at_least=1,
    )
    max_prediction_string_chars: int = setting(
        1000,
        "characters",
        "Characters of one string (label name, id, key) in a prediction API's reply.",
        at_least=1,
    )
    max_prediction_entities: int = setting(
        20_000,
        "entities",
        "Entities in one prediction API reply (one batch); the job fails above it.",
        at_least=1,
    )
    max_document_labels: int = setting(
        20_000,
        "labels",
        "Labels one document may hold: an auto-labeling batch whose predictions would take its "
        "document past it fails the job, naming the document (labels already held are counted "
        "by the database, not loaded).",
        at_least=1,
    )
    max_project_labels: int = setting(
        100_000,
        "labels",
        "Labels all the documents of one project may hold together, checked likewise; also "
        "what one auto-labeling delivery may add at most.",
        at_least=1,
    )

    @property
    def resolved_database_url(self) -> str:
        """The database URL in force: the explicit one, else SQLite inside the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'labeling.db').resolve()}"
