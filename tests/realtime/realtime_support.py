"""Speech for the live transcription tests: espeak-ng's voice as the formats clients send."""

from __future__ import annotations

import base64
import functools
import io
import json
import re
import urllib.request
import wave
from typing import Any

import av
import httpx
import numpy as np
from support import ALIKE as ALIKE  # the live tests take them from here with the rest
from support import likeness as likeness
from support import transcript_words

from extractor.samples import decode_wav, speech_wav

FIRST = "The quick brown fox jumps over the lazy dog."
SECOND = "Please call Stella and ask her to bring these things with her from the store."


@functools.cache
def pcm(text: str, rate: int = 24_000) -> bytes:
    """``text`` spoken, as PCM16 mono little-endian at ``rate``."""
    samples, source_rate = decode_wav(speech_wav(text))
    resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
    frame = av.AudioFrame.from_ndarray(samples[:1].copy(), format="flt", layout="mono")
    frame.sample_rate = source_rate
    out = [*resampler.resample(frame), *resampler.resample(None)]
    return b"".join(bytes(f.planes[0])[: f.samples * 2] for f in out)


def g711(pcm16: bytes, codec: str, rate: int = 8_000) -> bytes:
    """PCM16 mono at ``rate`` encoded by PyAV's ``pcm_mulaw`` or ``pcm_alaw`` (one byte a sample)."""
    context = av.CodecContext.create(codec, "w")
    context.sample_rate, context.layout, context.format = rate, "mono", "s16"
    frame = av.AudioFrame(format="s16", layout="mono", samples=len(pcm16) // 2)
    frame.planes[0].update(pcm16)
    frame.sample_rate = rate
    return b"".join(bytes(p) for p in [*context.encode(frame), *context.encode(None)])


def silence(seconds: float, rate: int = 24_000) -> bytes:
    return bytes(int(seconds * rate) * 2)


def noise(seconds: float, rate: int = 24_000, level: float = 0.03, seed: int = 7) -> bytes:
    """Room noise: a low hum, a fan's broadband hiss, and clicks now and then."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    hiss = np.convolve(rng.normal(0, level, len(t)), np.ones(8) / 8, mode="same")
    hum = level * 0.5 * np.sin(2 * np.pi * 60 * t)
    clicks = (rng.random(len(t)) < 0.0005) * rng.normal(0, level * 4, len(t))
    return (np.clip(hiss + hum + clicks, -1, 1) * 32767).astype("<i2").tobytes()


def appends(audio: bytes, chunk_ms: int = 40, rate: int = 24_000) -> list[str]:
    """``audio`` as input_audio_buffer.append messages of ``chunk_ms`` each."""
    size = rate * 2 * chunk_ms // 1000
    return [append(audio[i : i + size]) for i in range(0, len(audio), size)]


def append(data: bytes) -> str:
    return json.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(data).decode()}
    )


def heard_alone(decoder: Any, speech: str | np.ndarray) -> list[str]:
    """The words the live ``decoder`` hears in ``speech`` (a text espeak-ng says, or 16 kHz
    samples), decoded whole in one window with a turn's final beam: the same engine run alone
    on the same audio."""
    samples = speech
    if isinstance(speech, str):
        samples = np.frombuffer(pcm(speech, 16_000), "<i2").astype(np.float32) / 32768
    audio = np.concatenate([samples, np.zeros(8_000, np.float32)])  # 0.5 s after, as a turn
    return transcript_words(" ".join(decoder.decode(audio, beam_size=5)))


def extracted(url: str, pcm16: bytes, secret: str | None = None, rate: int = 24_000) -> list[str]:
    """The words the server at ``url`` hears in ``pcm16`` (mono, ``rate``) through POST
    /extract: its file engine run alone on the audio a live session was sent."""
    wav = io.BytesIO()
    with wave.open(wav, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm16)
    headers = {"Accept": "text/plain"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    files = {"upload": ("turn.wav", wav.getvalue(), "audio/wav")}
    reply = httpx.post(url + "/extract", files=files, headers=headers, timeout=300)
    reply.raise_for_status()
    return transcript_words(reply.text)


def live_metric(url: str, name: str) -> float:
    """The server's value of the unlabelled metric ``name`` at its /metrics (0 until a worker
    has written it)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        found = re.search(rf"^{re.escape(name)} (\S+)$", reply.read().decode(), re.M)
    return float(found.group(1)) if found else 0.0
