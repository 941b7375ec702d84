"""Outbound network calls to addresses that clients name (a labeling prediction API, an
extraction job's webhook), guarded against server-side request forgery.

A lower layer than both services: ``client`` makes a call (attempts, retries, redirect hops, the
reply read within its cap) under each use's ``policies`` (``Limits``, ``RetryPolicy``), over the
transport of ``guarded``, which resolves, checks and connects as one step so a socket only ever
goes to an address that passed; ``ssrf`` decides which destinations may be reached (the default
refusals plus an allow-list), and ``errors`` names the failures. It imports nothing of the
project.
"""
