"""A spoken language in any spelling a client sends reaches the engine as Whisper's code."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from faster_whisper.tokenizer import _LANGUAGE_CODES

from extractor.asr.languages import LANGUAGES
from extractor.errors import InvalidParameter
from extractor.pipeline.request import Limits, read_request
from extractor.replies.importable import Document, DocumentKind, Line, Word, to_importable

SPELLINGS = [
    ("de", "de"),  # ISO 639-1
    ("deu", "de"),  # 639-2/T and 639-3
    ("ger", "de"),  # 639-2/B
    ("german", "de"),  # English name
    ("German", "de"),
    ("de-DE", "de"),  # BCP-47 tags
    ("de_AT", "de"),
    ("DE-ch", "de"),
    ("pt-BR", "pt"),
    ("zh-Hans-CN", "zh"),
    ("yue-HK", "yue"),
    ("zh-yue", "yue"),
    ("fre", "fr"),
    ("Haitian Creole", "ht"),
    ("nb", "no"),  # Bokmål is Whisper's Norwegian
    ("jv", "jw"),  # Whisper keeps Javanese's retired code
    ("iw", "he"),
    ("haw", "haw"),  # no 639-1 code: Whisper's own
    (" en ", "en"),
]


@pytest.mark.parametrize(("given", "code"), SPELLINGS)
def test_a_spelling_is_read_as_whisper_s_code(given: str, code: str) -> None:
    assert read_request({"language": given}, Limits()).language == code


@pytest.mark.parametrize("given", ["english!", "xx", "klingon", "de--DE", "d", "x" * 41])
def test_a_language_whisper_does_not_know_is_a_400_naming_language(given: str) -> None:
    with pytest.raises(InvalidParameter) as refused:
        read_request({"language": given}, Limits())
    assert refused.value.param == "language"


def test_the_table_has_exactly_whisper_s_languages() -> None:
    assert set(LANGUAGES) == set(_LANGUAGE_CODES)


def test_a_detected_language_s_probability_is_in_the_json_reply(validator: Any) -> None:
    line = Line((Word("Guten"), Word("Morgen")), start_ms=0, end_ms=900)
    detected = Document("gruss.wav", DocumentKind.AUDIO, (line,), language="de",
                        extra={"language_probability": 0.97})  # fmt: skip
    reply = to_importable(detected)
    validator.validate(reply)
    assert (reply["language"], reply["languageProbability"]) == ("de", 0.97)
    assert "languageProbability" not in to_importable(replace(detected, extra={}))
