"""The server's own folders, kept out of what a client reads: error messages name files
(PyAV, Pillow, an ``OSError``), and where a server keeps them is none of a client's business.
Used by every error reply (``web/error_replies``) and by a failed job's stored error
(``async_jobs/handler``)."""

from __future__ import annotations

import os
import re
import sys
import tempfile

from extractor.config import Settings


def path_roots(settings: Settings | None = None) -> tuple[str, ...]:
    """The server's folders whose paths an error message must not show: the temporary folders
    (a request's workdir is ``<tmp>/extractor-<pid>-<start>/request-...``), the data folder,
    the working directory, the Python environment and the home folder (model caches), as
    configured and as resolved; longest first, so the most specific is replaced."""
    given = [tempfile.gettempdir(), os.getcwd(), sys.prefix, os.path.expanduser("~")]
    if settings is not None:
        given += [settings.tmp_dir or "", settings.data_dir]
    roots = {os.path.normpath(os.path.abspath(path)) for path in given if path}
    roots |= {os.path.realpath(root) for root in roots}
    return tuple(sorted((root for root in roots if len(root) > 1), key=len, reverse=True))


def without_paths(message: str, roots: tuple[str, ...]) -> str:
    """``message`` with every path under ``roots`` cut to its last part (``.../upload``):
    libraries name the file they failed on (PyAV, Pillow, an ``OSError``), and a server's
    folders are none of a client's business."""
    if not roots:
        return message
    pattern = re.compile(
        "(?:" + "|".join(re.escape(root) for root in roots) + r")(?=/|\b)(/[^\s'\"`,;:()]*)?"
    )

    def cut(match: re.Match[str]) -> str:
        rest = (match.group(1) or "").rstrip("/.")
        return "..." + rest[rest.rfind("/") :] if rest else "..."

    return pattern.sub(cut, message)
