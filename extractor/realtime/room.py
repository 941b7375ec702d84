"""Which workers of a server have room for another live stream.

Every worker's main loop waits on the same listening socket and whichever accepts first gets a
new connection; what it is (a WebSocket or a request) shows only once its head is in. A worker
already holding its ``EXTRACTOR_REALTIME_SESSIONS`` streams refuses one more (close 1013), so
before this a stream could be refused while a sibling had room: ``bench.realtime``'s three
streams on two workers of two sessions lost one that way. Now each worker publishes its room
(streams it would still take) in a page of memory the master maps before forking the workers,
shared by them and by no other server, and a full worker leaves the listening socket to its
siblings while one of them has room (``extractor.server.gunicorn_conf``), for a bounded time.

A slot per worker: the master gives each new worker a free one before forking it and empties it
when the worker exits; only the worker writes its room there (a 4-byte store), and beside it
the client addresses of its streams (a hash each), so that a worker admitting a stream counts
what that address holds on every worker (EXTRACTOR_REALTIME_SESSIONS_PER_CLIENT). Two workers
admitting the same address at the same instant may both see the other's stream not yet
published; each is then one over, at most.
"""

from __future__ import annotations

import mmap
import zlib
from collections.abc import Iterable

EMPTY = -1  # no worker in the slot
NO_CLIENT = 0  # an unused client entry
CLIENTS_PER_SLOT = 63  # client entries a worker publishes (its streams past this go uncounted)
SLOT_INTS = 1 + CLIENTS_PER_SLOT  # the room, then the client entries


def client_key(address: str) -> int:
    """A client address as a nonzero 31-bit number, the same in every process."""
    return zlib.crc32(address.encode()) & 0x7FFFFFFF or 1


class LiveRoom:
    """The room of every worker of one server, in memory shared across fork."""

    def __init__(self, slots: int) -> None:
        # An anonymous mapping is MAP_SHARED: the forked workers write into the master's page.
        self.slots = max(slots, 1)
        self._map = mmap.mmap(-1, self.slots * SLOT_INTS * 4)
        self._ints = memoryview(self._map).cast("i")
        for slot in range(self.slots):
            self.release(slot)

    def free_slot(self, taken: Iterable[int | None]) -> int | None:
        """A slot no running worker holds (the master, before forking), or None: that worker
        then neither publishes nor defers, as if alone."""
        used = set(taken)
        for slot in range(self.slots):
            if slot not in used:
                self.release(slot)
                return slot
        return None

    def publish(self, slot: int | None, room: int) -> None:
        if slot is not None:
            self._ints[slot * SLOT_INTS] = max(room, 0)

    def publish_clients(self, slot: int | None, addresses: Iterable[str]) -> None:
        """The client addresses of the worker's open streams, one per stream."""
        if slot is None:
            return
        keys = [client_key(address) for address in addresses][:CLIENTS_PER_SLOT]
        first = slot * SLOT_INTS + 1
        for index in range(CLIENTS_PER_SLOT):
            self._ints[first + index] = keys[index] if index < len(keys) else NO_CLIENT

    def release(self, slot: int | None) -> None:
        if slot is not None:
            self._ints[slot * SLOT_INTS] = EMPTY
            self.publish_clients(slot, [])

    def elsewhere(self, slot: int | None) -> bool:
        """Whether a worker other than the one in ``slot`` has room for a stream."""
        return any(
            self._ints[other * SLOT_INTS] > 0 for other in range(self.slots) if other != slot
        )

    def clients_elsewhere(self, slot: int | None, address: str) -> int:
        """The streams of client ``address`` on workers other than the one in ``slot``."""
        key = client_key(address)
        return sum(
            self._ints[other * SLOT_INTS + 1 : (other + 1) * SLOT_INTS].tolist().count(key)
            for other in range(self.slots)
            if other != slot
        )
