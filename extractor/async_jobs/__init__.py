"""Asynchronous extraction jobs (issue 21): ``POST /v1/jobs`` answers 202 at once, the job runs
on a worker thread of some ``extractor serve`` process sharing the job database, and the result
is read later (``GET /v1/jobs/{id}/result``) or announced by a signed webhook.

Modules: ``routes`` (the HTTP side), ``extraction_jobs`` (submit, read, cancel, purge),
``store`` (the tables and why uploads and results live in the database), ``handler`` and
``work`` (running one job), ``documents`` (a Document stored and read back equal),
``webhook`` and ``deliveries`` (signed calls through the SSRF guard, retried),
``runtime`` (the threads of one process), ``gauges`` (metrics read from the database),
``install`` (adding all this to the app), ``client`` (``extractor submit`` and ``extractor jobs``).
"""
