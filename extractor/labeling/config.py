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


def _setting(default: Any, help: str) -> Any:
    """A field whose ``help`` generates its row of the limits table (:func:`limits_table`)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class LabelingSettings:
    """Everything the labeling server and its workers can be told; defaults suit one machine."""

    # Where the embedded SQLite database lives when DATABASE_URL is not given.
    data_dir: Path = Path("./data")
    # SQLAlchemy URL; empty means sqlite:///<data_dir>/labeling.db. PostgreSQL to scale out.
    database_url: str = ""
    # Comma-separated [http|https://]HOST[:PORT|:*] entries outbound calls may reach although
    # private or loopback (extractor.net.ssrf has the syntax); ':*' is every port, only if written.
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
    # Job fairness and deadlines (issue 11). The most of the running jobs one team (or one
    # user's personal jobs) may hold while another team's job waits; above it, its auto-labeling
    # jobs hand their worker over at the next batch, checkpoint kept. 1 turns preemption off.
    job_tenant_share: float = 0.5
    # seconds of worker time one job may use over all its runs; past it the job ends FAILED
    job_deadline_seconds: float = 7200.0
    # seconds to resolve and connect to a prediction API (custom extractors keep OUTBOUND_*)
    prediction_connect_timeout: float = 10.0
    # seconds a prediction API may stay silent mid-reply, for one batch
    prediction_read_timeout: float = 60.0
    # seconds for one whole prediction call: attempts, redirects and backoff waits together;
    # also the longest a stopping worker waits for a batch in flight
    prediction_total_timeout: float = 120.0
    # Run Alembic migrations when `serve`, `worker` or `add-user` start.
    auto_migrate: bool = True
    # Serve Prometheus metrics at GET /metrics (job counts, claim latency, outbound outcomes).
    metrics: bool = True
    # Comma-separated Fernet keys sealing custom API secrets at rest: the first encrypts, all
    # decrypt (rotation). Empty: SQLite generates <data_dir>/secret-keys; other databases can't
    # store secrets.
    secret_keys: str = field(default="", repr=False)
    # days a bearer token stays valid after it was issued (also for tokens issued before a
    # change); 0 keeps tokens until they are revoked
    token_lifetime_days: float = 0.0

    # -- limits and multi-tenancy (issue 11): one tenant cannot exhaust the others' server ------
    # A project job holds its documents until delivery. Measured: a project at the defaults
    # (two documents of 50,000 lines of 10 tokens) grows the worker by 115 MB and makes 20 MB of
    # JSON; the issue's `"a\n" * 10**6` (2 MB) would have grown it by 459 MB.
    max_document_bytes: int = _setting(
        10 * 1024 * 1024,
        "Bytes of one TOKEN_BASED text file, checked when the upload is received.",
    )
    max_document_lines: int = _setting(
        50_000,
        "Non-empty lines (cells) of one document: checked on upload for text files, "
        "and on the extraction API's reply for OCR and AUDIO.",
    )
    max_document_tokens: int = _setting(
        500_000, "Tokens (whitespace-separated words) of one document, checked like lines."
    )
    max_project_documents: int = _setting(500, "Files in one `createProject` request.")
    max_project_bytes: int = _setting(
        50 * 1024 * 1024, "Bytes of all the text files of one TOKEN_BASED project together."
    )
    max_project_lines: int = _setting(
        100_000, "Non-empty lines of all the documents of one project together."
    )
    max_project_tokens: int = _setting(
        1_000_000, "Tokens of all the documents of one project together."
    )
    max_queued_jobs_per_user: int = _setting(
        20, "Unfinished (queued or running) jobs one user may have; more is refused until one ends."
    )
    max_request_json_bytes: int = _setting(
        1024 * 1024,
        "Bytes of a request's JSON: a JSON body, or a multipart request's `operations` and "
        "`map` fields (files aside); HTTP 413 above it.",
    )
    max_json_depth: int = _setting(
        32, "Nesting of arrays and objects in a request's JSON (HTTP 400 deeper)."
    )
    max_query_tokens: int = _setting(
        5000, "Lexical tokens (names, punctuation) and comments of one GraphQL query."
    )
    max_query_depth: int = _setting(
        8,
        "Nesting of fields in one GraphQL operation (the schema's deepest is 3), introspection "
        "included (`ofType` chains aside: the schema's type wrapping bounds them).",
    )
    max_query_aliases: int = _setting(
        10, "Aliased fields in one GraphQL request (100 aliases of one field are 100 queries)."
    )
    max_query_cost: int = _setting(
        1000,
        "Cost of one GraphQL request: each field costs 1, a document's `importable` 10, "
        "times the `limit` of every `documents` page and the ids of `getJobs` around it; "
        "inside `__schema` and `__type`, each value of the reply (counted exactly from the "
        "schema). A request of introspection alone may cost up to the schema's full "
        "description (about 2,070), answered from a cache.",
    )
    # -- slow clients (issue 18): requests arrive whole before a request thread sees them -------
    header_timeout: float = _setting(
        10.0,
        "Seconds a request's line and headers may take to arrive; then HTTP 408 and the "
        "connection closed (one that sent nothing is just closed). No thread waits meanwhile.",
    )
    body_timeout: float = _setting(
        30.0,
        "Seconds a request body may take to arrive, plus 1 s per `BODY_MIN_RATE` bytes "
        "received; then HTTP 408 and the connection closed.",
    )
    body_min_rate: int = _setting(
        100_000,
        "Bytes per second an upload at least this fast never times out (200 MiB: 30 s + "
        "2,097 s); a body dribbled slower gets its 408 after about `BODY_TIMEOUT`.",
    )
    send_timeout: float = _setting(
        30.0,
        "Seconds a client may take to read a reply, plus 1 s per `BODY_MIN_RATE` bytes of it; "
        "then the connection is closed and the thread serving it freed.",
    )
    keepalive_timeout: int = _setting(
        75,
        "Seconds an idle kept-alive connection waits for the client's next request (it holds no "
        "thread meanwhile). Longer than common clients' and proxies' own idle limits (httpx "
        "5 s, nginx upstream 60 s), so they close first instead of sending a request into a "
        "connection being closed.",
    )
    max_pending_connections: int = _setting(
        256,
        "Requests one server process may be receiving at once (bodies spooled in memory up to "
        "64 KiB, then in an unlinked temporary file); a connection beyond them gets HTTP 503.",
    )
    max_documents_page: int = _setting(
        20, "Most documents one `documents(offset, limit)` page returns (its default `limit`)."
    )
    max_tags_per_owner: int = _setting(
        1000,
        "Tags one user keeps (personal), and one team keeps: their lists are not paged, so this "
        "bounds `getPersonalTags`, `getTags` and a project's `tags`.",
    )
    max_custom_apis_per_team: int = _setting(
        100, "Custom APIs one team keeps (`getCustomAPIs` is not paged)."
    )
    max_reply_bytes: int = _setting(
        32 * 1024 * 1024,
        "Bytes of documents (`importable`, counted as stored) one GraphQL reply may carry; a "
        "request asking for more is refused whole before any document is read. Documents are "
        "copied into the reply as stored, in pieces (1 MiB on SQLite, 8 MiB on PostgreSQL), so "
        "a request holds at most one piece in memory, whatever its reply size.",
    )

    # -- replies of customers' APIs (issue 18): measured on the raw text before parsing ---------
    # Parsed JSON costs up to ~70 MB per million values (empty lists or objects), whatever its
    # size in bytes; a document at the line and token limits is ~1.05 million values (59 MB).
    max_api_reply_depth: int = _setting(
        32,
        "Nesting of arrays and objects in a JSON reply of a custom extraction or prediction API "
        "(a prediction reply's deepest is 7), measured before the reply is parsed.",
    )
    max_api_reply_number_chars: int = _setting(64, "Characters of one number in such a reply.")
    max_extraction_reply_values: int = _setting(
        1_500_000,
        "Values (scalars, arrays, objects and keys) in one JSON reply of a custom extraction "
        "API, counted before it is parsed (a document at the line and token limits has ~1.05 "
        "million).",
    )
    max_prediction_reply_values: int = _setting(
        500_000,
        "Values in one reply of a prediction API, counted before it is parsed (50,000 "
        "sentences with 20,000 entities are ~470,000).",
    )
    max_prediction_string_chars: int = _setting(
        1000, "Characters of one string (label name, id, key) in a prediction API's reply."
    )
    max_prediction_entities: int = _setting(
        20_000, "Entities in one prediction API reply (one batch); the job fails above it."
    )
    max_document_labels: int = _setting(
        20_000,
        "Labels one document may hold: an auto-labeling batch whose predictions would take its "
        "document past it fails the job, naming the document (labels already held are counted "
        "by the database, not loaded).",
    )
    max_project_labels: int = _setting(
        100_000,
        "Labels all the documents of one project may hold together, checked likewise; also "
        "what one auto-labeling delivery may add at most.",
    )

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


def setting_variable(name: str) -> str:
    """The environment variable of the setting ``name``, as errors name a limit to the user."""
    return ENV_PREFIX + name.upper()


def limits_table() -> str:
    """The Markdown table of every setting declared with a help text, for both READMEs."""
    defaults = LabelingSettings()
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for spec in fields(LabelingSettings):
        if "help" in spec.metadata:
            default = getattr(defaults, spec.name)
            rows.append(
                f"| `{setting_variable(spec.name)}` | `{default}` | {spec.metadata['help']} |"
            )
    return "\n".join(rows) + "\n"


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
