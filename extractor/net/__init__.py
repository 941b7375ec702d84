"""Outbound network calls to addresses that clients name (a labeling prediction API, an
extraction job's webhook), guarded against server-side request forgery.

A lower layer than both services: ``ssrf`` decides which destinations may be reached (the
default refusals plus an allow-list), ``guarded`` resolves, checks and connects as one step so a
socket only ever goes to an address that passed, and ``errors`` names the failures. It imports
nothing of the project.
"""
