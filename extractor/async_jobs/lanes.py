"""Which webhook deliveries a server may start now, so a slow or dead receiver delays only its
own calls.

Every attempt runs on a sender thread of its own (EXTRACTOR_WEBHOOK_SENDERS per server process)
and nothing waits for another attempt to end. Three limits keep one receiver or one client from
holding those threads:

- per destination (``scheme://host:port``): at most EXTRACTOR_WEBHOOK_SENDS_PER_HOST attempts
  in flight;
- per client (the submitting address): at most EXTRACTOR_WEBHOOK_SENDS_PER_CLIENT in flight,
  whichever destinations its callbacks name;
- a circuit breaker per destination: after ``BREAKER_FAILURES`` attempts in a row that timed
  out, could not connect or got a 5xx, the destination is not called for ``BREAKER_SECONDS``
  (doubling while it keeps failing, at most ``BREAKER_MAX_SECONDS``); the deliveries due
  meanwhile are each counted a failed attempt without a call (one statement for them all) and
  are due again when the pause ends. Then one attempt goes through: a success closes the
  breaker, a failure opens it again.

The state is this process's own (each server process judges the receivers it calls); what a
delivery is (due, leased, attempts) stays in the database.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

BREAKER_FAILURES = 3  # failed attempts in a row that open a destination's breaker
BREAKER_SECONDS = 30.0  # the first pause of an open breaker
BREAKER_MAX_SECONDS = 300.0  # the longest pause (as the longest backoff between attempts)


def destination(url: str) -> str:
    """A stored callback URL's ``scheme://host[:port]``: the text before its path.

    Stored URLs are normalised when a job is submitted (``check_callback_url``), so one
    destination is always spelled alike, and this prefix of the text is what the database is
    asked to leave out while the destination is busy.
    """
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0].split('?', 1)[0].split('#', 1)[0]}"


@dataclass
class Breaker:
    """One destination's failures in a row and, when open, until when it is not called."""

    failures: int = 0
    opened: int = 0  # times opened in a row, doubling the pause
    open_until: float = 0.0  # monotonic seconds
    trial: bool = False  # the one attempt after a pause is in flight


class Lanes:
    """In-flight counts per destination and per client, and the breakers; thread-safe."""

    def __init__(
        self,
        senders: int,
        per_host: int,
        per_client: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.senders = senders
        self.per_host = per_host
        self.per_client = per_client
        self._clock = clock
        self._lock = threading.Lock()
        self._hosts: Counter[str] = Counter()
        self._clients: Counter[str] = Counter()
        self._breakers: dict[str, Breaker] = {}

    @property
    def free(self) -> int:
        """Sender threads not in use."""
        with self._lock:
            return self.senders - sum(self._hosts.values())

    def busy(self) -> tuple[list[str], list[str]]:
        """The destinations and the clients that may start no attempt now (at their limit, or
        a breaker's trial in flight)."""
        with self._lock:
            hosts = [h for h, n in self._hosts.items() if n >= self.per_host]
            hosts += [h for h, b in self._breakers.items() if b.trial and h not in hosts]
            clients = [c for c, n in self._clients.items() if n >= self.per_client]
            return hosts, clients

    def paused(self, host: str) -> float:
        """Seconds ``host``'s breaker stays open; 0 when it may be called."""
        with self._lock:
            breaker = self._breakers.get(host)
            if breaker is None:
                return 0.0
            return max(0.0, breaker.open_until - self._clock())

    def failures(self, host: str) -> int:
        with self._lock:
            breaker = self._breakers.get(host)
            return 0 if breaker is None else breaker.failures

    def acquire(self, host: str, client: str) -> bool:
        """Count an attempt to ``host`` for ``client`` in flight, if every limit allows it."""
        with self._lock:
            if sum(self._hosts.values()) >= self.senders:
                return False
            if self._hosts[host] >= self.per_host or self._clients[client] >= self.per_client:
                return False
            breaker = self._breakers.get(host)
            if breaker is not None and breaker.opened:
                if breaker.trial or breaker.open_until > self._clock():
                    return False
                breaker.trial = True  # half open: this attempt decides
            self._hosts[host] += 1
            self._clients[client] += 1
            return True

    def release(self, host: str, client: str, failed: bool | None) -> None:
        """An attempt ended: ``failed`` True when the receiver timed out, could not be reached
        or answered 5xx, False when it answered otherwise, None when no call was made."""
        with self._lock:
            self._hosts[host] -= 1
            if self._hosts[host] <= 0:
                del self._hosts[host]
            self._clients[client] -= 1
            if self._clients[client] <= 0:
                del self._clients[client]
            breaker = self._breakers.get(host)
            if failed is None:
                if breaker is not None:
                    breaker.trial = False
                return
            if not failed:
                self._breakers.pop(host, None)
                return
            if breaker is None:
                breaker = self._breakers[host] = Breaker()
            breaker.failures += 1
            already_open = breaker.open_until > self._clock() and not breaker.trial
            # An attempt that was in flight when the breaker opened does not open it again.
            if not already_open and (breaker.trial or breaker.failures >= BREAKER_FAILURES):
                pause = min(BREAKER_MAX_SECONDS, BREAKER_SECONDS * 2.0**breaker.opened)
                breaker.opened += 1
                breaker.open_until = self._clock() + pause
            breaker.trial = False
            # Bounded: a destination that keeps failing has one entry however many jobs name it,
            # and one that answers again loses it.
            if len(self._breakers) > 10_000:
                self._forget_closed()

    def _forget_closed(self) -> None:
        now = self._clock()
        for host in [h for h, b in self._breakers.items() if not b.opened or b.open_until < now]:
            del self._breakers[host]
