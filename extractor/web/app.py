"""The Flask app factory: settings, the worker's engines, and the views of ``views.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from extractor.async_jobs.install import install_jobs
from extractor.config import Settings
from extractor.credentials import credentials
from extractor.logs import configure_logging
from extractor.pipeline.extraction import Extractor
from extractor.replies.schemas import importable_validator
from extractor.web import error_replies, jobs, metrics_view, openai_api
from extractor.web.views import views

MULTIPART_SLACK = 64 * 1024  # bytes of form framing allowed on top of the file itself


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """Build the app: defaults, then ``EXTRACTOR_*`` variables, then ``config`` on top.

    Engines are created here but loaded later (``Extractor.load``), by gunicorn's
    ``post_worker_init`` or on first use, so building an app is cheap and fork-safe.
    """
    settings = config if isinstance(config, Settings) else Settings.load(overrides=config)
    configure_logging(settings.log_level)
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_upload_bytes + MULTIPART_SLACK
    app.config["SETTINGS"] = settings
    credentials(settings)  # a bad EXTRACTOR_API_KEYS file stops the start here
    extractor = app.extensions["extractor"] = Extractor(settings)
    importable_validator()  # a broken contract file fails here, not on the first reply
    app.register_blueprint(views)
    app.register_blueprint(openai_api.blueprint)
    install_jobs(app, settings, extractor)
    app.register_blueprint(jobs.blueprint)
    error_replies.init_app(app)
    metrics_view.init_app(app)
    return app
