"""Run a Flask app factory under gunicorn, one app built per worker after the fork."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gunicorn.app.base import BaseApplication


class FactoryApplication(BaseApplication):
    """A gunicorn application that calls ``factory`` in each worker.

    Nothing is preloaded in the master: torch and CTranslate2 do not survive a fork, so every
    worker builds its own app (and loads its own engines in the ``post_worker_init`` hook).
    """

    def __init__(self, factory: Callable[[], Any], options: Mapping[str, Any]) -> None:
        self._factory = factory
        self._options = dict(options)
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            if value is not None and key in self.cfg.settings:
                self.cfg.set(key.lower(), value)

    def load(self) -> Any:
        return self._factory()


def serve(factory: Callable[[], Any], options: Mapping[str, Any]) -> None:
    """Serve the app built by ``factory`` under gunicorn until interrupted."""
    FactoryApplication(factory, options).run()
