"""Silero VAD v6 in numpy: the voice activity model faster-whisper ships, without onnxruntime.

faster-whisper runs its VAD through onnxruntime, which costs a worker ~34 MB of RSS for a 1.2 MB
model (17 MB for the library's import, 11 MB for the session, 6 MB kept after the first run)
and sits under every transcription's peak. The network is small (an STFT as a convolution, four
convolutions, one LSTM cell, a sigmoid), so it runs here in numpy, from the same weights read out
of faster-whisper's own ``silero_vad_v6.onnx``, and faster (60 ms against 103 ms for 60 s).

``install()`` makes faster-whisper's ``get_speech_timestamps`` use it; faster-whisper keeps all
of its own post-processing (thresholds, padding, chunking). The probabilities match onnxruntime's
to 1e-5 (``tests/test_silero.py`` compares them on real speech); if a faster-whisper release
ships a model of another shape, ``install()`` leaves onnxruntime in place and says so.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MODEL_FILE = "silero_vad_v6.onnx"
HIDDEN = 128  # LSTM state size
WINDOW = 512  # samples per probability at 16 kHz
CONTEXT = 64  # samples of the previous window prepended to each
BATCH = 1024  # windows per pass (~33 s of audio): bounds the scratch memory, not the result

# Every weight the network uses, by its name in the ONNX file, with its shape.
SHAPES: dict[str, tuple[int, ...]] = {
    "encoder.feature_extractor.forward_basis_buffer": (258, 1, 256),
    "encoder.conv_layers.0.weight": (128, 129, 3),
    "encoder.conv_layers.0.bias": (128,),
    "encoder.conv_layers.1.weight": (64, 128, 3),
    "encoder.conv_layers.1.bias": (64,),
    "encoder.conv_layers.2.weight": (64, 64, 3),
    "encoder.conv_layers.2.bias": (64,),
    "encoder.conv_layers.3.weight": (128, 64, 3),
    "encoder.conv_layers.3.bias": (128,),
    "decoder.conv1d.weight": (1, 128, 1),
    "decoder.conv1d.bias": (1,),
    "onnx::LSTM_209": (1, 4 * HIDDEN, HIDDEN),  # input weights, gates i, o, f, c
    "onnx::LSTM_210": (1, 4 * HIDDEN, HIDDEN),  # recurrent weights
    "onnx::LSTM_211": (1, 8 * HIDDEN),  # input biases then recurrent biases
}
# The encoder's four convolutions: kernel 3, padding 1, and these strides (from the ONNX graph).
CONV_STRIDES = (1, 2, 2, 1)
STFT_HOP = 128
STFT_PAD = 128  # reflected samples on each side of a window


class ModelMismatch(Exception):
    """The ONNX file is not the Silero v6 network this module implements."""


def model_path() -> Path:
    from faster_whisper.utils import get_assets_path

    return Path(get_assets_path()) / MODEL_FILE


# -- reading the weights: the few protobuf fields of an ONNX file that hold them -----------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """A protobuf message's (field number, wire type, value) triples, in order."""
    out, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ModelMismatch(f"unexpected protobuf wire type {wire}")
        out.append((number, wire, value))
    return out


# ONNX's protobuf field numbers: ModelProto.graph, GraphProto.initializer, and TensorProto's.
MODEL_GRAPH, GRAPH_INITIALIZER = 7, 5
TENSOR_DIMS, TENSOR_TYPE, TENSOR_FLOATS, TENSOR_NAME, TENSOR_RAW = 1, 2, 4, 8, 9
ONNX_FLOAT = 1


def _tensor(message: bytes) -> tuple[str, np.ndarray | None]:
    name, dims, dtype, raw, floats = "", [], None, None, b""
    for number, wire, value in _fields(message):
        if number == TENSOR_DIMS:
            if wire == 2:  # packed
                pos = 0
                while pos < len(value):
                    dim, pos = _varint(value, pos)
                    dims.append(dim)
            else:
                dims.append(value)
        elif number == TENSOR_TYPE:
            dtype = value
        elif number == TENSOR_NAME:
            name = value.decode()
        elif number == TENSOR_RAW:
            raw = value
        elif number == TENSOR_FLOATS:  # packed, or one 32-bit field per float
            floats += value
    if dtype != ONNX_FLOAT or (raw is None and not floats):
        return name, None
    array = np.frombuffer(raw if raw is not None else floats, dtype="<f4")
    return name, array.reshape(dims).astype(np.float32)


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """The float initializers of the ONNX file at ``path`` that this network needs, checked."""
    found: dict[str, np.ndarray] = {}
    for number, _wire, graph in _fields(path.read_bytes()):
        if number != MODEL_GRAPH:
            continue
        for field, _w, message in _fields(graph):
            if field == GRAPH_INITIALIZER:
                name, array = _tensor(message)
                if name in SHAPES and array is not None:
                    found[name] = array
    for name, shape in SHAPES.items():
        if name not in found or found[name].shape != shape:
            got = found[name].shape if name in found else "missing"
            raise ModelMismatch(f"{path.name}: {name} is {got}, expected {shape}")
    return found


# -- the network -----------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _conv3(x: np.ndarray, taps: list[np.ndarray], bias: np.ndarray, stride: int) -> np.ndarray:
    """Conv1d, kernel 3, padding 1, then ReLU, channels last: (n, t, in) -> (n, t', out).

    One matrix product per kernel tap (BLAS), where an einsum over all three was 30x slower."""
    padded = np.pad(x, ((0, 0), (1, 1), (0, 0)))
    steps = (padded.shape[1] - 3) // stride + 1
    out = bias + padded[:, 0 : stride * (steps - 1) + 1 : stride] @ taps[0]
    for k in (1, 2):
        out += padded[:, k : k + stride * (steps - 1) + 1 : stride] @ taps[k]
    return np.maximum(out, 0.0, out=out)  # every one is followed by a ReLU


class SileroVad:
    """Speech probability per 512-sample window, with the interface of faster-whisper's
    ``SileroVADModel``: ``model(audio)`` for audio whose length is a multiple of 512."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self._basis = weights["encoder.feature_extractor.forward_basis_buffer"][:, 0, :].T
        self._convs = []  # per layer: one (in, out) matrix per kernel tap, and the bias
        for i in range(4):
            weight = weights[f"encoder.conv_layers.{i}.weight"]
            taps = [np.ascontiguousarray(weight[:, :, k].T) for k in range(3)]
            self._convs.append((taps, weights[f"encoder.conv_layers.{i}.bias"]))
        self._w_in = weights["onnx::LSTM_209"][0].T.copy()  # (128, 512)
        self._w_rec = weights["onnx::LSTM_210"][0].T.copy()  # (128, 512)
        biases = weights["onnx::LSTM_211"][0]
        self._bias = biases[: 4 * HIDDEN] + biases[4 * HIDDEN :]
        self._w_out = weights["decoder.conv1d.weight"][0, :, 0]
        self._b_out = float(weights["decoder.conv1d.bias"][0])

    def __call__(
        self, audio: np.ndarray, num_samples: int = WINDOW, context_size_samples: int = CONTEXT
    ) -> np.ndarray:
        if audio.ndim != 1 or num_samples != WINDOW or context_size_samples != CONTEXT:
            raise ValueError("expected 1-D audio, windows of 512 samples and 64 of context")
        if audio.shape[0] % WINDOW:
            raise ValueError("the audio's length must be a multiple of 512 samples")
        windows = audio.astype(np.float32, copy=False).reshape(-1, WINDOW)
        h = np.zeros(HIDDEN, np.float32)
        c = np.zeros(HIDDEN, np.float32)
        out = np.empty(len(windows), np.float32)
        for start in range(0, len(windows), BATCH):
            batch = windows[start : start + BATCH]
            context = np.empty((len(batch), CONTEXT), np.float32)
            # Each window sees the last 64 samples of the one before (zeros for the first).
            context[0] = windows[start - 1, -CONTEXT:] if start else 0.0
            context[1:] = batch[:-1, -CONTEXT:]
            features = self._encode(np.concatenate([context, batch], axis=1))
            out[start : start + len(batch)], h, c = self._decode(features, h, c)
        return out

    def _encode(self, rows: np.ndarray) -> np.ndarray:
        """(n, 576) samples -> (n, 128): STFT magnitudes through the four convolutions."""
        padded = np.pad(rows, ((0, 0), (STFT_PAD, STFT_PAD)), mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(padded, 256, axis=1)[:, ::STFT_HOP]
        spectrum = frames[:, 1:] @ self._basis  # the graph drops the first frame: (n, 4, 258)
        bins = self._basis.shape[1] // 2
        magnitude = np.sqrt(spectrum[..., :bins] ** 2 + spectrum[..., bins:] ** 2)
        x = magnitude  # (n, 4, 129): frames, then frequency bins as channels
        for (taps, bias), stride in zip(self._convs, CONV_STRIDES, strict=True):
            x = _conv3(x, taps, bias, stride)
        return np.ascontiguousarray(x[:, 0, :])  # (n, 128): one step of the LSTM per window

    def _decode(
        self, features: np.ndarray, h: np.ndarray, c: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The LSTM over the windows in order (ONNX gate order i, o, f, c), then the head."""
        projected = features @ self._w_in + self._bias
        states = np.empty((len(features), HIDDEN), np.float32)
        w_rec, n = self._w_rec, HIDDEN
        for t in range(len(features)):
            gates = projected[t] + h @ w_rec
            i, o, f = _sigmoid(gates[: 3 * n]).reshape(3, n)
            c = f * c + i * np.tanh(gates[3 * n :])
            h = o * np.tanh(c)
            states[t] = h
        probs = _sigmoid(np.maximum(states, 0.0) @ self._w_out + self._b_out)
        return probs.astype(np.float32), h, c


@functools.lru_cache(maxsize=1)
def load() -> SileroVad:
    """The network with faster-whisper's weights (read once per process)."""
    return SileroVad(read_weights(model_path()))


def install() -> bool:
    """Make faster-whisper's VAD run on ``SileroVad``; False (onnxruntime stays) if the model
    it ships is not the one implemented here."""
    import faster_whisper.vad

    if faster_whisper.vad.get_vad_model is load:
        return True
    try:
        load()
    except (ModelMismatch, OSError, ValueError, IndexError) as exc:
        log.warning("VAD stays on onnxruntime", extra={"error": str(exc)})
        return False
    # faster-whisper looks its model up through this module-level function on every call.
    faster_whisper.vad.get_vad_model = load
    return True


class SileroStream:
    """Speech probabilities of audio that arrives in pieces (a live stream): the LSTM state
    and the previous window's last 64 samples are carried from one piece to the next, so the
    probabilities are those of the whole stream given at once."""

    def __init__(self, model: SileroVad | None = None) -> None:
        self.model = model or load()
        self._h = np.zeros(HIDDEN, np.float32)
        self._c = np.zeros(HIDDEN, np.float32)
        self._context = np.zeros(CONTEXT, np.float32)
        self._pending = np.zeros(0, np.float32)  # samples short of a whole window

    def feed(self, audio: np.ndarray) -> np.ndarray:
        """One probability per whole 512-sample window completed by ``audio`` (16 kHz)."""
        samples = np.concatenate([self._pending, audio.astype(np.float32, copy=False)])
        whole = len(samples) - len(samples) % WINDOW
        self._pending = samples[whole:].copy()
        if not whole:
            return np.zeros(0, np.float32)
        windows = samples[:whole].reshape(-1, WINDOW)
        context = np.empty((len(windows), CONTEXT), np.float32)
        context[0] = self._context
        context[1:] = windows[:-1, -CONTEXT:]
        self._context = windows[-1, -CONTEXT:].copy()
        features = self.model._encode(np.concatenate([context, windows], axis=1))
        probs, self._h, self._c = self.model._decode(features, self._h, self._c)
        return probs
