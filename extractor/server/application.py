"""Run a Flask app factory under gunicorn, one app built per worker after the fork."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from gunicorn.app.base import BaseApplication

from extractor.server.intake import IntakeLimits


class FactoryApplication(BaseApplication):
    """A gunicorn application that calls ``factory`` in each worker.

    Nothing is preloaded in the master: torch and CTranslate2 do not survive a fork, so every
    worker builds its own app (and loads its own engines in the ``post_worker_init`` hook).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        options: Mapping[str, Any],
        intake_limits: IntakeLimits | None = None,
    ) -> None:
        self._factory = factory
        self._options = dict(options)
        # Read by extractor.server.buffering_worker.BufferingThreadWorker in each worker.
        self.intake_limits = intake_limits
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            if value is not None and key in self.cfg.settings:
                self.cfg.set(key.lower(), value)

    def load(self) -> Any:
        return self._factory()


def serve(
    factory: Callable[[], Any],
    options: Mapping[str, Any],
    intake_limits: IntakeLimits | None = None,
) -> None:
    """Serve the app built by ``factory`` under gunicorn until interrupted; a
    ``BufferingThreadWorker`` receives requests within ``intake_limits``."""
    FactoryApplication(factory, options, intake_limits).run()


def beyond_loopback(bind: str) -> list[str]:
    """The addresses of a gunicorn ``bind`` (comma-separated, as gunicorn reads it) that other
    machines may reach: anything but a loopback IP, ``localhost`` or a Unix socket.

    A host name other than ``localhost`` counts as reachable: it is not resolved here, and it
    may name a public interface.
    """
    reachable = []
    for address in (a.strip() for a in bind.split(",")):
        if not address or address.startswith(("unix:", "fd://")):
            continue
        host = address
        if address.startswith("["):
            host = address[1 : address.find("]")] if "]" in address else address
        elif address.count(":") == 1:
            host = address.partition(":")[0]
        if not _is_loopback(host):
            reachable.append(address)
    return reachable


def _is_loopback(host: str) -> bool:
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name, or '' (every interface)
        return False
