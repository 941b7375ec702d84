"""How every ``extractor`` command fails: one line on standard error and an exit status that
says what kind of failure it was, never a traceback for one we expect.

A command raises ``CommandFailed`` for what it knows went wrong, or lets the libraries' errors
through; ``run`` is the one boundary that turns both into ``extractor <command>: <why>``, as
httpx translates its transports' errors in one place. An error it does not know is a bug and
keeps its traceback.

Exit statuses (docs/guide/getting-started.md, "When a command fails"):

- 0: done;
- 1: failed: the server is down or refused the request, a job failed, a file did not decode;
- 2: usage: a bad flag or setting, a URL that is not one, a file that cannot be opened;
- 130: interrupted (Ctrl-C: 128 + SIGINT);
- 141: standard output was closed by its reader (``| head``: 128 + SIGPIPE), quietly, as the
  shell's own commands end there.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from urllib.parse import urlsplit

from .config import SettingsError

FAILED, USAGE, INTERRUPTED, BROKEN_PIPE = 1, 2, 130, 141


class CommandFailed(Exception):
    """What went wrong, in a sentence, and the exit status it ends the command with."""

    def __init__(self, message: str, status: int = FAILED) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def run(command: str, body: Callable[[], int], *, debug: bool = False) -> int:
    """``body()``'s exit status, or the status of the failure it raised, said in one line
    prefixed with ``command`` (``debug``: the traceback of every failure instead)."""
    try:
        return body()
    except BrokenPipeError:
        # Python flushes standard output again at exit: point it where a write cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    except KeyboardInterrupt:
        if debug:
            raise
        return _say(command, CommandFailed("interrupted", INTERRUPTED))
    except Exception as exc:
        failure = explain(exc)
        if failure is None or debug:
            raise
        return _say(command, failure)


def explain(exc: BaseException) -> CommandFailed | None:
    """``exc`` as a failure the user can act on; None for a bug."""
    if isinstance(exc, CommandFailed):
        return exc
    if isinstance(exc, SettingsError):
        return CommandFailed(str(exc), USAGE)
    if "httpx" in sys.modules:  # not imported: none of its errors can be here
        found = _http_failure(exc)
        if found is not None:
            return found
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.exc import OperationalError

        if isinstance(exc, OperationalError):  # the database is down, or refuses us
            return CommandFailed(f"cannot use the database: {one_line(str(exc.orig))}")
    if isinstance(exc, OSError) and exc.filename is not None:
        return CommandFailed(f"cannot open {exc.filename}: {exc.strerror}", USAGE)
    if isinstance(exc, OSError):
        return CommandFailed(one_line(str(exc)))
    return None


def _http_failure(exc: BaseException) -> CommandFailed | None:
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return CommandFailed(refusal(exc.response.status_code, exc.response.content))
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return CommandFailed(f"not a URL to call: {one_line(str(exc))}", USAGE)
    if not isinstance(exc, httpx.RequestError):
        return None
    try:
        url = str(exc.request.url)
    except RuntimeError:  # raised before a request was made
        url = "the server"
    if isinstance(exc, httpx.ConnectTimeout):
        return CommandFailed(f"cannot connect to {url}: no answer")
    if isinstance(exc, httpx.ConnectError):  # refused, or a name that does not resolve
        return CommandFailed(f"cannot connect to {url}: {one_line(str(exc))}")
    if isinstance(exc, httpx.TimeoutException):
        return CommandFailed(f"no reply from {url} in time")
    return CommandFailed(
        f"the connection to {url} broke: {one_line(str(exc)) or type(exc).__name__}"
    )


def refusal(status: int, body: bytes) -> str:
    """An HTTP error reply in a line: ``401 unauthorized: <message>`` from our error document
    (and OpenAI's), the parameter at fault named; else the start of its body."""
    try:
        error = json.loads(body)["error"]
        said = f"{status} {error['code']}: {error['message']}"
        return one_line(said + (f" (parameter {error['param']})" if error.get("param") else ""))
    except (ValueError, KeyError, TypeError):
        return one_line(f"{status}: {body[:300].decode(errors='replace')}".rstrip(": "))


def server_url(url: str, schemes: tuple[str, ...] = ("http", "https")) -> str:
    """``url`` when it names a server by one of ``schemes``; else a usage failure."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in schemes or not parts.hostname:
        wanted = "|".join(schemes)
        raise CommandFailed(f"not a server's URL: {url!r} (expected {wanted}://HOST[:PORT])", USAGE)
    return url


def one_line(text: str) -> str:
    return " ".join(text.split())


def _say(command: str, failure: CommandFailed) -> int:
    with contextlib.suppress(OSError):  # the reader left: the line below still says why
        sys.stdout.flush()
    # Ctrl-C left the terminal's line open after "^C" (a progress bar, a turn's words)
    start = "\n" if failure.status == INTERRUPTED and sys.stderr.isatty() else ""
    print(f"{start}{command}: {failure.message}", file=sys.stderr, flush=True)
    return failure.status
