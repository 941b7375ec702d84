"""The labeling service's app factory: settings, the app's state, and the routes of
``labeling/views.py``."""

from __future__ import annotations

from flask import Flask

from extractor.config import LabelingSettings
from extractor.labeling.state import EXTENSION, LabelingState, build_state, queue_policy
from extractor.labeling.views import metrics_views, views

# The state's builders stay importable from here, where callers looked for them before.
__all__ = ["LabelingState", "build_state", "create_labeling_app", "queue_policy"]


def create_labeling_app(
    settings: LabelingSettings | None = None, *, start_workers: bool = False
) -> Flask:
    """Build the app; nothing runs at import, and worker threads only when asked.

    ``serve`` builds one app per gunicorn worker (after the fork) with ``start_workers=True``;
    tests start and stop them through ``app.extensions["labeling"]``.
    """
    settings = settings or LabelingSettings.load()
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_upload_bytes
    # Each non-file field of a multipart request: `operations` and `map` are JSON texts.
    app.config["MAX_FORM_MEMORY_SIZE"] = settings.max_request_json_bytes
    state = build_state(settings)
    app.extensions[EXTENSION] = state
    app.register_blueprint(views)
    if settings.metrics:
        app.register_blueprint(metrics_views)
    if start_workers:
        state.start_workers()
    return app
