"""Limits of the labeling service (``EXTRACTOR_LABELING_MAX_*`` and the intake deadlines).

Declared apart from the rest of :class:`~extractor.config.labeling.LabelingSettings` (which
derives from :class:`LabelingLimits`) because they are a concern of their own: what one tenant's
requests, uploads and APIs may cost the others (issues 11 and 18). The README shows them in a
table of their own under "Limits and multi-tenancy"; errors name them with
``LabelingSettings.variable(name)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from extractor.config.fields import setting
from extractor.config.intake import IntakeSettings

MiB = 1024 * 1024


@dataclass(frozen=True)
class LabelingLimits(IntakeSettings):
    """What one tenant may send, store and make the service do; part of LabelingSettings."""

    env_prefix: ClassVar[str] = "EXTRACTOR_LABELING_"

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
