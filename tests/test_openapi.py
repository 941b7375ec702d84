"""The OpenAPI document is valid, matches the app's routes, and describes every real reply.

Each reply here comes from the real app with real engines on inputs made by ``samples``, and
each error status is made to really happen, so the document cannot drift from the code.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import schemathesis
from flask import Flask
from flask.testing import FlaskClient
from referencing.jsonschema import DRAFT202012
from werkzeug.test import TestResponse

from extractor import samples
from extractor.web.app import create_app
from extractor.web.openapi import load_openapi

DOCUMENT = load_openapi()
DOCUMENT_URI = "urn:extractor:openapi"
REGISTRY: referencing.Registry[Any] = referencing.Registry().with_resource(
    DOCUMENT_URI, DRAFT202012.create_resource(DOCUMENT)
)
IGNORED_METHODS = {"HEAD", "OPTIONS"}  # Flask adds both to every route on its own


# -- the document itself ------------------------------------------------------------------


def _walk(node: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    yield pointer, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{pointer}/{_escape(key)}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{pointer}/{i}")


def _escape(token: object) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def _at(pointer: str) -> Any:
    """The node at a document-local JSON pointer (``#/a/b``)."""
    return REGISTRY.resolver(DOCUMENT_URI).lookup(f"{DOCUMENT_URI}{pointer}").contents


def test_document_is_valid_openapi_3_1() -> None:
    # Schemathesis carries the OpenAPI 3.1 meta-schema; it does not check the Schema Objects,
    # so each of those is checked against JSON Schema 2020-12 below.
    schemathesis.openapi.from_dict(load_openapi()).validate()
    assert DOCUMENT["openapi"].startswith("3.1.")
    media_schemas = [
        node["schema"]
        for pointer, node in _walk(DOCUMENT)
        if isinstance(node, dict) and "schema" in node and "/content/" in pointer
    ]
    assert media_schemas
    for schema in [*DOCUMENT["components"]["schemas"].values(), *media_schemas]:
        jsonschema.Draft202012Validator.check_schema(schema)


def test_every_reference_resolves_inside_the_document() -> None:
    refs = [
        node["$ref"] for _p, node in _walk(DOCUMENT) if isinstance(node, dict) and "$ref" in node
    ]
    assert refs
    for ref in refs:
        assert ref.startswith("#/"), f"{ref}: the served document must be self-contained"
        _at(ref)  # raises when the pointer leads nowhere


def test_importable_schema_is_the_contract_file() -> None:
    """The inlined schema accepts and rejects exactly what the contract file does."""
    importable = DOCUMENT["components"]["schemas"]["Importable"]
    assert "$id" not in importable
    assert importable["$defs"].keys() >= {"cell", "boundingBoxLabel", "timestampLabel"}
    refs = [n["$ref"] for _p, n in _walk(importable) if isinstance(n, dict) and "$ref" in n]
    assert all(r.startswith("#/components/schemas/Importable/$defs/") for r in refs)


def test_document_paths_are_the_app_routes() -> None:
    """Every route the app serves is documented, and every documented operation is served."""
    app = create_app()
    served = {
        (rule.rule.replace("<path:", "{").replace("<", "{").replace(">", "}"), method.lower())
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in IGNORED_METHODS
    }
    documented = {
        (path, method)
        for path, item in DOCUMENT["paths"].items()
        for method in item
        if method in {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
    }
    assert served == documented


def test_served_document_is_the_yaml_with_files_inlined(client: FlaskClient) -> None:
    reply = client.get("/openapi.json")
    conforms(reply, "/openapi.json", "get")
    assert reply.get_json() == load_openapi()


# -- every real reply conforms --------------------------------------------------------------


def conforms(reply: TestResponse, path: str, method: str) -> None:
    """Assert that the document lists ``reply``'s status, content type, headers and body."""
    responses = DOCUMENT["paths"][path][method]["responses"]
    status = str(reply.status_code)
    assert status in responses, f"{method.upper()} {path} answered an undocumented {status}"
    pointer = f"#/paths/{_escape(path)}/{method}/responses/{status}"
    spec = responses[status]
    if "$ref" in spec:
        pointer, spec = spec["$ref"], _at(spec["$ref"])
    content = spec["content"]
    media_type = reply.mimetype
    key = media_type if media_type in content else "*/*"
    assert key in content, f"{status} with undocumented content type {media_type}"
    body: Any = reply.get_json() if media_type == "application/json" else reply.get_data(True)
    schema = {"$ref": f"{DOCUMENT_URI}{pointer}/content/{_escape(key)}/schema"}
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(body)
    for name, header in spec.get("headers", {}).items():
        if "$ref" in header:
            header = _at(header["$ref"])
        value = reply.headers.get(name)
        if header.get("required"):
            assert value is not None, f"{status} lacks the required header {name}"
        if value is not None:
            typed: Any = int(value) if header["schema"].get("type") == "integer" else value
            jsonschema.Draft202012Validator(header["schema"]).validate(typed)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The apps' temp dir; no request may leave anything in it."""
    path = tmp_path_factory.mktemp("requests")
    yield path
    assert list(path.iterdir()) == [], "a request left temporary files behind"


@pytest.fixture(scope="module")
def make_app(scratch: Path) -> Iterator[Callable[..., Flask]]:
    apps: list[Flask] = []

    def build(**overrides: Any) -> Flask:
        app = create_app({"tmp_dir": str(scratch), **overrides})
        app.testing = True
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.extensions["extractor"].close()


@pytest.fixture(scope="module")
def client(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app().test_client()


@pytest.fixture(scope="module")
def page() -> samples.TextPage:
    return samples.text_page(["Invoice 4417 for garden tools", "Harbor Street"], size=(760, 240))


@pytest.fixture(scope="module")
def png(page: samples.TextPage) -> bytes:
    return samples.encode_image(page.image, "PNG")


@pytest.fixture(scope="module")
def wav() -> bytes:
    if not samples.have_espeak():
        pytest.skip("espeak-ng is not installed")
    return samples.speech("The weather is sunny today", "wav")


def post(
    client: FlaskClient, data: bytes | None, *, name: str = "upload.bin", query: str = "",
    accept: str | None = "application/json, text/plain", headers: dict[str, str] | None = None,
) -> TestResponse:  # fmt: skip
    """POST like the platform: the file in the multipart field ``upload``."""
    sent = dict(headers or {})
    if accept is not None:
        sent["Accept"] = accept
    form = {} if data is None else {"upload": (io.BytesIO(data), name)}
    return client.post(
        "/extract" + query, data=form, headers=sent, content_type="multipart/form-data"
    )


@pytest.mark.parametrize(
    ("accept", "query", "media_type"),
    [
        ("application/json", "", "application/json"),
        ("text/plain", "", "text/plain"),
        ("application/json, text/plain", "?format=text", "text/plain"),
        ("text/vnd.hocr+html", "", "text/vnd.hocr+html"),
        ("application/json", "?format=alto", "application/alto+xml"),
        ("text/tab-separated-values", "?ocr_languages=eng%2Bdeu", "text/tab-separated-values"),
    ],
)
def test_image_replies_conform(
    client: FlaskClient, png: bytes, accept: str, query: str, media_type: str
) -> None:
    reply = post(client, png, name="page.png", accept=accept, query=query)
    assert (reply.status_code, reply.mimetype) == (200, media_type)
    conforms(reply, "/extract", "post")
    assert "Invoice" in reply.get_data(True)


def test_pdf_reply_conforms(client: FlaskClient, page: samples.TextPage) -> None:
    reply = post(client, samples.pdf([page]), name="page.pdf", accept="application/json")
    assert (reply.status_code, reply.get_json()["type"]) == (200, "BOUNDING_BOX")
    conforms(reply, "/extract", "post")


@pytest.mark.parametrize(
    ("query", "media_type"),
    [
        ("", "application/json"),
        ("?format=text", "text/plain"),
        ("?format=vtt&words=true", "text/vtt"),
        ("?format=srt&language=en", "application/x-subrip"),
    ],
)
def test_audio_replies_conform(
    client: FlaskClient, wav: bytes, query: str, media_type: str
) -> None:
    reply = post(client, wav, name="speech.wav", query=query)
    assert (reply.status_code, reply.mimetype) == (200, media_type)
    conforms(reply, "/extract", "post")


def test_bearer_secret_replies_conform(make_app: Callable[..., Flask], png: bytes) -> None:
    client = make_app(secret="s3cret").test_client()
    refused = post(client, png, name="page.png")
    assert refused.status_code == 401
    conforms(refused, "/extract", "post")
    wrong = post(client, png, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    allowed = post(client, png, name="page.png", headers={"Authorization": "Bearer s3cret"})
    assert allowed.status_code == 200
    conforms(allowed, "/extract", "post")


# What each error case uploads: made from the fixtures' page so every input is real.
UPLOADS: dict[str, Callable[[bytes], bytes | None]] = {
    "none": lambda png: None,
    "empty": lambda png: b"",
    "png": lambda png: png,
    "garbage": lambda png: b"\x00garbage" * 64,
    "truncated png": lambda png: png[: len(png) // 2],
    "over 1000 bytes": lambda png: png + bytes(100 * 1024),  # past the multipart slack too
    "two-page tiff": lambda png: samples.multipage_tiff(
        [samples.text_page(["one"], size=(200, 80)), samples.text_page(["two"], size=(200, 80))]
    ),
}


@pytest.mark.parametrize(
    ("upload", "request_options", "settings", "status", "code"),
    [
        pytest.param("none", {}, {}, 400, "missing_upload", id="no upload field"),
        pytest.param("empty", {}, {}, 400, "empty_upload", id="empty file"),
        pytest.param("png", {"query": "?language=klingon"}, {}, 400, "invalid_parameter",
                     id="bad language"),
        pytest.param("png", {"query": "?words=maybe"}, {}, 400, "invalid_parameter",
                     id="bad words flag"),
        pytest.param("png", {"query": "?speakers=diarize"}, {}, 400, "invalid_parameter",
                     id="bad speakers"),
        pytest.param("png", {"query": "?format=vtt"}, {}, 400, "invalid_parameter",
                     id="vtt for an image"),
        pytest.param("png", {"query": "?format=docx"}, {}, 400, "invalid_parameter",
                     id="unknown format"),
        pytest.param("png", {"accept": "image/png"}, {}, 406, "not_acceptable",
                     id="nothing acceptable"),
        pytest.param("png", {"accept": "text/vtt"}, {}, 406, "not_acceptable",
                     id="subtitles for an image"),
        pytest.param("png", {"query": "?ocr_languages=eng%2Bklingon"}, {}, 400,
                     "invalid_parameter", id="ocr language not installed"),
        pytest.param("png", {"query": "?ocr_languages=deu+eng"}, {"max_ocr_languages": 1}, 400,
                     "invalid_parameter", id="too many ocr languages"),
        pytest.param("garbage", {}, {}, 415, "unsupported_media_type", id="garbage bytes"),
        pytest.param("truncated png", {}, {}, 415, "unsupported_media_type", id="truncated png"),
        pytest.param("two-page tiff", {}, {"max_pages": 1}, 413, "too_many_pages",
                     id="too many pages"),
        pytest.param("over 1000 bytes", {}, {"max_upload_bytes": 1000}, 413,
                     "payload_too_large", id="over the size limit"),
        pytest.param("png", {}, {"secret": "s3cret"}, 401, "unauthorized", id="secret missing"),
        # A microsecond is less than any Tesseract run, so the gate's deadline always passes.
        pytest.param("png", {}, {"request_timeout": 1e-6}, 504, "engine_timeout",
                     id="engine timeout"),
    ],
)  # fmt: skip
def test_error_replies_conform(
    make_app: Callable[..., Flask], client: FlaskClient, png: bytes, upload: str,
    request_options: dict[str, Any], settings: dict[str, Any], status: int, code: str,
) -> None:  # fmt: skip
    target = make_app(**settings).test_client() if settings else client
    reply = post(target, UPLOADS[upload](png), name="upload.png", **request_options)
    assert (reply.status_code, reply.get_json()["error"]["code"]) == (status, code)
    conforms(reply, "/extract", "post")


def test_busy_reply_conforms(make_app: Callable[..., Flask], png: bytes) -> None:
    """With the only engine slot taken and no queue, the next request is a 503 at once."""
    app = make_app(engine_slots=1, queue_size=0)
    gate = app.extensions["extractor"].gate
    release = threading.Event()
    holder = threading.Thread(
        target=gate.run, args=(release.wait, time.monotonic() + 60, threading.Event())
    )
    holder.start()
    try:
        while gate.pending < 1:
            time.sleep(0.01)
        reply = post(app.test_client(), png, name="page.png")
    finally:
        release.set()
        holder.join()
    assert (reply.status_code, reply.get_json()["error"]["code"]) == (503, "busy")
    assert reply.headers["Retry-After"].isdigit()
    conforms(reply, "/extract", "post")


def test_engine_unavailable_reply_conforms(
    make_app: Callable[..., Flask], wav: bytes, tmp_path: Path
) -> None:
    client = make_app(asr_model=str(tmp_path / "no-such-model")).test_client()
    reply = post(client, wav, name="speech.wav")
    assert (reply.status_code, reply.get_json()["error"]["code"]) == (503, "engine_unavailable")
    conforms(reply, "/extract", "post")


def test_probe_replies_conform(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    client = app.test_client()
    conforms(client.get("/healthz"), "/healthz", "get")
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503  # engines are loaded after the fork, not at build
    conforms(not_ready, "/readyz", "get")
    app.extensions["extractor"].load()
    ready = client.get("/readyz")
    assert ready.status_code == 200
    conforms(ready, "/readyz", "get")


def test_page_replies_conform(client: FlaskClient) -> None:
    conforms(client.get("/"), "/", "get")
    conforms(client.get("/static/index.html"), "/static/{name}", "get")
    missing = client.get("/static/no-such-file.js")
    assert missing.status_code == 404
    conforms(missing, "/static/{name}", "get")
