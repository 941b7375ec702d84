"""Serving the web app with gunicorn: the application, its settings-only config, and the worker
that receives every request whole before a thread sees it (so slow clients hold no thread)."""
