"""Prometheus metrics of live transcription, in the extractor's registry (``extractor.metrics``:
summed over the gunicorn workers and shown at ``GET /metrics``).

Both latencies are measured on the server's clock from the moment audio *arrived*, so they
leave out the network and the client's own buffering, and for a word they also leave out how
long before the end of the audio it was spoken (bench/realtime.py measures the whole of it
from the client's side):

- ``extractor_realtime_word_latency_seconds``: from the arrival of the audio up to which the
  decode that first heard a word ran, to that word's delta being handed to the socket;
- ``extractor_realtime_completed_latency_seconds``: from the arrival of a turn's last speech
  to its ``completed`` event (``silence_duration_ms`` of VAD waiting included).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

LIVE_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 5, 10, 30)

OPEN_STREAMS = Gauge(
    "extractor_realtime_streams",
    "Live transcription sessions open, summed over live workers.",
    multiprocess_mode="livesum",
)
AUDIO_SECONDS = Counter(
    "extractor_realtime_audio_seconds", "Seconds of audio received by live sessions."
)
REFUSED = Counter(
    "extractor_realtime_refused",
    "Live sessions refused or ended by a limit, by the error code sent.",
    ("code",),
)
WORD_LATENCY = Histogram(
    "extractor_realtime_word_latency_seconds",
    "Seconds from the arrival of the audio a word was first heard in to its delta.",
    buckets=LIVE_BUCKETS,
)
COMPLETED_LATENCY = Histogram(
    "extractor_realtime_completed_latency_seconds",
    "Seconds from the arrival of a turn's last speech to its completed event.",
    buckets=LIVE_BUCKETS,
)
