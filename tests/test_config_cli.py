"""Settings from env and flags, the settings page, and `extractor extract` matching /extract."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import PAGE_ONE, post_file

from extractor import samples
from extractor.config import Settings, SettingsError
from extractor.server.application import beyond_loopback


def test_env_then_overrides() -> None:
    env = {
        "EXTRACTOR_DEFAULT_FORMAT": "text",
        "EXTRACTOR_MAX_PAGES": "7",
        "EXTRACTOR_ASR_VAD": "off",
    }
    settings = Settings.load(env, {"max_pages": 9})
    assert (settings.default_format, settings.max_pages, settings.asr_vad) == ("text", 9, False)
    assert Settings.load({}).bind == "127.0.0.1:8000"
    assert Settings.load({"EXTRACTOR_SECRET": ""}).secret is None


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"EXTRACTOR_MAX_PAGES": "many"}, "EXTRACTOR_MAX_PAGES"),
        ({"EXTRACTOR_ASR_ENGINE": "vosk"}, "EXTRACTOR_ASR_ENGINE"),
        ({"EXTRACTOR_DEFAULT_FORMAT": "xml"}, "EXTRACTOR_DEFAULT_FORMAT"),
        ({"EXTRACTOR_THREADS": "0"}, "EXTRACTOR_THREADS"),
        ({"EXTRACTOR_ASR_VAD": "perhaps"}, "EXTRACTOR_ASR_VAD"),
    ],
)
def test_bad_settings_name_their_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(SettingsError, match=needle):
        Settings.load(env)


def test_default_format_setting_decides_ties(make_app: Any, page_one: samples.TextPage) -> None:
    client = make_app(default_format="text").test_client()
    reply = post_file(client, samples.encode_image(page_one.image, "PNG"))
    assert reply.mimetype == "text/plain"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extractor.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_extract_command_prints_what_the_endpoint_answers(
    client: Any, tmp_path: Path, page_one: samples.TextPage
) -> None:
    image = tmp_path / "page.png"
    image.write_bytes(samples.encode_image(page_one.image, "PNG"))
    text = run_cli("extract", str(image), "--format", "text")
    assert text.returncode == 0 and text.stdout.splitlines() == PAGE_ONE
    printed = json.loads(run_cli("extract", str(image)).stdout)
    served = post_file(client, image.read_bytes(), "page.png").get_json()
    assert printed == served


def test_extract_command_reports_bad_input(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"nothing to see")
    result = run_cli("extract", str(junk))
    assert result.returncode == 1
    assert (
        json.loads(result.stderr.strip().splitlines()[-1])["error"]["code"]
        == "unsupported_media_type"
    )
    assert run_cli("extract", str(tmp_path / "missing.png")).returncode == 2
    bad_flag = run_cli("extract", str(junk), "--max-pages", "lots")
    assert bad_flag.returncode == 2 and "EXTRACTOR_MAX_PAGES" in bad_flag.stderr


# -- `extractor serve` warns when it is reachable without a secret --------------------------


@pytest.mark.parametrize(
    ("bind", "reachable"),
    [
        ("127.0.0.1:8000", []),
        ("127.0.0.2:8000", []),
        ("[::1]:8000", []),
        ("localhost:8000", []),
        ("unix:/run/extractor.sock", []),
        ("0.0.0.0:8000", ["0.0.0.0:8000"]),
        ("[::]:8000", ["[::]:8000"]),
        (":8000", [":8000"]),
        ("192.0.2.7", ["192.0.2.7"]),
        ("extractor.example:80", ["extractor.example:80"]),
        ("127.0.0.1:1,192.0.2.7:2", ["192.0.2.7:2"]),
    ],
)
def test_beyond_loopback(bind: str, reachable: list[str]) -> None:
    assert beyond_loopback(bind) == reachable


def _serve_until(line: str, *args: str) -> str:
    """Start ``extractor serve`` and stop it once stderr shows ``line``; return stderr so far.

    The bind is a TEST-NET-1 address (RFC 5737) that no interface of this machine has, so
    gunicorn's bind fails locally: nothing listens and no packet leaves the machine.
    """
    command = [sys.executable, "-m", "extractor.cli", "serve", "--workers", "1", *args]
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )  # fmt: skip
    seen = []
    try:
        assert process.stderr is not None
        for text in process.stderr:  # ends when gunicorn gives up binding (about 5 s)
            seen.append(text)
            if line in text:
                break
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    return "".join(seen)


def test_serve_warns_when_reachable_without_a_secret() -> None:
    stderr = _serve_until("beyond loopback", "--bind", "192.0.2.7:9")
    (warning,) = [json.loads(t) for t in stderr.splitlines() if "beyond loopback" in t]
    assert warning["level"] == "warning"
    assert "192.0.2.7:9" in warning["event"] and "EXTRACTOR_SECRET" in warning["event"]


@pytest.mark.slow  # seconds of CPU each: make test runs it, make test-fast leaves it out
def test_serve_does_not_warn_with_a_secret() -> None:
    stderr = _serve_until("Starting gunicorn", "--bind", "192.0.2.7:9", "--secret", "s3cret")
    assert "Starting gunicorn" in stderr
    assert "beyond loopback" not in stderr
    assert "s3cret" not in stderr  # the secret never comes back out


@pytest.mark.slow  # seconds of CPU each: make test runs it, make test-fast leaves it out
def test_serve_does_not_warn_with_api_keys(tmp_path: Path) -> None:
    keys = tmp_path / "api-keys"
    keys.write_text("acme:acme-key-0123456789\n")
    stderr = _serve_until("Starting gunicorn", "--bind", "192.0.2.7:9", "--api-keys", str(keys))
    assert "Starting gunicorn" in stderr
    assert "beyond loopback" not in stderr
    assert "acme-key-0123456789" not in stderr  # names are logged, never keys
