"""The one request model: every extraction option is declared once (``ExtractionRequest``) and
every entrance -- ``POST /extract``, ``POST /v1/audio/transcriptions``, ``extractor extract``,
a stored job's request -- takes it and checks it the same way.

The table below has one row per option; a new option without a row fails
``test_the_table_has_every_option``. The entrances run for real (the Flask app, the CLI's
``main``) on an upload that is not a document, so a request whose options pass gets as far as
reading the file (415) and no engine runs.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask import Flask

import extractor
from extractor.asr.speaker_count import SpeakerCount
from extractor.cli import build_parser
from extractor.cli import main as cli_main
from extractor.errors import InvalidParameter
from extractor.pipeline.request import OPTIONS, ExtractionRequest, Limits, read_request
from extractor.web.openapi import OPENAPI_FILE, load_openapi

JUNK = b"\x00\x01 not a document of any kind"
OPENAI_OWN = {"format"}  # the OpenAI route answers in its own response_format instead

# option -> (a value every entrance takes, a value every entrance refuses naming the option)
TABLE: dict[str, tuple[str, str]] = {
    "format": ("json", "xml"),
    "language": ("en", "english!"),
    "model": ("tiny.en", "large-v9"),
    "ocr_languages": ("eng", "../eng"),
    "ocr_rotate": ("off", "sideways"),
    "speakers": ("channels", "diarize"),
    "num_speakers": ("2", "0"),
    "min_speakers": ("2", "two"),
    "max_speakers": ("3", "99"),
    "words": ("true", "maybe"),
    "prompt": ("Names: Ada, Grace.", "x" * 2001),
    "temperature": ("0.2", "hot"),
}
ROWS = [(name, good, bad) for name, (good, bad) in TABLE.items()]
LIMITS = Limits(speakers_max_count=20, max_ocr_languages=3,
                installed_ocr_languages=lambda: frozenset({"eng", "deu"}))  # fmt: skip


def test_the_table_has_every_option() -> None:
    assert list(TABLE) == [option.name for option in OPTIONS]


# -- the entrances: each answers (accepted?, message naming the option) -----------------------


def via_extract(app: Flask, name: str, value: str) -> tuple[bool, str]:
    reply = app.test_client().post(
        "/extract", query_string={name: value},
        data={"upload": (io.BytesIO(JUNK), "junk.bin")}, content_type="multipart/form-data",
    )  # fmt: skip
    error = reply.get_json()["error"]
    return error["code"] != "invalid_parameter", error["message"]


def via_openai(app: Flask, name: str, value: str) -> tuple[bool, str]:
    reply = app.test_client().post(
        "/v1/audio/transcriptions",
        data={name: value, "file": (io.BytesIO(JUNK), "junk.bin")},
        content_type="multipart/form-data",
    )
    error = reply.get_json()["error"]
    if error["code"] == "invalid_parameter":
        assert error["param"] == name  # OpenAI's shape names the field
        return False, error["message"]
    return True, error["message"]


def via_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, value: str) -> tuple[
    bool, str
]:  # fmt: skip
    junk = tmp_path / "junk.bin"
    junk.write_bytes(JUNK)
    (option,) = [o for o in OPTIONS if o.name == name]
    if option.kind.switch and value in ("on", "off", "true", "false", "1", "0"):
        flags = [option.flag if value in ("on", "true", "1") else f"--no-{option.flag[2:]}"]
    else:
        flags = [f"{option.flag}={value}"]
    try:
        code = cli_main(["extract", str(junk), "--tmp-dir", str(tmp_path), *flags])
    except SystemExit as exit_:  # argparse's own refusal (choices, a switch given a value)
        code = int(exit_.code or 0)
    err = capsys.readouterr().err
    assert code in (1, 2), err
    return code == 1, err  # 1: the file was read and refused; 2: a usage error


def via_job(name: str, value: str) -> tuple[bool, str]:
    """An asynchronous job's request: read once, stored as JSON, built again to run."""
    try:
        request = read_request({name: value}, LIMITS)
    except InvalidParameter as exc:
        assert exc.param == name
        return False, exc.message
    stored = json.loads(json.dumps(request.given()))
    assert ExtractionRequest(**stored) == request
    return True, ""


@pytest.mark.parametrize(("name", "good", "bad"), ROWS)
def test_every_entrance_takes_the_option(
    make_app: Callable[..., Flask], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    name: str, good: str, bad: str,
) -> None:  # fmt: skip
    app = make_app()
    entrances: dict[str, Callable[[str], tuple[bool, str]]] = {
        "/extract": lambda v: via_extract(app, name, v),
        "cli": lambda v: via_cli(tmp_path, capsys, name, v),
        "job": lambda v: via_job(name, v),
    }
    if name not in OPENAI_OWN:
        entrances["/v1/audio/transcriptions"] = lambda v: via_openai(app, name, v)
    for entrance, send in entrances.items():
        accepted, message = send(good)
        assert accepted, f"{entrance} refused {name}={good!r}: {message}"
        accepted, message = send(bad)
        assert not accepted, f"{entrance} took {name}={bad[:20]!r}"
        assert name.replace("_", "-") in message or name in message, (entrance, message)


@pytest.mark.parametrize("name", [option.name for option in OPTIONS])
def test_an_empty_value_is_no_value(name: str) -> None:
    assert read_request({name: ""}, LIMITS) == ExtractionRequest()


# -- derived from the one declaration --------------------------------------------------------


def test_every_option_is_documented_in_the_openapi_document() -> None:
    paths = load_openapi()["paths"]
    query = {p["name"]: p for p in paths["/extract"]["post"]["parameters"] if "name" in p}
    form = paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"][
        "multipart/form-data"
    ]["schema"]["properties"]
    for option in OPTIONS:
        assert query[option.name]["schema"] == option.kind.schema
        assert query[option.name]["description"] == option.doc
        assert (option.name in form) == (option.name not in OPENAI_OWN)
    assert "x-extraction-options" not in json.dumps(paths)


def test_the_yaml_declares_no_option_by_hand() -> None:
    """The options' one declaration is the code: the YAML only marks where they go."""
    paths = yaml.safe_load(OPENAPI_FILE.read_text(encoding="utf-8"))["paths"]
    extract = paths["/extract"]["post"]
    form = paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"][
        "multipart/form-data"
    ]["schema"]
    names = {option.name for option in OPTIONS}
    assert not names & {p.get("name") for p in extract["parameters"]}
    assert not names & set(form["properties"])
    assert extract["x-extraction-options"] == {"in": "query"}
    assert form["x-extraction-options"] == {"in": "form", "except": sorted(OPENAI_OWN)}


def test_every_option_is_a_cli_flag_apart_from_the_settings() -> None:
    extract = build_parser()._subparsers._group_actions[0].choices["extract"]  # type: ignore[union-attr]
    groups = {g.title: {a.dest for a in g._group_actions} for g in extract._action_groups}
    options = groups["extraction options (as POST /extract's query parameters)"]
    assert options == {option.name for option in OPTIONS}
    settings = groups["settings (each also EXTRACTOR_<NAME>)"]
    assert not options & settings
    assert {"max_pages", "asr_language", "tmp_dir"} <= settings
    assert not {"bind", "queue_size", "keepalive_timeout", "realtime_sessions"} & settings


def test_the_try_it_page_sends_only_options_of_the_model() -> None:
    """The page builds /extract's query from its controls; the server checks it as any other."""
    script = (Path(extractor.__file__).parent / "static" / "app.js").read_text(encoding="utf-8")
    sent = set(re.findall(r"params\.set\(\"(\w+)\"", script))
    assert sent and sent <= {option.name for option in OPTIONS}


def test_every_option_has_a_doc_and_a_none_or_false_default() -> None:
    for option in OPTIONS:
        assert option.doc and option.default in (None, False)


# -- checks between options ------------------------------------------------------------------


def test_a_speaker_count_means_speakers_auto() -> None:
    request = read_request({"min_speakers": "2", "max_speakers": "4"}, LIMITS)
    assert request.speakers == "auto"
    assert request.speaker_count == SpeakerCount(None, 2, 4)
    assert ExtractionRequest().speaker_count is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"speakers": "channels", "num_speakers": "2"}, "num_speakers"),
        ({"min_speakers": "4", "max_speakers": "2"}, "min_speakers"),
        ({"num_speakers": "5", "max_speakers": "3"}, "num_speakers"),
        ({"num_speakers": "21"}, "num_speakers"),
        ({"ocr_languages": "deu+fra"}, "ocr_languages"),  # fra is not installed
        ({"ocr_languages": "eng+deu+eng+deu"}, "ocr_languages"),  # four named, three allowed
    ],
)
def test_what_the_options_say_together_is_checked(fields: dict[str, str], param: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        read_request(fields, LIMITS)
    assert caught.value.param == param


def test_a_request_built_in_code_is_checked_too() -> None:
    with pytest.raises(InvalidParameter):
        ExtractionRequest(speakers="channels", num_speakers=2)


def test_values_are_normalised() -> None:
    request = read_request(
        {"format": "TEXT", "language": "EN", "ocr_languages": "deu eng deu", "words": "On"},
        LIMITS,
    )
    expected = {"format": "text", "language": "en", "ocr_languages": "deu+eng", "words": True}
    assert request.given() == expected


def test_the_ocr_languages_installed_are_asked_for_only_when_named() -> None:
    asked: list[bool] = []

    def installed() -> frozenset[str]:
        asked.append(True)
        return frozenset({"eng"})

    limits = Limits(installed_ocr_languages=installed)
    read_request({"language": "en"}, limits)
    assert not asked
    assert read_request({"ocr_languages": "eng"}, limits).ocr_languages == "eng"
    assert asked


def test_unknown_fields_are_left_to_the_entrance() -> None:
    given: dict[str, Any] = {"response_format": "srt", "model": "whisper-1"}
    assert read_request(given, LIMITS) == ExtractionRequest()
