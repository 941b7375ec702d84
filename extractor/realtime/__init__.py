"""Live transcription over a WebSocket: OpenAI's Realtime *transcription* protocol.

``WS /v1/realtime?intent=transcription`` takes audio as it is spoken and sends the words back
while the speaker is still talking. The parts, each in its own module:

- ``events``: the protocol's client events (parsed and checked) and server events (built);
- ``updates``: ``session.update`` and ``transcription_session.update``, each field bounded;
- ``audio``: the input formats (PCM16 at 24 kHz, 16 kHz PCM as an extension, G.711 at 8 kHz)
  turned into Whisper's 16 kHz float samples as they arrive;
- ``turns``: server_vad, Silero VAD run on the stream, deciding where speech starts and stops;
- ``agreement``: LocalAgreement-n, which turns successive hypotheses into append-only deltas;
- ``repeats``: the guard against Whisper saying the words just sent again;
- ``decoder``: Whisper (faster-whisper's tiny.en int8 model) decoding the window of a turn,
  with each word's end when asked (the word margin of ``agreement``);
- ``hypotheses``: one decode of a turn's window: the words sent forced, the earlier text as
  the prompt, repeats cut; ``items``: the decoding policy and a turn's conversation item;
- ``session``: one stream's state, turning client events into server events;
- ``scheduler``: the one thread per worker that runs every session's audio work;
- ``connection``: the WebSocket itself (wsproto), served from the worker's main loop.
"""
