"""One extraction request: every option a client may give besides the file, declared once.

Each field of ``ExtractionRequest`` is one option: its name (the query parameter of
``POST /extract``, the form field of ``POST /v1/audio/transcriptions``, the ``extractor
extract`` flag ``--<name>``, the key of an asynchronous job's request), its type, default,
documentation and check (its ``Kind``). The entrances only derive from it: ``read_request``
parses the text a client sent, the CLI adds one flag per option, the OpenAPI document gets one
parameter per option (``openapi_schema``). Adding an option is one field here, its use in the
engine, and a test.

Nothing here knows HTTP or argparse; a bad value raises ``InvalidParameter`` naming the option
(``param``), which each entrance turns into its own kind of answer at one place.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extractor.asr.languages import whisper_language
from extractor.asr.models import DEFAULT_MODEL, OPENAI_DEFAULT, served_models
from extractor.asr.speaker_count import COUNT_FIELDS, SpeakerCount
from extractor.config import SPEAKER_MODES, Settings
from extractor.errors import InvalidParameter
from extractor.replies.formats import FORMATS

MAX_PROMPT_CHARS = 2000  # OpenAI reads 224 tokens of prompt; this bounds what we pass on
# A Tesseract language is a traineddata file's stem: 'eng', 'chi_sim', 'deu_latf'.
LANGUAGE_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]{1,31}")
LANGUAGE_SEPARATOR = re.compile(r"[+ ]")
SWITCH_VALUES = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


@dataclass(frozen=True)
class Limits:
    """What a request is checked against besides its own text: the deployment's limits and,
    asked only when a request names OCR languages, the languages Tesseract has installed."""

    speakers_max_count: int = 20
    max_ocr_languages: int = 3
    installed_ocr_languages: Callable[[], frozenset[str]] = frozenset
    speech_models: tuple[str, ...] = (DEFAULT_MODEL,)  # installed, the deployment's first

    @classmethod
    def of(cls, settings: Settings, installed: Callable[[], frozenset[str]]) -> Limits:
        return cls(
            settings.speakers_max_count, settings.max_ocr_languages, installed,
            served_models(settings.asr_model),
        )  # fmt: skip


# -- kinds of value: how the text of one option is checked and what the OpenAPI says of it -


class Kind:
    """How one option's text becomes its value; ``schema`` is its OpenAPI (JSON) schema."""

    schema: dict[str, Any] = {"type": "string"}
    choices: tuple[str, ...] | None = None  # offered as the CLI flag's choices
    switch = False  # on/off: the CLI flag is --name/--no-name

    def parse(self, name: str, raw: str, limits: Limits) -> Any:
        return raw


class Choice(Kind):
    """One of a few words; ``fold_case``: any case of them."""

    def __init__(self, choices: tuple[str, ...], *, fold_case: bool = False) -> None:
        self.values, self.fold_case = choices, fold_case
        self.choices = choices
        self.schema = {"type": "string", "enum": list(choices)}

    def parse(self, name: str, raw: str, limits: Limits) -> str:
        value = raw.lower() if self.fold_case else raw
        if value not in self.values:
            raise InvalidParameter(
                f"{name} must be one of {', '.join(self.values)} when given, not {raw[:40]!r}",
                param=name,
            )
        return value


class Switch(Kind):
    """On or off: on/off, true/false, 1/0, in any case."""

    schema = {"type": "string", "enum": list(SWITCH_VALUES)}
    switch = True

    def parse(self, name: str, raw: str, limits: Limits) -> bool:
        try:
            return SWITCH_VALUES[raw.strip().lower()]
        except KeyError:
            raise InvalidParameter(
                f"{name} must be on or off (true/false, 1/0), not {raw[:40]!r}", param=name
            ) from None


class SpokenLanguage(Kind):
    """A language Whisper knows, as its code (``de``), an ISO 639-2/3 code (``deu``, ``ger``),
    its English name (``German``) or a BCP-47 tag (``de-DE``): read as Whisper's code."""

    schema = {"type": "string", "minLength": 2, "maxLength": 40}

    def parse(self, name: str, raw: str, limits: Limits) -> str:
        code = whisper_language(raw[:40])
        if code is None:
            raise InvalidParameter(
                f"{name} must be a language Whisper knows, as an ISO 639 code ('de', 'deu'),"
                f" an English name ('German') or a BCP-47 tag ('de-DE'), not {raw[:40]!r}",
                param=name,
            )
        return code


class SpeechModel(Kind):
    """The name of an installed speech model; OpenAI's ``whisper-1`` is the deployment's."""

    schema = {"type": "string", "maxLength": 200}

    def parse(self, name: str, raw: str, limits: Limits) -> str | None:
        if raw == OPENAI_DEFAULT:
            return None
        if raw not in limits.speech_models:
            raise InvalidParameter(
                f"{name} must be one of the models installed here,"
                f" {', '.join(limits.speech_models)} (or {OPENAI_DEFAULT}: the first),"
                f" not {raw[:40]!r}",
                param=name,
            )
        return raw


class OcrLanguages(Kind):
    """'+'-joined installed Tesseract languages, at most EXTRACTOR_MAX_OCR_LANGUAGES."""

    schema = {
        "type": "string",
        "pattern": "^[A-Za-z][A-Za-z0-9_]{1,31}([+ ][A-Za-z][A-Za-z0-9_]{1,31})*$",
    }

    def parse(self, name: str, raw: str, limits: Limits) -> str | None:
        installed = limits.installed_ocr_languages()  # may ask Tesseract: only when given
        return parse_ocr_languages(raw, installed, limits.max_ocr_languages)


class SpeakerNumber(Kind):
    """A whole number of speakers from 1 to EXTRACTOR_SPEAKERS_MAX_COUNT."""

    schema = {"type": "integer", "minimum": 1}

    def parse(self, name: str, raw: str, limits: Limits) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise InvalidParameter(
                f"{name} must be a whole number, not {raw[:40]!r}", param=name
            ) from None
        if not 1 <= value <= limits.speakers_max_count:
            raise InvalidParameter(
                f"{name} must be from 1 to {limits.speakers_max_count}"
                f" (EXTRACTOR_SPEAKERS_MAX_COUNT), not {value}",
                param=name,
            )
        return value


class Temperature(Kind):
    """A decoding temperature from 0 to 1."""

    schema = {"type": "number", "minimum": 0, "maximum": 1}

    def parse(self, name: str, raw: str, limits: Limits) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise InvalidParameter(
                f"{name} must be a number from 0 to 1, not {raw[:40]!r}", param=name
            ) from None
        if not math.isfinite(value) or not 0 <= value <= 1:
            raise InvalidParameter(f"{name} must be from 0 to 1, not {raw[:40]!r}", param=name)
        return value


class Text(Kind):
    """Free text of at most ``most`` characters."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.schema = {"type": "string", "maxLength": most}

    def parse(self, name: str, raw: str, limits: Limits) -> str:
        if len(raw) > self.most:
            raise InvalidParameter(f"{name} is longer than {self.most} characters", param=name)
        return raw


def option(default: Any, kind: Kind, doc: str) -> Any:
    """Declare one option: a dataclass field whose metadata says how to read and document it."""
    return field(default=default, metadata={"kind": kind, "doc": " ".join(doc.split())})


# -- the request ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtractionRequest:
    """Everything a client asked for besides the file; every field is optional."""

    format: str | None = option(
        None, Choice(tuple(FORMATS), fold_case=True),
        """Reply format; wins over the Accept header. `vtt` and `srt` are for audio only,
        `hocr`, `alto`, `tsv` and `pdf` (a searchable PDF) for images and PDFs only (400
        otherwise). Case-insensitive.
        The OpenAI route answers in its own `response_format` instead.""",
    )  # fmt: skip
    language: str | None = option(
        None, SpokenLanguage(),
        """Audio: the spoken language, overriding the deployment's `EXTRACTOR_ASR_LANGUAGE`
        (unset: detected, with a multilingual model): an ISO 639-1 code (`de`), a 639-2 or
        639-3 code (`deu`, `ger`), an English name (`German`) or a BCP-47 tag (`de-DE`), read
        as the 639-1 code; one the model does not transcribe is a 400 (English-only models:
        `en` alone). Ignored for images and PDFs.""",
    )  # fmt: skip
    model: str | None = option(
        None, SpeechModel(),
        """Audio: the speech model, one of those installed (a refusal lists them): `tiny.en` (bundled, English only) or `base` (multilingual, with the
        `extractor[base]` extra: ~3x tiny.en's CPU time; it detects the language);
        unset or `whisper-1`: the deployment's `EXTRACTOR_ASR_MODEL`. Ignored for images and
        PDFs.""",
    )  # fmt: skip
    ocr_languages: str | None = option(
        None, OcrLanguages(),
        """Images and PDFs: the Tesseract languages to read, `+`-joined (`deu+eng`; an
        unencoded `+` arriving as a space separates too), overriding the deployment's
        `EXTRACTOR_OCR_LANGUAGES`; at most `EXTRACTOR_MAX_OCR_LANGUAGES` of them, each
        installed (`GET /readyz` lists them under `tesseract.installed_languages`; 400 naming
        the missing ones otherwise). Ignored for audio.""",
    )  # fmt: skip
    ocr_rotate: bool | None = option(
        None, Switch(),
        """Images and PDFs: `on` (the deployment's `EXTRACTOR_OCR_ROTATE` when absent) turns a
        page scanned sideways, upside down or askew upright before keeping its words; boxes
        stay in the upload's pixels and each cell of a turned page has `rotation` (degrees
        clockwise: 90, 180, 270) and/or `skew` (degrees, signed) in its metadata. `off` reads
        every page as it is. Ignored for audio.""",
    )  # fmt: skip
    speakers: str | None = option(
        None, Choice(SPEAKER_MODES),
        """Audio: `channels` transcribes each channel of a stereo recording as its own speaker
        (`Speaker 1`, `Speaker 2` in each cell's metadata and as the text line's prefix).
        `auto` tells voices apart in the (mixed-down) audio, offline, numbering speakers in
        order of first appearance and splitting a line where the speaker changes; it needs the
        `extractor[speakers]` extra (501 without it). On the OpenAI route, `verbose_json`
        segments get a `speaker` and srt and vtt cues the voice.""",
    )  # fmt: skip
    num_speakers: int | None = option(
        None, SpeakerNumber(),
        """Audio, with `speakers=auto` (implied when absent): how many people speak, when
        known; labels exactly that many voices (fewer only if the audio holds fewer windows of
        speech). A whole number from 1 to `EXTRACTOR_SPEAKERS_MAX_COUNT` (400
        `invalid_parameter` otherwise, or with `speakers=channels`).""",
    )  # fmt: skip
    min_speakers: int | None = option(
        None, SpeakerNumber(),
        """Audio, with `speakers=auto` (implied when absent): at least this many speakers; the
        count found is raised to it. Not above `max_speakers` (400).""",
    )  # fmt: skip
    max_speakers: int | None = option(
        None, SpeakerNumber(),
        """Audio, with `speakers=auto` (implied when absent): at most this many speakers; the
        closest voices are joined until the count fits.""",
    )  # fmt: skip
    words: bool = option(
        False, Switch(),
        """Audio: put each word's time span (milliseconds) in the cell's metadata under
        `wordTimestamps` (the OpenAI route: `words` in `verbose_json`). `true`/`false`,
        `on`/`off` and `1`/`0` are accepted.""",
    )  # fmt: skip
    prompt: str | None = option(
        None, Text(MAX_PROMPT_CHARS),
        """Audio: text that conditions the transcription (names, spelling, style), as
        OpenAI's `prompt`.""",
    )  # fmt: skip
    temperature: float | None = option(
        None, Temperature(),
        """Audio: the decoding temperature; 0 or unset keeps Whisper's fallback schedule, above
        0 samples at it.""",
    )  # fmt: skip

    def __post_init__(self) -> None:
        # Checks between options, so a request built in code (or from a stored job) holds to
        # them as one read from a client does.
        counted = [name for name in COUNT_FIELDS if getattr(self, name) is not None]
        if counted and self.speakers == "channels":
            raise InvalidParameter(
                "num_speakers, min_speakers and max_speakers go with speakers=auto, not channels",
                param=counted[0],
            )
        if counted and self.speakers is None:  # a number of speakers means speakers=auto
            object.__setattr__(self, "speakers", "auto")
        least, most = self.min_speakers or 1, self.max_speakers
        if most is not None and least > most:
            raise InvalidParameter(
                f"min_speakers ({least}) must not be above max_speakers ({most})",
                param="min_speakers",
            )
        exactly = self.num_speakers
        if exactly is not None and not least <= exactly <= (most or exactly):
            raise InvalidParameter(
                f"num_speakers ({exactly}) must lie within min_speakers and max_speakers",
                param="num_speakers",
            )

    @property
    def speaker_count(self) -> SpeakerCount | None:
        """num/min/max_speakers as the diarizer takes them; None when none was given."""
        if self.num_speakers is None and self.min_speakers is None and self.max_speakers is None:
            return None
        return SpeakerCount(self.num_speakers, self.min_speakers or 1, self.max_speakers)

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults, by name (JSON values): what a stored
        job keeps, and ``ExtractionRequest(**given)`` builds the same request again."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        }


@dataclass(frozen=True)
class Option:
    """One option as the entrances see it: name, default, documentation, kind."""

    name: str
    default: Any
    doc: str
    kind: Kind

    @property
    def flag(self) -> str:
        """The ``extractor extract`` flag."""
        return "--" + self.name.replace("_", "-")


OPTIONS: tuple[Option, ...] = tuple(
    Option(f.name, f.default, f.metadata["doc"], f.metadata["kind"])
    for f in dataclasses.fields(ExtractionRequest)
)


def read_request(
    fields: Mapping[str, str | None], limits: Limits, *, skip: tuple[str, ...] = ()
) -> ExtractionRequest:
    """The request whose options ``fields`` gives as text (a query string, a form, CLI flags).

    An empty value counts as not given; names not options are not looked at (the entrance
    reads its own, such as the OpenAI route's ``response_format``); ``skip`` names options
    an entrance does not take. Raises ``InvalidParameter`` naming the first bad option.
    """
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw = fields.get(opt.name)
        if opt.name in skip or raw is None or raw == "":
            continue
        values[opt.name] = opt.kind.parse(opt.name, raw, limits)
    return ExtractionRequest(**values)


def parse_ocr_languages(value: str | None, installed: frozenset[str], most: int) -> str | None:
    """Check a client's ``deu+eng``: at most ``most`` well-formed codes, each installed.

    A space separates codes too: an unencoded ``+`` in a query string arrives as one, and
    ``?ocr_languages=deu+eng`` should mean what it says. Returns the '+'-joined codes without
    duplicates, or None when ``value`` is empty.
    """
    if not value:
        return None
    codes = LANGUAGE_SEPARATOR.split(value)
    if len(codes) > most:
        raise InvalidParameter(
            f"ocr_languages names {len(codes)} languages; the limit is {most}",
            param="ocr_languages",
        )
    codes = list(dict.fromkeys(codes))
    malformed = [c for c in codes if not LANGUAGE_CODE.fullmatch(c)]
    if malformed:
        shown = ", ".join(repr(c[:40]) for c in malformed[:most])
        raise InvalidParameter(
            f"ocr_languages must be '+'-joined Tesseract codes such as 'deu+eng', not {shown}",
            param="ocr_languages",
        )
    missing = [c for c in codes if c not in installed]
    if missing:
        raise InvalidParameter(
            f"ocr_languages: not installed: {', '.join(missing)}"
            f" (installed: {', '.join(sorted(installed))})",
            param="ocr_languages",
        )
    return "+".join(codes)
