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
when the worker exits; only the worker writes its room there (a 4-byte store).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable

EMPTY = -1  # no worker in the slot


class LiveRoom:
    """The room of every worker of one server, in memory shared across fork."""

    def __init__(self, slots: int) -> None:
        # An anonymous mapping is MAP_SHARED: the forked workers write into the master's page.
        self._map = mmap.mmap(-1, max(slots, 1) * 4)
        self._rooms = memoryview(self._map).cast("i")
        for slot in range(len(self._rooms)):
            self._rooms[slot] = EMPTY

    def free_slot(self, taken: Iterable[int | None]) -> int | None:
        """A slot no running worker holds (the master, before forking), or None: that worker
        then neither publishes nor defers, as if alone."""
        used = set(taken)
        for slot in range(len(self._rooms)):
            if slot not in used:
                self._rooms[slot] = EMPTY
                return slot
        return None

    def publish(self, slot: int | None, room: int) -> None:
        if slot is not None:
            self._rooms[slot] = max(room, 0)

    def release(self, slot: int | None) -> None:
        if slot is not None:
            self._rooms[slot] = EMPTY

    def elsewhere(self, slot: int | None) -> bool:
        """Whether a worker other than the one in ``slot`` has room for a stream."""
        return any(room > 0 for other, room in enumerate(self._rooms) if other != slot)
