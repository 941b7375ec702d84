"""Every error a client can cause: a clear JSON error with the right status, never a 500."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest
from support import post_file, requires_espeak

from extractor import samples
from extractor.asr.loaded_models import LoadedModels


def error_of(reply: Any) -> tuple[int, str]:
    assert reply.mimetype == "application/json"
    body = reply.get_json()
    assert set(body) == {"error"} and body["error"]["message"]
    return reply.status_code, body["error"]["code"]


@pytest.fixture
def png(page_one: samples.TextPage) -> bytes:
    return samples.encode_image(page_one.image, "PNG")


def test_no_upload_field(client: Any) -> None:
    reply = client.post("/extract", data={"file": (io.BytesIO(b"x"), "a.png")})
    assert error_of(reply) == (400, "missing_upload")
    assert "'upload'" in reply.get_json()["error"]["message"]
    assert "file" in reply.get_json()["error"]["message"]


def test_not_multipart(client: Any) -> None:
    assert error_of(client.post("/extract", data=b"raw", content_type="image/png")) == (
        400,
        "missing_upload",
    )


def test_empty_upload(client: Any) -> None:
    assert error_of(post_file(client, b"", "empty.png")) == (400, "empty_upload")


@pytest.mark.parametrize(
    "data",
    [
        b"just some text, not a document\n",
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 64,  # a PNG signature and nothing valid behind it
        b"%PDF-1.7\n%garbage that is no PDF",
        b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\xff" * 40,
        b"fLaC" + b"\x00" * 100,
        b"\xff\xd8\xff\xe0" + b"\x00" * 50,
        b"GIF89a\x01\x00",
    ],
    ids=[
        "text",
        "png-header-only",
        "pdf-garbage",
        "wav-garbage",
        "flac-garbage",
        "jpeg-garbage",
        "gif-cut",
    ],
)
def test_undecodable_files_are_415(client: Any, data: bytes) -> None:
    assert error_of(post_file(client, data)) == (415, "unsupported_media_type")


def test_truncated_png_is_415(client: Any, png: bytes) -> None:
    assert error_of(post_file(client, png[: len(png) // 2])) == (415, "unsupported_media_type")


def test_audio_file_without_audio_track_is_415(client: Any) -> None:
    import av
    import numpy as np

    buffer = io.BytesIO()
    with av.open(buffer, "w", format="webm") as container:  # a video-only WebM
        stream = container.add_stream("libvpx", rate=5)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        for _ in range(5):
            frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    assert error_of(post_file(client, buffer.getvalue()))[0] == 415


def test_over_the_size_limit_is_413(make_app: Any, png: bytes) -> None:
    client = make_app(max_upload_bytes=1000).test_client()
    assert error_of(post_file(client, png)) == (413, "payload_too_large")


def test_too_many_pages_is_413(make_app: Any, page_one: samples.TextPage) -> None:
    client = make_app(max_pages=2).test_client()
    tiff = samples.multipage_tiff([page_one, page_one, page_one])
    assert error_of(post_file(client, tiff)) == (413, "too_many_pages")
    assert error_of(post_file(client, samples.pdf([page_one] * 3))) == (413, "too_many_pages")


@requires_espeak
def test_audio_too_long_is_413(make_app: Any, speech_wav: bytes) -> None:
    client = make_app(max_audio_seconds=1).test_client()
    assert error_of(post_file(client, speech_wav)) == (413, "audio_too_long")


def test_decompression_bomb_is_413(client: Any) -> None:
    from PIL import Image

    huge = Image.new("1", (20000, 10000), 1)  # 200 megapixels, a few kB as PNG
    assert error_of(post_file(client, samples.encode_image(huge, "PNG"))) == (
        413,
        "payload_too_large",
    )


def test_nothing_acceptable_is_406(client: Any, png: bytes) -> None:
    reply = post_file(client, png, accept="text/html, application/xml;q=0.9")
    assert error_of(reply) == (406, "not_acceptable")
    assert "application/json" in reply.get_json()["error"]["message"]


def test_subtitles_for_an_image_are_406(client: Any, png: bytes) -> None:
    assert error_of(post_file(client, png, accept="text/vtt")) == (406, "not_acceptable")


@pytest.mark.parametrize(
    "query",
    ["?format=xml", "?format=vtt", "?speakers=diarize", "?language=english!", "?words=maybe"],
)
def test_bad_parameters_are_400(client: Any, png: bytes, query: str) -> None:
    assert error_of(post_file(client, png, query=query)) == (400, "invalid_parameter")


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", "Basic czNjcmV0", "Bearer", "bearer s3cret-but-longer"],
)
def test_secret_is_required_when_set(make_app: Any, png: bytes, authorization: str | None) -> None:
    client = make_app(secret="s3cret").test_client()
    headers = {"Authorization": authorization} if authorization else {}
    reply = post_file(client, png, headers=headers)
    assert error_of(reply) == (401, "unauthorized")
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")


def test_right_secret_is_let_through(make_app: Any, png: bytes) -> None:
    client = make_app(secret="s3cret").test_client()
    assert post_file(client, png, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/healthz").status_code == 200  # health stays open for orchestrators


def test_unknown_path_and_method_are_json(client: Any) -> None:
    assert error_of(client.get("/nope"))[0] == 404
    reply = client.get("/extract")
    assert error_of(reply)[0] == 405 and "POST" in reply.headers["Allow"]


def test_engine_timeout_is_504(make_app: Any) -> None:
    """A real Tesseract run on a full page, given far less time than it needs, is killed."""
    page = samples.text_page(samples.a4_page_lines(), size=(2480, 3508), font_size=40)
    client = make_app(request_timeout=0.2).test_client()
    assert error_of(post_file(client, samples.encode_image(page.image, "PNG"))) == (
        504,
        "engine_timeout",
    )


def test_queue_bound_gives_503_with_retry_after(make_app: Any) -> None:
    """With one engine slot and no queue, a second request while the first runs is refused."""
    page = samples.text_page(samples.a4_page_lines(), size=(2480, 3508), font_size=40)
    data = samples.encode_image(page.image, "PNG")
    app = make_app(engine_slots=1, queue_size=0)
    first: dict[str, Any] = {}

    def slow() -> None:
        first["reply"] = post_file(app.test_client(), data)

    runner = threading.Thread(target=slow)
    runner.start()
    deadline = time.monotonic() + 30
    while app.extensions["extractor"].gate.pending == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = post_file(app.test_client(), data)
    runner.join(timeout=120)
    assert error_of(second) == (503, "busy")
    assert int(second.headers["Retry-After"]) > 0
    assert first["reply"].status_code == 200


def test_speech_engine_that_hangs_gives_504_and_the_worker_lives_on(
    make_app: Any, png: bytes
) -> None:
    """A hang the real engine cannot be made to produce on demand: the one fake in this file."""
    release = threading.Event()
    app = make_app(request_timeout=3, queue_size=4)
    extractor = app.extensions["extractor"]

    class HangingEngine:
        name, loaded = "hanging", True

        def load(self) -> None: ...

        def transcribe(self, audio: Any, options: Any) -> Any:
            release.wait(30)
            raise RuntimeError("released")

    extractor.models = LoadedModels(lambda _model: HangingEngine(), ("tiny.en",), 1)
    client = app.test_client()
    reply = post_file(client, samples.silence_and_noise(1))
    assert error_of(reply) == (504, "engine_timeout")
    release.set()
    assert post_file(client, png).status_code == 200  # the worker still serves


def test_language_the_model_cannot_transcribe_is_400(client: Any) -> None:
    """tiny.en only knows English: asking for German is the client's error, not a 500."""
    reply = post_file(client, samples.silence_and_noise(1), query="?language=de")
    assert error_of(reply) == (400, "invalid_parameter")
    assert "'de'" in reply.get_json()["error"]["message"]
    assert post_file(client, samples.silence_and_noise(1), query="?language=en").status_code == 200
