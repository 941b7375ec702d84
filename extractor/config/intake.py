"""How requests may arrive at either service: one declaration, read by both.

The extractor (``EXTRACTOR_*``) and the labeling service (``EXTRACTOR_LABELING_*``) receive
requests through the same worker (``server/intake.py``), so the deadlines and the number of
requests being received are declared once here and inherited by both services' settings; each
reads them under its own prefix. The settings page shows them in one table with both variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .fields import SettingsBase, setting


@dataclass(frozen=True)
class IntakeSettings(SettingsBase):
    """Deadlines and bounds of a request on its way in (and of a reply on its way out)."""

    env_prefix: ClassVar[str] = "EXTRACTOR_"  # the labeling service's settings override it

    header_timeout: float = setting(
        10.0,
        "seconds",
        "Seconds a request's line and headers may take to arrive (408 and close; a connection"
        " that sent nothing is just closed). Requests are received whole before a thread sees"
        " them, so a slow client holds no thread meanwhile.",
        above=0,
    )
    body_timeout: float = setting(
        30.0,
        "seconds",
        "Seconds a request body may take to arrive, plus 1 s per BODY_MIN_RATE bytes received"
        " (408 and close).",
        above=0,
    )
    body_min_rate: int = setting(
        100_000,
        "bytes/s",
        "Bytes per second an upload at least this fast never times out (a 200 MB upload has"
        " 30 s + 2,000 s); a body dribbled slower gets its 408 after about BODY_TIMEOUT.",
        at_least=1,
    )
    send_timeout: float = setting(
        30.0,
        "seconds",
        "Seconds a client may take to read a reply, plus 1 s per BODY_MIN_RATE bytes of it;"
        " then the connection is closed and the thread serving it freed.",
        above=0,
    )
    keepalive_timeout: int = setting(
        75,
        "seconds",
        "Seconds an idle kept-alive connection waits for the client's next request (it holds no"
        " thread meanwhile). Longer than common clients' and proxies' own idle limits (httpx"
        " 5 s, nginx upstream 60 s), so they close first instead of sending a request into a"
        " connection being closed.",
        at_least=1,
    )
    max_pending_connections: int = setting(
        256,
        "requests",
        "Requests one server process (a gunicorn worker) may be receiving at once, their bodies"
        " spooled to memory up to 64 KiB, then to an unlinked temporary file; a connection"
        " beyond them gets 503 with Retry-After.",
        at_least=1,
    )
