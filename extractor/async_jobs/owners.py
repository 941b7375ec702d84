"""Whose a job is: the owner the job queue keeps with it (``jobs.owner_id``), and by which it
answers reads, lists and cancels, so one owner never sees another's jobs.

Each named API key (``EXTRACTOR_API_KEYS``) owns its jobs by its name, ``key:<name>``: a key
renamed starts afresh, a key rotated under the same name keeps them. The shared secret, and a
deployment with no credential at all, are the one owner ``extractor`` every job had before
there were keys, so existing clients keep seeing their jobs and no key's jobs reach them.
"""

from __future__ import annotations

from extractor.credentials import Identity

SHARED_OWNER = "extractor"  # the shared secret's (and an open deployment's) jobs
KEY_PREFIX = "key:"  # + a key's name (at most 32 characters: the queue's column takes 36)


def owner_of(identity: Identity) -> str:
    """The owner of the jobs ``identity`` submits, and sees."""
    return KEY_PREFIX + identity.name if identity.keyed else SHARED_OWNER


__all__ = ["KEY_PREFIX", "SHARED_OWNER", "owner_of"]
