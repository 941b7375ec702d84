"""Issue 18, attacks 3-5: a prediction or extraction API's hostile JSON reply fails its job with
the reason (what, the limit, where), refused on the raw text before parsing builds it."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from labeling_support import (
    CELL_TEXT,
    LabelingServer,
    StartAPI,
    auto_label,
    capitalized_words_model,
    hostile_prediction_replies,
)

from extractor.config import LabelingSettings
from extractor.labeling.autolabel import Batch, parse_reply
from extractor.labeling.documents import cell, importable_from_reply
from extractor.labeling.errors import JobFailure
from extractor.labeling.reply_json import (
    ReplyRefused,
    extraction_limits,
    measure,
    parse_reply_json,
    prediction_limits,
)

MB = 1024 * 1024
SETTINGS = LabelingSettings()
PREDICTION = prediction_limits(SETTINGS)


def refusal(content: bytes) -> ReplyRefused:
    with pytest.raises(ReplyRefused) as caught:
        parse_reply_json(content, PREDICTION, "the prediction API")
    return caught.value


def job_reason(content: bytes) -> JobFailure:
    """What a job fed ``content`` by its prediction API fails with (scan, parse, validation)."""
    batch = Batch("d1", "a.txt", [cell(0, CELL_TEXT) or {}])
    with pytest.raises(JobFailure) as caught:
        reply = parse_reply_json(content, PREDICTION, "the prediction API")
        parse_reply(reply, batch, "x@example.com", 1, SETTINGS.max_prediction_entities)
    return caught.value


@pytest.mark.parametrize("scale", [1, 2])
@pytest.mark.parametrize("shape", sorted(hostile_prediction_replies(1)))
def test_each_hostile_prediction_reply_fails_with_its_reason(shape: str, scale: int) -> None:
    """Every shape of the issue, and the same scaled 2x, fails saying what was wrong and where
    (and which limit, when one was crossed)."""
    content, reason = hostile_prediction_replies(scale)[shape]
    failure = job_reason(content)
    assert reason in failure.message, failure.message
    assert " at " in failure.message and failure.details["path"]
    if "limit" in failure.details:
        assert failure.details["limit"].startswith("EXTRACTOR_LABELING_")
        assert failure.details["limit"] in failure.message


@pytest.mark.slow  # seconds of CPU each: make test runs it, make test-fast leaves it out
@pytest.mark.parametrize("shape", ["empty-lists", "huge-string", "deep-objects"])
def test_the_scan_allocates_nothing_that_grows_with_the_reply(shape: str) -> None:
    """Refused by the scan, a reply costs its decoded text and next to nothing more."""
    content, _ = hostile_prediction_replies(1)[shape]
    tracemalloc.start()
    try:
        refusal(content)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(content) + 2 * MB, f"{shape}: {peak / MB:.1f} MB"


def test_the_path_names_where_the_limit_was_crossed() -> None:
    deep = b'{"documents": [{"id": "d", "labels": ' + b"[" * 40 + b"]" * 40 + b"}]}"
    refused = refusal(deep)
    assert refused.details["path"] == "documents/0/labels" + "/0" * 29
    assert refused.details == {
        "path": "documents/0/labels" + "/0" * 29,
        "limit": "EXTRACTOR_LABELING_MAX_API_REPLY_DEPTH",
        "maximum": 32,
    }
    assert "nested too deeply at documents/0/labels/0/0" in refused.message
    assert refusal(b'{"documents": [], "documents": []}').details["path"] == "documents"
    assert "repeating a key" in refusal(b'{"a": 1, "\\u0061": 2}').message


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('"\\ud800"', "unpaired UTF-16 surrogate"),
        ('"\\udc00\\ud800"', "unpaired UTF-16 surrogate"),
        ('{"\\ud83d": 1}', "unpaired UTF-16 surrogate"),
        ("[1, 2", "invalid JSON"),
        ("[1,]", "invalid JSON"),
        ("NaN", "invalid JSON"),
        ("[1] [2]", "invalid JSON"),
        ("1" * 65, "number too long"),
        ("[" + "1" * 60 + ".5e+10" + "]", "number too long"),
    ],
)
def test_what_json_loads_would_let_through_or_choke_on(text: str, reason: str) -> None:
    assert reason in refusal(text.encode()).message


def test_valid_json_passes_the_scan_unchanged() -> None:
    """The scan agrees with ``json.loads`` on every valid document it is shown."""
    samples: list[Any] = [
        {},
        [],
        0,
        -1.5e-300,
        'a\\"b\u2028\U0001f600',
        {"documents": [{"id": "d", "labels": [{"id": 0, "entities": []}]}], "id": 7},
        [[[[]]], {"": None, "x": [True, False]}],
    ]
    for value in samples:
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=2)):
            measure(text, PREDICTION, "the prediction API")
            assert parse_reply_json(text.encode(), PREDICTION, "x") == value
    assert parse_reply_json(b"\xef\xbb\xbf[1]", PREDICTION, "x") == [1]  # a UTF-8 BOM
    assert "not UTF-8" in refusal(b'"\xff"').message


def entities(count: int) -> dict[str, Any]:
    entity = {"label": "PER", "start_char": 0, "end_char": 4}
    return {"documents": [{"id": "d1", "labels": [{"id": 0, "entities": [entity] * count}]}]}


def test_entities_past_the_limit_fail_the_batch() -> None:
    batch = Batch("d1", "a.txt", [cell(0, CELL_TEXT) or {}])
    assert len(parse_reply(entities(50), batch, "x@example.com", 1, 50)) == 50
    with pytest.raises(JobFailure) as caught:
        parse_reply(entities(51), batch, "x@example.com", 3, 50)
    assert caught.value.details == {
        "batch": 3,
        "path": "documents/0/labels/0/entities/50",
        "limit": "EXTRACTOR_LABELING_MAX_PREDICTION_ENTITIES",
        "maximum": 50,
    }


def test_validation_stops_at_the_first_error() -> None:
    """300,000 empty entities are 300,000 schema errors; one is reported, none is collected."""
    batch = Batch("d1", "a.txt", [cell(0, CELL_TEXT) or {}])
    reply = {"documents": [{"id": "d1", "labels": [{"id": 0, "entities": [{}] * 300_000}]}]}
    tracemalloc.start()
    try:
        with pytest.raises(JobFailure, match="malformed: at documents/0/labels/0/entities/0"):
            parse_reply(reply, batch, "x@example.com", 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * MB, f"{peak / MB:.1f} MB"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"cells": [' + b"[]," * 2_000_000 + b"[]]}", "too many values"),
        (b'{"name": "' + b"a" * (11 * MB) + b'"}', "string too long"),
    ],
    ids=["deep", "lists", "string"],
)
def test_an_extractors_json_reply_is_measured_too(content: bytes, reason: str) -> None:
    with pytest.raises(ReplyRefused, match=reason) as caught:
        importable_from_reply(
            "scan.png", "OCR", "application/json", content, limits=extraction_limits(SETTINGS)
        )
    assert caught.value.details["document"] == "scan.png"


def test_recursion_and_memory_errors_of_the_parser_are_a_reason_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within the limits the parser cannot recurse too deep, but if it ever did, the job would
    still say what happened rather than "internal error"."""

    def explode(_: str) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    raising: Callable[[str], Any] = explode
    monkeypatch.setattr("extractor.labeling.reply_json.json.loads", raising)
    assert "cannot be parsed (RecursionError)" in refusal(b"[[1]]").message


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(hostile_prediction_replies(1)))
def test_a_hostile_reply_fails_that_job_with_its_reason(
    server: LabelingServer, fake_api: StartAPI, shape: str
) -> None:
    """Over real HTTP, through the worker: the job ends FAILED with the reason in its errors
    (never "internal error"), no label is written, and the server goes on serving."""
    user = server.user("Acme")
    project_id = server.token_project(user, [CELL_TEXT])
    project = server.project(user.token, project_id)
    assert project is not None
    document_id = project["documents"][0]["id"]
    content, reason = hostile_prediction_replies(1, document_id)[shape]
    model = fake_api(lambda _: (200, {"Content-Type": "application/json"}, content))
    job_id = auto_label(server, user, project_id, model.url)
    done = server.wait_job(user.token, job_id, timeout=120)
    assert done["status"] == "FAILED", done
    (error,) = done["errors"]
    assert reason in error["stack"] and "internal error" not in error["stack"], error["stack"]
    assert error["args"]["path"], error
    project = server.project(user.token, project_id)
    assert project is not None and project["documents"][0]["importable"]["labels"] == []


def test_labels_per_document_and_project_are_capped_counting_those_already_held(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    """A model may not grow a document (or a project) without end: the labels a document holds
    already, counted by the database, plus the new ones stay within the limits, else the job
    fails naming the document and the limit, and writes nothing."""
    server = make_server(max_document_labels=6, max_project_labels=9)
    user = server.user("Acme")
    model = fake_api(capitalized_words_model)
    project_id = server.token_project(user, ["Ann Bob Cy", "Dee"], name="people.txt")

    def run() -> dict[str, Any]:
        return server.wait_job(user.token, auto_label(server, user, project_id, model.url))

    assert run()["status"] == "DELIVERED"  # 4 labels
    failed = run()  # 4 + 4 > 6
    assert failed["status"] == "FAILED", failed
    (error,) = failed["errors"]
    assert "would give 'people.txt' 7 labels, more than 6" in error["stack"], error
    assert error["args"]["limit"] == "EXTRACTOR_LABELING_MAX_DOCUMENT_LABELS"
    assert error["args"]["document"] == "people.txt"
    project = server.project(user.token, project_id)
    assert project is not None and len(project["documents"][0]["importable"]["labels"]) == 4

    other = server.token_project(user, ["Eve Fay Gus Hal Ida Jo"])  # 6 labels: at the limit
    assert server.wait_job(user.token, auto_label(server, user, other, model.url))["status"] == (
        "DELIVERED"
    )


def test_labels_per_project_are_capped(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    server = make_server(max_document_labels=100, max_project_labels=5)
    user = server.user("Acme")
    model = fake_api(capitalized_words_model)
    project_id = server.token_project(user, ["Ann Bob Cy", "Dee Eve Fay"])
    failed = server.wait_job(user.token, auto_label(server, user, project_id, model.url))
    assert failed["status"] == "FAILED", failed
    assert failed["errors"][0]["args"]["limit"] == "EXTRACTOR_LABELING_MAX_PROJECT_LABELS"
