"""``GET /metrics`` and the per-request counting behind it (the metrics are in ``metrics.py``)."""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, request
from prometheus_client import generate_latest

from extractor import metrics
from extractor.credentials import NOBODY
from extractor.metrics_dir import TEXT_FORMAT

blueprint = Blueprint("metrics", __name__)
UNCOUNTED_ROUTES = frozenset({"/metrics", "/healthz", "/readyz"})


@blueprint.get("/metrics")
def scrape() -> Response:
    settings = current_app.config["SETTINGS"]
    if settings.metrics_require_secret:
        from extractor.web.views import authorize

        authorize(settings)
    return Response(generate_latest(metrics.registry()), content_type=TEXT_FORMAT)


def init_app(app: Flask) -> None:
    """Serve ``/metrics`` (unless turned off) and count every request once it is answered."""
    if not app.config["SETTINGS"].metrics:
        return
    app.register_blueprint(blueprint)
    app.after_request(_count)


def _count(response: Response) -> Response:
    # The route's rule, never the raw path: a client must not be able to mint new series.
    rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
    if rule in UNCOUNTED_ROUTES:
        return response
    fields: dict[str, Any] = g.get("log_fields", {})
    kind = str(fields.get("kind") or "none")
    status = response.status_code
    # A key's name only once the key was checked: names come from the operator's keys file.
    identity = g.get("identity")
    key = identity.name if identity is not None else NOBODY
    metrics.REQUESTS.labels(rule, kind, str(fields.get("format") or "none"), str(status), key).inc()
    started = g.get("started")
    if started is not None:
        metrics.LATENCY.labels(rule).observe(time.perf_counter() - started)
    if status >= 400:
        return response
    timings = g.get("timings")
    engine = timings.stages.get("engine") if timings is not None else None
    if engine is not None:
        metrics.ENGINE_SECONDS.labels(kind).observe(engine)
    if fields.get("audio_ms"):
        metrics.AUDIO_SECONDS.inc(fields["audio_ms"] / 1000)
    if fields.get("pages"):
        metrics.PAGES.inc(fields["pages"])
    return response
