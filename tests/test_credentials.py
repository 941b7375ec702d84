"""The one credential check (``extractor/credentials.py``): the shared secret and named API keys,
their file read again when it changes, every bad line refused naming it and never a key."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from extractor.config import SettingsError
from extractor.credentials import (
    OPEN,
    SHARED_SECRET,
    Credentials,
    Identity,
    KeysFileError,
    parse_keys,
)

ALICE = "alice-key-0123456789"
BOB = "bob-key-0123456789ab"


def keys_file(path: Path, text: str) -> Path:
    """Replace the file as an operator should: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)
    return path


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return keys_file(tmp_path / "keys", f"# clients\nalice:{ALICE}\n\nbob: {BOB} \n")


def test_nothing_configured_lets_everyone_in_as_one_identity() -> None:
    keys = Credentials(None, None)
    assert not keys.required
    assert keys.identify(None) is keys.identify("Bearer anything") is OPEN


@pytest.mark.parametrize(
    ("header", "identity"),
    [
        (f"Bearer {ALICE}", Identity("alice", keyed=True)),
        (f"bearer   {BOB}", Identity("bob", keyed=True)),
        ("Bearer s3cret", SHARED_SECRET),
        ("Bearer wrong", None),
        (f"Basic {ALICE}", None),
        (ALICE, None),
        ("", None),
        (None, None),
    ],
)
def test_a_header_names_its_identity(path: Path, header: str | None, identity: object) -> None:
    assert Credentials("s3cret", str(path)).identify(header) == identity


def test_keys_alone_refuse_a_request_without_one(path: Path) -> None:
    keys = Credentials(None, str(path))
    assert keys.required and keys.identify(None) is None
    assert keys.identify_tokens(["wrong", BOB]) == Identity("bob", keyed=True)


def test_a_changed_file_is_read_again_and_a_broken_one_keeps_the_last_keys(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Credentials(None, str(path))
    carol = "carol-key-0123456789"
    keys_file(path, f"alice:{ALICE}\ncarol:{carol}\n")
    assert keys.identify(f"Bearer {carol}") == Identity("carol", keyed=True)
    assert keys.identify(f"Bearer {BOB}") is None  # removed
    assert keys.names() == {"alice", "carol"}
    with caplog.at_level(logging.ERROR):
        keys_file(path, f"alice:{ALICE}\ncarol short\n")
        assert keys.identify(f"Bearer {carol}") == Identity("carol", keyed=True)
        path.unlink()
        assert keys.identify(f"Bearer {ALICE}") == Identity("alice", keyed=True)
    logged = caplog.text
    assert "line 2" in logged and carol not in logged and ALICE not in logged
    keys_file(path, "")  # an empty file: no keys
    assert keys.identify(f"Bearer {ALICE}") is None


def test_one_name_may_hold_two_keys_during_a_rotation(tmp_path: Path) -> None:
    keys = Credentials(None, str(keys_file(tmp_path / "k", f"alice:{ALICE}\nalice:{BOB}\n")))
    assert keys.identify(f"Bearer {ALICE}") == keys.identify(f"Bearer {BOB}")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("alice", "line 1: expected name:key"),
        (f"-alice:{ALICE}", "expected name:key"),
        (f"{'a' * 33}:{ALICE}", "expected name:key"),
        (f"shared:{ALICE}", "expected name:key"),
        (f"none:{ALICE}", "expected name:key"),
        ("alice:short", "16 or more characters"),
        ("alice:has a space in the key", "no spaces"),
        (f"alice:{ALICE}\nbob:{ALICE}", "line 2 (bob): this key is on an earlier line too"),
    ],
)
def test_a_bad_line_is_refused_naming_it_never_the_key(text: str, why: str) -> None:
    with pytest.raises(KeysFileError) as refused:
        parse_keys(text)
    assert why in str(refused.value)
    assert ALICE not in str(refused.value)


def test_a_bad_or_missing_file_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="EXTRACTOR_API_KEYS"):
        Credentials(None, str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match="line 1"):
        Credentials(None, str(keys_file(tmp_path / "bad", "alice")))
    with pytest.raises(SettingsError, match="EXTRACTOR_SECRET"):
        Credentials(ALICE, str(keys_file(tmp_path / "same", f"alice:{ALICE}")))
