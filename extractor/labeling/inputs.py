"""Checks of what clients send: names, URLs, secrets and uploaded file names, refused with a
UserInputError before anything is stored."""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import urlsplit

from extractor.labeling.credentials import refuse_userinfo
from extractor.labeling.errors import UserInputError

MAX_NAME = 200
MAX_URL = 2048


def checked_name(value: str, what: str) -> str:
    """A trimmed, non-empty, bounded name."""
    value = (value or "").strip()
    if not value:
        raise UserInputError(f"{what} must not be empty")
    if len(value) > MAX_NAME:
        raise UserInputError(f"{what} is longer than {MAX_NAME} characters")
    return value


def checked_url(value: str, what: str) -> str:
    """An absolute http(s) URL; where it may point is the outbound policy's call, at call time."""
    value = (value or "").strip()
    try:
        parts = urlsplit(value)
        host = parts.hostname
        _ = parts.port
    except ValueError as exc:
        raise UserInputError(f"{what} is not a valid URL") from exc
    if parts.scheme not in ("http", "https") or not host or len(value) > MAX_URL:
        raise UserInputError(f"{what} must be an absolute http:// or https:// URL")
    refuse_userinfo(value, what)
    return value


def checked_secret(value: str | None, what: str) -> str | None:
    """A secret that can travel in an HTTP header (visible ASCII), or None; never echoed."""
    if not value:
        return None
    if not all("!" <= ch <= "~" for ch in value) or len(value) > 4096:
        raise UserInputError(f"{what} must be visible ASCII characters (it is sent in a header)")
    return value


def upload_name(upload: Any, position: int) -> str:
    """The uploaded file's own name without any client-side folder, or a made-up one."""
    raw = (getattr(upload, "filename", None) or "").replace("\x00", "")
    name = PureWindowsPath(PurePosixPath(raw).name).name.strip()
    return name[:MAX_NAME] or f"document-{position + 1}"
