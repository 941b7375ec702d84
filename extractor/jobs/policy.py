"""How a queue times its leases, retries and shares: one frozen value each service builds from
its own settings (the queue reads no environment itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(frozen=True)
class QueuePolicy:
    """Timings and limits of one queue; every number is a documented setting of its service."""

    # A claim or a heartbeat keeps a job ours this long; a killed worker's job moves after it.
    lease_seconds: float = 60.0
    # How often a running job renews its lease (well under the lease).
    heartbeat_seconds: float = 10.0
    # How often an idle worker looks for jobs queued by another process.
    poll_seconds: float = 1.0
    # Claims after which a job that keeps killing or outliving its worker fails for good.
    max_attempts: int = 5
    # Most of the running jobs one tenant may hold while another tenant's job waits (1: no cap).
    tenant_share: float = 0.5
    # Worker time a job may use over all its runs.
    deadline_seconds: float = 7200.0
    # The longest a handler's single call may take: a stopping worker waits this for it.
    longest_call_seconds: float = 300.0
    # Payload keys dropped when a job ends: a finished job keeps no credential.
    secret_payload_keys: frozenset[str] = field(default_factory=frozenset)

    @property
    def lease(self) -> timedelta:
        """The lease as a duration, to add to timestamps."""
        return timedelta(seconds=self.lease_seconds)
