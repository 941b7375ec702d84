"""gunicorn settings for the extractor: settings only, each non-obvious choice explained."""

from __future__ import annotations

from typing import Any

from .config import Settings


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    """The gunicorn configuration that serves ``settings``."""
    return {
        "bind": settings.bind,
        "workers": settings.worker_count,
        # gthread: one thread runs the engine while the others answer /healthz and queue, so a
        # busy worker still looks alive; the engine gate bounds how many actually wait.
        "worker_class": "gthread",
        "threads": settings.threads,
        # No preload: neither torch nor CTranslate2 survives a fork, so each worker builds its
        # app and loads its models after forking (post_worker_init below).
        "preload_app": False,
        # The master only kills a worker whose main loop stops heartbeating; request threads do
        # not block it, but keep it well above the longest extraction anyway.
        "timeout": int(settings.request_timeout) + 120,
        "graceful_timeout": 60,
        # Recycle workers now and then so a slow leak in a native library cannot grow forever;
        # jitter keeps them from all reloading models at the same moment.
        "max_requests": 2000,
        "max_requests_jitter": 200,
        # The heartbeat file lives in memory rather than on a possibly slow disk.
        "worker_tmp_dir": "/dev/shm",
        "post_worker_init": _load_engines,
        "accesslog": None,  # the app logs one structured line per request itself
        "errorlog": "-",
        "loglevel": settings.log_level,
        "proc_name": "extractor",
    }


def _load_engines(worker: Any) -> None:
    """Load (and warm) this worker's engines before it accepts its first request."""
    app = worker.wsgi
    extractor = app.extensions.get("extractor") if hasattr(app, "extensions") else None
    if extractor is not None:
        extractor.load()
