"""What the conformance kit sends: samples made on the spot, posted the way the platform posts.

Every sample is generated at check time with ``extractor.samples`` (text drawn at known
positions, speech from espeak-ng), so the kit knows what a correct reply contains and needs no
file from anywhere. Each sample is posted once exactly as the platform does, then once more per
reply format the first answer did not give, so both the text and the JSON rules can be judged.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

import httpx

from .. import samples

log = logging.getLogger(__name__)

PLATFORM_ACCEPT = "application/json, text/plain"  # what the platform sends, verbatim
JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain"
CONNECT_TIMEOUT = 10.0  # seconds: an extractor that does not accept a connection by then is down


# -- samples ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OcrSample:
    """An image or PDF of drawn pages; ``pages`` hold every word's ink box in page pixels."""

    name: str  # the upload's file name
    media_type: str  # the multipart part's Content-Type
    data: bytes
    pages: tuple[samples.TextPage, ...]

    kind = "ocr"


@dataclass(frozen=True)
class AudioSample:
    """Spoken ``text`` in some container, and how long the speech lasts."""

    name: str
    media_type: str
    data: bytes
    text: str
    duration_ms: int

    kind = "audio"


Sample = OcrSample | AudioSample

# Plain dictionary words in a clear font: any working OCR reads them, so a miss is the
# extractor's. Distinct words per page keep the match between drawn and returned words unique.
PAGE_LINES = (
    (
        "Conformance check for text extraction",
        "Seven quiet wizards judge boxing matches",
        "Invoice 4821 dated March 2026",
    ),
    (
        "Harbor street warehouse inventory",
        "Yellow bicycles parked beside the library",
    ),
)
# Sentences the smallest English Whisper model hears right from espeak-ng's voice; each lasts
# over five seconds, so timestamps in seconds cannot pass for milliseconds.
SPOKEN = (
    ("wav", "audio/wav", "Every morning the farmer opens his shop at seven and sells fresh "
     "bread to the neighbors."),
    ("flac", "audio/flac", "The weather report says it will rain tomorrow afternoon, so please "
     "bring an umbrella."),
    ("mp3", "audio/mpeg", "Our team finished the project on time and the customer was very "
     "happy with the results."),
)  # fmt: skip


@functools.cache
def ocr_samples() -> tuple[OcrSample, ...]:
    """A one-page PNG, a two-page TIFF and a two-page PDF (rasterised at 150 dpi).

    Cached so that repeated runs in one process send identical bytes.
    """
    first = samples.text_page(list(PAGE_LINES[0]), page=0, font_size=40)
    # The second page's text starts further in, so a box that ignores its page is caught.
    second = samples.text_page(list(PAGE_LINES[1]), page=1, font_size=40, margin=300)
    return (
        OcrSample("page.png", "image/png", samples.encode_image(first.image, "PNG"), (first,)),
        OcrSample("pages.tiff", "image/tiff", samples.multipage_tiff([first, second]),
                  (first, second)),
        OcrSample("pages.pdf", "application/pdf", samples.pdf([first, second], dpi=150),
                  (first, second)),
    )  # fmt: skip


@functools.cache
def audio_samples() -> tuple[AudioSample, ...]:
    """A WAV, a FLAC and an MP3 of espeak-ng speech; needs ``espeak-ng`` (see ``audio_missing``)."""
    made = []
    for fmt, media_type, text in SPOKEN:
        wav = samples.speech_wav(text)
        pcm, rate = samples.decode_wav(wav)
        data = wav if fmt == "wav" else samples.encode_audio(pcm, rate, fmt)
        duration_ms = round(pcm.shape[1] * 1000 / rate)
        made.append(AudioSample(f"speech.{fmt}", media_type, data, text, duration_ms))
    return tuple(made)


def audio_missing() -> str | None:
    """Why speech samples cannot be made here, or None when they can."""
    if not samples.have_espeak():
        return "espeak-ng is not installed: it speaks the audio samples (apt-get install espeak-ng)"
    return None


def make_samples(kind: str) -> list[Sample]:
    """The samples ``--kind`` asks for; audio only when espeak-ng is present."""
    made: list[Sample] = []
    if kind in ("ocr", "all"):
        made.extend(ocr_samples())
    if kind in ("audio", "all") and audio_missing() is None:
        made.extend(audio_samples())
    return made


# -- replies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One HTTP exchange: what was asked and what came back (or why nothing came back)."""

    sample: str  # the upload's name, or what the request was for
    accept: str | None  # the Accept header sent
    status: int | None = None
    content_type: str = ""  # media type only, lower-case, without parameters
    charset: str | None = None
    body: bytes = b""
    error: str | None = None  # a transport failure: refused, timed out, reset

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def is_text(self) -> bool:
        return self.ok and self.content_type == TEXT_TYPE

    def describe(self) -> str:
        """``POST page.png (Accept: text/plain)``: which request a finding is about."""
        return f"POST {self.sample}" + (f" (Accept: {self.accept})" if self.accept else "")

    def excerpt(self, limit: int = 120) -> str:
        body = self.body.strip()
        text = body[:limit].decode("utf-8", "replace").replace("\n", "\\n")
        return (text + ("..." if len(body) > limit else "")) or "(empty body)"


def _media_type(header: str) -> tuple[str, str | None]:
    """``text/plain; charset=utf-8`` -> (``text/plain``, ``utf-8``)."""
    message = Message()
    message["Content-Type"] = header
    charset = message.get_param("charset")
    return (
        message.get_content_type() if header.strip() else "",
        charset if isinstance(charset, str) else None,
    )


@dataclass
class Transport:
    """Posts to one extractor URL with bounded timeouts; stops trying once it cannot connect."""

    url: str
    secret: str | None = None
    timeout: float = 120.0  # seconds per request: speech on a cold server can be slow
    client: httpx.Client = field(init=False)
    unreachable: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=min(CONNECT_TIMEOUT, self.timeout)),
            follow_redirects=False,
            # A fresh connection per request, as the platform's calls are independent: a
            # server that refuses an upload without reading it may drop a kept-alive one.
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def close(self) -> None:
        self.client.close()

    def post(
        self,
        what: str,
        *,
        accept: str | None,
        files: dict[str, tuple[str, bytes, str]] | None,
        authorization: str | bool | None = True,
    ) -> Reply:
        """POST multipart ``files``; ``authorization`` True sends the Bearer secret if any."""
        if self.unreachable:
            return Reply(what, accept, error=self.unreachable)
        headers = {}
        if accept is not None:
            headers["Accept"] = accept
        if authorization is True and self.secret:
            headers["Authorization"] = f"Bearer {self.secret}"
        elif isinstance(authorization, str):
            headers["Authorization"] = authorization
        request: dict[str, Any] = {"headers": headers}
        if files is None:
            # No file at all, but still a multipart form, as a broken platform call would be.
            request["files"] = {"note": (None, b"no upload here")}
        else:
            request["files"] = files
        try:
            response = self.client.post(self.url, **request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            self.unreachable = f"cannot connect to {self.url}: {exc}"
            return Reply(what, accept, error=self.unreachable)
        except httpx.TimeoutException as exc:
            return Reply(what, accept, error=f"no reply within {self.timeout:g} s ({exc!r})")
        except httpx.HTTPError as exc:
            return Reply(what, accept, error=f"{type(exc).__name__}: {exc}")
        content_type, charset = _media_type(response.headers.get("Content-Type", ""))
        return Reply(what, accept, response.status_code, content_type, charset, response.content)

    def post_sample(self, sample: Sample, accept: str | None) -> Reply:
        return self.post(
            sample.name, accept=accept, files={"upload": (sample.name, sample.data,
                                                           sample.media_type)},
        )  # fmt: skip


# -- one sample, every format -------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """Everything the extractor answered about one sample."""

    sample: Sample
    platform: Reply  # the request exactly as the platform sends it
    extra: tuple[Reply, ...]  # the same upload asking for one format at a time

    @property
    def replies(self) -> tuple[Reply, ...]:
        return (self.platform, *self.extra)

    def reply_in(self, media_type: str) -> Reply | None:
        """The first successful reply of ``media_type``, the platform's own first."""
        return next((r for r in self.replies if r.ok and r.content_type == media_type), None)

    def missing_reason(self, media_type: str) -> str:
        """Why there is no ``media_type`` reply to judge, for a SKIP's detail."""
        asked = [r for r in self.extra if r.accept == media_type]
        if any(r.error for r in self.replies):
            return "no reply to judge"
        if not any(r.ok for r in self.replies):
            return "no successful reply to judge"
        if asked and asked[0].status == 406:
            return f"the extractor does not offer {media_type} (406 to Accept: {media_type})"
        if asked and asked[0].ok:
            got = asked[0].content_type or "no Content-Type"
            return f"the extractor answers {got} even to Accept: {media_type}"
        return f"no {media_type} reply to judge"


def probe(transport: Transport, sample: Sample) -> Probe:
    """Post ``sample`` as the platform does, then ask for each format it did not get."""
    platform = transport.post_sample(sample, PLATFORM_ACCEPT)
    extra = []
    for wanted in (JSON_TYPE, TEXT_TYPE):
        if platform.error or (platform.content_type == wanted and platform.ok):
            continue
        extra.append(transport.post_sample(sample, wanted))
    return Probe(sample, platform, tuple(extra))


# -- the endpoint's error behaviour -------------------------------------------------------


@dataclass(frozen=True)
class EndpointReplies:
    """Answers to requests the platform relies on being refused."""

    missing_upload: Reply
    empty_upload: Reply
    no_secret: Reply | None  # only probed when a secret was given
    wrong_secret: Reply | None


def probe_endpoint(transport: Transport, small_image: Callable[[], bytes]) -> EndpointReplies:
    """A form without ``upload``, an empty ``upload``, and (with a secret) no or a bad secret."""
    image = small_image()
    missing = transport.post(
        "a form without 'upload'", accept=PLATFORM_ACCEPT,
        files={"file": ("page.png", image, "image/png")},
    )  # fmt: skip
    empty = transport.post(
        "an empty 'upload'", accept=PLATFORM_ACCEPT, files={"upload": ("empty.png", b"",
                                                                       "image/png")},
    )  # fmt: skip
    no_secret = wrong_secret = None
    if transport.secret:
        upload = {"upload": ("page.png", image, "image/png")}
        no_secret = transport.post(
            "page.png without the secret", accept=PLATFORM_ACCEPT, files=upload,
            authorization=None,
        )  # fmt: skip
        wrong_secret = transport.post(
            "page.png with a wrong secret", accept=PLATFORM_ACCEPT, files=upload,
            authorization=f"Bearer not-{transport.secret}",
        )  # fmt: skip
    return EndpointReplies(missing, empty, no_secret, wrong_secret)


@functools.cache
def small_png() -> bytes:
    """A small one-line page: enough for the error probes, cheap if the extractor OCRs it."""
    page = samples.text_page(["refuse me"], size=(400, 120), font_size=32, margin=20)
    return samples.encode_image(page.image, "PNG")
