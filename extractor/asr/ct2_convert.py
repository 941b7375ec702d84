"""Convert a CTranslate2 Whisper model directory into an openai-whisper checkpoint.

The default ASR engine ships a CTranslate2 (faster-whisper) model; the optional
openai-whisper engine needs the same weights as a ``.pt`` checkpoint, so this module
reads CTranslate2's ``model.bin`` directly (numpy only) and rewrites it with
openai-whisper's parameter names.  Torch is imported lazily so that importing this
module costs nothing for the default engine.

Binary layout of ``model.bin`` (see ``ctranslate2/specs/model_spec.py::_serialize``),
all integers little-endian::

    u32 binary_version
    str spec_name, u32 spec_revision                  (binary_version >= 2)
    u32 num_variables
      str name, u8 rank, u32[rank] shape, u8 dtype_id, u32 num_bytes, bytes data
    u32 num_aliases                                   (binary_version >= 3)
      str alias, str variable_name

where ``str`` is ``u16 length_including_nul`` + UTF-8 bytes + NUL.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import gzip
import hashlib
import json
import logging
import os
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "CT2Model",
    "ModelConversionError",
    "cached_openai_checkpoint",
    "convert_ct2_to_openai",
    "load_openai_model",
    "read_ct2_model",
]

#: Bump when the produced checkpoint changes, so cached conversions are redone.
CONVERTER_VERSION = 1

_MIN_BINARY_VERSION = 4  # dtype ids per variable appeared in binary version 4.
_MAX_BINARY_VERSION = 6  # CTranslate2 4.x writes version 6.
_MAX_RANK = 8

# Order of ctranslate2's DataType enum (model_spec._dtype_to_type_id).
_DTYPES: dict[int, str] = {
    0: "float32",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "float16",
    5: "bfloat16",
}
_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "int8": np.dtype("i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),  # raw bits; widened to float32 on use.
}

_GELU = 3  # ctranslate2.specs.common_spec.Activation.GELU
# Scalars whose value must match openai-whisper's architecture (absent is fine).
_EXPECTED_SCALARS: dict[str, int] = {
    "decoder/activation": _GELU,
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/alibi": 0,
    "decoder/start_from_zero_embedding": 0,
}
# Scalars that only tune CTranslate2's runtime and do not affect the weights.
_IGNORED_SCALARS = frozenset(
    {
        "decoder/alignment_heads",
        "decoder/alignment_layer",
        "decoder/num_heads",
        "encoder/num_heads",
        # ALiBi options only matter when decoder/alibi is set, which is rejected.
        "decoder/alibi_use_positive_positions",
        "decoder/scale_alibi",
    }
)
_WHISPER_HEAD_DIM = 64  # Every official Whisper size uses 64-dimensional heads.


class ModelConversionError(ValueError):
    """Raised when a CTranslate2 model cannot be read or mapped to openai-whisper."""


@dataclasses.dataclass(frozen=True)
class CT2Model:
    """Parsed content of a CTranslate2 ``model.bin`` (raw arrays, aliases resolved lazily)."""

    spec: str
    revision: int
    binary_version: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]

    def resolve(self, name: str) -> str:
        """Follow aliases (and the scale of an aliased weight) to a stored variable name."""
        seen: set[str] = set()
        while name not in self.variables:
            if name in seen:
                raise ModelConversionError(f"alias cycle at {name!r} in model.bin")
            seen.add(name)
            if name in self.aliases:
                name = self.aliases[name]
                continue
            # CTranslate2 also aliases "<x>_scale" when "<x>" is an alias.
            for suffix in ("_scale", "_zero"):
                base = name.removesuffix(suffix)
                if base != name and base in self.aliases:
                    name = self.aliases[base] + suffix
                    break
            else:
                raise KeyError(name)
        return name

    def has(self, name: str) -> bool:
        """Tell whether a variable (or alias) exists."""
        try:
            self.resolve(name)
        except KeyError:
            return False
        return True

    def scalar(self, name: str) -> int | float | None:
        """Return a scalar variable's value, or None when it is absent."""
        if not self.has(name):
            return None
        value = self.variables[self.resolve(name)]
        if value.size != 1:
            raise ModelConversionError(f"{name!r} should be a scalar, got shape {value.shape}")
        return value.reshape(()).item()

    def tensor(self, name: str) -> np.ndarray:
        """Return a weight as floating point, dequantizing int8/int16 with their scales."""
        try:
            stored = self.resolve(name)
        except KeyError:
            raise ModelConversionError(f"model.bin has no variable {name!r}") from None
        value = self.variables[stored]
        if value.dtype == _NUMPY_DTYPES["bfloat16"]:
            return (value.astype(np.uint32) << 16).view(np.float32)
        if value.dtype.kind == "f":
            return value
        return self._dequantize(name, value)

    def _dequantize(self, name: str, value: np.ndarray) -> np.ndarray:
        """Undo CTranslate2's symmetric int8 (per-row scale) or int16 (global) quantization."""
        if self.has(name + "_zero"):
            raise ModelConversionError(
                f"{name!r} uses AWQ/GPTQ zero points, which this converter does not support"
            )
        if not self.has(name + "_scale"):
            raise ModelConversionError(f"{name!r} is {value.dtype} but has no {name}_scale")
        scale = self.variables[self.resolve(name + "_scale")].astype(np.float32)
        if value.dtype == np.int8 and scale.size == value.shape[0]:
            scale = scale.reshape((-1,) + (1,) * (value.ndim - 1))
        elif scale.size != 1:
            raise ModelConversionError(
                f"{name!r}: scale of shape {scale.shape} does not fit weight {value.shape}"
            )
        return value.astype(np.float32) / scale


def _read_exact(fh: BinaryIO, size: int, what: str) -> bytes:
    """Read exactly ``size`` bytes or fail with a message naming the truncated field."""
    data = fh.read(size)
    if len(data) != size:
        raise ModelConversionError(
            f"model.bin is truncated while reading {what} ({len(data)} of {size} bytes)"
        )
    return data


def _read_u(fh: BinaryIO, fmt: str, what: str) -> int:
    """Read one little-endian unsigned integer of struct format ``fmt``."""
    return struct.unpack("<" + fmt, _read_exact(fh, struct.calcsize(fmt), what))[0]


def _read_str(fh: BinaryIO, what: str) -> str:
    """Read a CTranslate2 string: u16 length (including the NUL), bytes, NUL."""
    length = _read_u(fh, "H", what)
    if length == 0:
        raise ModelConversionError(f"model.bin has an invalid empty string for {what}")
    raw = _read_exact(fh, length, what)
    if raw[-1:] != b"\0":
        raise ModelConversionError(f"model.bin string for {what} is not NUL-terminated")
    try:
        return raw[:-1].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelConversionError(f"model.bin string for {what} is not UTF-8") from exc


def read_ct2_model(model_bin: Path) -> CT2Model:
    """Parse a CTranslate2 ``model.bin`` into numpy arrays, validating its framing."""
    model_bin = Path(model_bin)
    try:
        fh = model_bin.open("rb")
    except OSError as exc:
        raise ModelConversionError(f"cannot open CTranslate2 model {model_bin}: {exc}") from exc
    with fh:
        version = _read_u(fh, "I", "binary version")
        if not _MIN_BINARY_VERSION <= version <= _MAX_BINARY_VERSION:
            raise ModelConversionError(
                f"{model_bin}: unsupported CTranslate2 binary version {version} "
                f"(supported: {_MIN_BINARY_VERSION}..{_MAX_BINARY_VERSION}); not a model.bin?"
            )
        spec = _read_str(fh, "spec name")
        revision = _read_u(fh, "I", "spec revision")
        count = _read_u(fh, "I", "variable count")
        variables: dict[str, np.ndarray] = {}
        for index in range(count):
            name = _read_str(fh, f"name of variable #{index}")
            rank = _read_u(fh, "B", f"rank of {name}")
            if rank > _MAX_RANK:
                raise ModelConversionError(f"{model_bin}: {name!r} has implausible rank {rank}")
            shape = tuple(_read_u(fh, "I", f"shape of {name}") for _ in range(rank))
            dtype_id = _read_u(fh, "B", f"dtype of {name}")
            if dtype_id not in _DTYPES:
                raise ModelConversionError(f"{model_bin}: {name!r} has unknown dtype id {dtype_id}")
            dtype = _NUMPY_DTYPES[_DTYPES[dtype_id]]
            num_bytes = _read_u(fh, "I", f"size of {name}")
            expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if num_bytes != expected:
                raise ModelConversionError(
                    f"{model_bin}: {name!r} declares {num_bytes} bytes, "
                    f"shape {shape} x {dtype} needs {expected}"
                )
            data = _read_exact(fh, num_bytes, f"data of {name}")
            variables[name] = np.frombuffer(data, dtype=dtype).reshape(shape)
        aliases: dict[str, str] = {}
        if version >= 3:
            for index in range(_read_u(fh, "I", "alias count")):
                alias = _read_str(fh, f"alias #{index}")
                aliases[alias] = _read_str(fh, f"target of alias {alias}")
        if fh.read(1):
            logger.warning("%s has trailing bytes after the alias table; ignoring them", model_bin)
    return CT2Model(spec, revision, version, variables, aliases)


def _count_layers(model: CT2Model, prefix: str) -> int:
    """Count ``<prefix>/layer_<i>/...`` blocks, checking they are numbered 0..n-1."""
    indices = {
        int(name[len(prefix) + 7 :].split("/", 1)[0])
        for name in model.variables
        if name.startswith(prefix + "/layer_")
        and name[len(prefix) + 7 :].split("/", 1)[0].isdigit()
    }
    if not indices or indices != set(range(len(indices))):
        raise ModelConversionError(
            f"model.bin has no contiguous {prefix} layers: {sorted(indices)}"
        )
    return len(indices)


def _num_heads(model: CT2Model, prefix: str, n_state: int) -> int:
    """Read the head count CTranslate2 stores, or fall back to Whisper's 64-dim heads."""
    value = model.scalar(prefix + "/num_heads")
    if value is None:
        logger.warning(
            "%s/num_heads missing in model.bin; assuming %d-dim heads", prefix, _WHISPER_HEAD_DIM
        )
        value = n_state // _WHISPER_HEAD_DIM
    heads = int(value)
    if heads <= 0 or n_state % heads:
        raise ModelConversionError(f"{prefix}: {heads} heads do not divide width {n_state}")
    return heads


class _StateDictBuilder:
    """Collect openai-whisper tensors while recording which CTranslate2 variables were used."""

    def __init__(self, model: CT2Model) -> None:
        self.model = model
        self.state: dict[str, np.ndarray] = {}
        self.used: set[str] = set()

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Fetch a CT2 tensor (dequantized), checking its shape when one is expected."""
        value = self.model.tensor(name)
        self.used.add(self.model.resolve(name))
        for suffix in ("_scale", "_zero"):
            if self.model.has(name + suffix):
                self.used.add(self.model.resolve(name + suffix))
        if shape is not None and tuple(value.shape) != shape:
            raise ModelConversionError(f"{name!r} has shape {value.shape}, expected {shape}")
        return value

    def put(self, name: str, value: np.ndarray) -> None:
        """Store a tensor under its openai-whisper name."""
        self.state[name] = np.ascontiguousarray(value)

    def layer_norm(self, dst: str, src: str, width: int) -> None:
        """Map a CT2 LayerNorm (gamma/beta) onto torch's weight/bias."""
        self.put(f"{dst}.weight", self.get(f"{src}/gamma", (width,)))
        self.put(f"{dst}.bias", self.get(f"{src}/beta", (width,)))

    def linear(self, dst: str, src: str, out_dim: int, in_dim: int) -> None:
        """Map a CT2 Linear; both use [out, in] weights so no transpose is needed."""
        self.put(f"{dst}.weight", self.get(f"{src}/weight", (out_dim, in_dim)))
        self.put(f"{dst}.bias", self.get(f"{src}/bias", (out_dim,)))

    def split_linear(self, dst: str, names: tuple[str, ...], src: str, width: int) -> None:
        """Split a fused projection (rows stacked in ``names`` order) into separate ones."""
        weight = self.get(f"{src}/weight", (width * len(names), width))
        bias = self.get(f"{src}/bias", (width * len(names),))
        for index, part in enumerate(names):
            rows = slice(index * width, (index + 1) * width)
            self.put(f"{dst}.{part}.weight", weight[rows])
            if part == "key":
                # openai-whisper's key projection has no bias. A key bias only adds a
                # per-query constant to the attention logits, which softmax cancels, so
                # dropping it is exact; CT2 normally stores zeros there anyway.
                peak = float(np.max(np.abs(bias[rows].astype(np.float32))))
                if peak:
                    logger.info(
                        "%s: dropping non-zero key bias (max %.3g); softmax-invariant", src, peak
                    )
                continue
            self.put(f"{dst}.{part}.bias", bias[rows])

    def attention(self, dst: str, src: str, width: int, *, cross: bool) -> None:
        """Map a CT2 MultiHeadAttention (fused qkv, or q + fused kv for cross-attention)."""
        if cross:
            self.linear(f"{dst}.query", f"{src}/linear_0", width, width)
            self.split_linear(dst, ("key", "value"), f"{src}/linear_1", width)
            self.linear(f"{dst}.out", f"{src}/linear_2", width, width)
        else:
            self.split_linear(dst, ("query", "key", "value"), f"{src}/linear_0", width)
            self.linear(f"{dst}.out", f"{src}/linear_1", width, width)
        if self.model.has(f"{src}/queries_scale"):
            raise ModelConversionError(f"{src} has queries_scale, which openai-whisper lacks")

    def mlp(self, dst: str, src: str, width: int) -> None:
        """Map the CT2 feed-forward block (linear_0, GELU, linear_1) onto mlp.0 / mlp.2."""
        self.layer_norm(f"{dst}.mlp_ln", f"{src}/layer_norm", width)
        hidden = self.get(f"{src}/linear_0/weight").shape[0]
        self.linear(f"{dst}.mlp.0", f"{src}/linear_0", hidden, width)
        self.linear(f"{dst}.mlp.2", f"{src}/linear_1", width, hidden)


def _check_architecture(model: CT2Model) -> None:
    """Reject CT2 models whose flags describe something openai-whisper cannot express."""
    if model.spec != "WhisperSpec":
        raise ModelConversionError(f"model.bin holds a {model.spec!r}, not a Whisper model")
    for name, expected in _EXPECTED_SCALARS.items():
        value = model.scalar(name)
        if value is not None and int(value) != expected:
            raise ModelConversionError(f"unsupported layout: {name}={value}, expected {expected}")


def _build_state_dict(model: CT2Model) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Map every CT2 Whisper variable to openai-whisper's names; return (dims, state dict)."""
    _check_architecture(model)
    b = _StateDictBuilder(model)

    conv1 = b.get("encoder/conv1/weight")
    if conv1.ndim != 3 or conv1.shape[2] != 3:
        raise ModelConversionError(
            f"encoder/conv1/weight has shape {conv1.shape}, expected [d, mels, 3]"
        )
    n_audio_state, n_mels = int(conv1.shape[0]), int(conv1.shape[1])
    enc_pos = b.get("encoder/position_encodings/encodings")
    embed = b.get("decoder/embeddings/weight")
    dec_pos = b.get("decoder/position_encodings/encodings")
    if embed.ndim != 2 or enc_pos.ndim != 2 or dec_pos.ndim != 2:
        raise ModelConversionError("embedding/position tables must be 2-D")
    n_vocab, n_text_state = (int(x) for x in embed.shape)
    dims = {
        "n_mels": n_mels,
        "n_audio_ctx": int(enc_pos.shape[0]),
        "n_audio_state": n_audio_state,
        "n_audio_head": _num_heads(model, "encoder", n_audio_state),
        "n_audio_layer": _count_layers(model, "encoder"),
        "n_vocab": n_vocab,
        "n_text_ctx": int(dec_pos.shape[0]),
        "n_text_state": n_text_state,
        "n_text_head": _num_heads(model, "decoder", n_text_state),
        "n_text_layer": _count_layers(model, "decoder"),
    }

    b.put("encoder.conv1.weight", conv1)
    b.put("encoder.conv1.bias", b.get("encoder/conv1/bias", (n_audio_state,)))
    b.put("encoder.conv2.weight", b.get("encoder/conv2/weight", (n_audio_state, n_audio_state, 3)))
    b.put("encoder.conv2.bias", b.get("encoder/conv2/bias", (n_audio_state,)))
    if enc_pos.shape[1] != n_audio_state:
        raise ModelConversionError(f"encoder positions have width {enc_pos.shape[1]}")
    b.put("encoder.positional_embedding", enc_pos)
    for i in range(dims["n_audio_layer"]):
        dst, src = f"encoder.blocks.{i}", f"encoder/layer_{i}"
        b.layer_norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm", n_audio_state)
        b.attention(f"{dst}.attn", f"{src}/self_attention", n_audio_state, cross=False)
        b.mlp(dst, f"{src}/ffn", n_audio_state)
    b.layer_norm("encoder.ln_post", "encoder/layer_norm", n_audio_state)

    b.put("decoder.token_embedding.weight", embed)
    if dec_pos.shape[1] != n_text_state:
        raise ModelConversionError(f"decoder positions have width {dec_pos.shape[1]}")
    b.put("decoder.positional_embedding", dec_pos)
    for i in range(dims["n_text_layer"]):
        dst, src = f"decoder.blocks.{i}", f"decoder/layer_{i}"
        b.layer_norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm", n_text_state)
        b.attention(f"{dst}.attn", f"{src}/self_attention", n_text_state, cross=False)
        b.layer_norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm", n_text_state)
        b.attention(f"{dst}.cross_attn", f"{src}/attention", n_text_state, cross=True)
        b.mlp(dst, f"{src}/ffn", n_text_state)
    b.layer_norm("decoder.ln", "decoder/layer_norm", n_text_state)

    # openai-whisper ties the output projection to the token embedding.
    if model.has("decoder/projection/weight"):
        projection = b.get("decoder/projection/weight", tuple(embed.shape))
        if not np.array_equal(projection, embed):
            raise ModelConversionError(
                "decoder/projection differs from the token embedding (untied)"
            )
    if model.has("decoder/projection/bias"):
        bias = b.get("decoder/projection/bias")
        if np.any(bias):
            raise ModelConversionError("decoder/projection has a bias, which openai-whisper lacks")

    leftovers = sorted(
        name
        for name, value in model.variables.items()
        if name not in b.used and value.size > 1 and name not in _IGNORED_SCALARS
    )
    if leftovers:
        raise ModelConversionError(f"unknown layout: unmapped CT2 variables {leftovers[:5]}")
    unknown_scalars = sorted(
        name
        for name, value in model.variables.items()
        if value.size <= 1 and name not in _EXPECTED_SCALARS and name not in _IGNORED_SCALARS
    )
    if unknown_scalars:
        logger.warning("ignoring CT2 flags not known to this converter: %s", unknown_scalars)
    return dims, b.state


def _alignment_heads(ct2_dir: Path, dims: dict[str, Any]) -> bytes | None:
    """Encode config.json's cross-attention alignment heads the way whisper expects them.

    The result is the base85(gzip(bool[n_text_layer, n_text_head])) format of
    ``whisper._ALIGNMENT_HEADS`` that ``Whisper.set_alignment_heads`` accepts.
    """
    config_path = ct2_dir / "config.json"
    if not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConversionError(f"cannot read {config_path}: {exc}") from exc
    heads = config.get("alignment_heads") if isinstance(config, dict) else None
    if not heads:
        return None
    mask = np.zeros((dims["n_text_layer"], dims["n_text_head"]), dtype=bool)
    try:
        for layer, head in heads:
            mask[int(layer), int(head)] = True
    except (TypeError, ValueError, IndexError) as exc:
        raise ModelConversionError(f"{config_path}: bad alignment_heads {heads!r}") from exc
    return base64.b85encode(gzip.compress(mask.tobytes(), mtime=0))


@contextlib.contextmanager
def _atomic_output(out_path: Path) -> Iterator[BinaryIO]:
    """Yield a temp file next to ``out_path`` and ``os.replace`` it in place on success."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    try:
        os.chmod(tmp_name, 0o644)  # mkstemp's 0600 would hide the cache from other readers.
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, out_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def convert_ct2_to_openai(ct2_dir: Path, out_path: Path) -> Path:
    """Write an openai-whisper checkpoint for the CTranslate2 Whisper model in ``ct2_dir``.

    The file holds ``dims`` and ``model_state_dict`` (what ``whisper.load_model``
    reads) plus ``alignment_heads`` (config.json's heads, for ``load_openai_model``)
    and ``ct2_source`` provenance; it is written atomically.
    """
    ct2_dir, out_path = Path(ct2_dir), Path(out_path)
    started = time.perf_counter()
    model = read_ct2_model(ct2_dir / "model.bin")
    dims, state = _build_state_dict(model)
    heads = _alignment_heads(ct2_dir, dims)

    import torch  # Only now: parsing errors should not require the optional torch install.

    checkpoint: dict[str, Any] = {
        "dims": dims,
        "model_state_dict": {name: torch.from_numpy(value.copy()) for name, value in state.items()},
        "ct2_source": {
            "spec": model.spec,
            "revision": model.revision,
            "binary_version": model.binary_version,
            "converter_version": CONVERTER_VERSION,
        },
    }
    if heads is not None:
        checkpoint["alignment_heads"] = heads
    with _atomic_output(out_path) as fh:
        torch.save(checkpoint, fh)
    logger.info(
        "converted %s -> %s (%d tensors, dims %s) in %.2fs",
        ct2_dir,
        out_path,
        len(state),
        dims,
        time.perf_counter() - started,
    )
    return out_path


def _cache_key(ct2_dir: Path) -> str:
    """Fingerprint the model directory cheaply (path, size and mtime of its files)."""
    model_bin = ct2_dir / "model.bin"
    try:
        stat = model_bin.stat()
    except OSError as exc:
        raise ModelConversionError(f"cannot read CTranslate2 model {model_bin}: {exc}") from exc
    parts = [f"v{CONVERTER_VERSION}", str(ct2_dir.resolve()), f"{stat.st_size}:{stat.st_mtime_ns}"]
    config = ct2_dir / "config.json"
    if config.is_file():
        config_stat = config.stat()
        parts.append(f"{config_stat.st_size}:{config_stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an advisory inter-process lock so concurrent workers convert only once."""
    try:
        import fcntl
    except ImportError:  # Non-POSIX: the atomic replace alone keeps readers safe.
        yield
        return
    with lock_path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def cached_openai_checkpoint(ct2_dir: Path, cache_dir: Path) -> Path:
    """Return a checkpoint path in cache_dir, converting once.

    The file name is keyed on model.bin's path, size and mtime, so a changed model
    re-converts; the file is written atomically (temp file + os.replace) under a lock,
    so two gunicorn workers starting together never read a half-written file.
    """
    ct2_dir, cache_dir = Path(ct2_dir), Path(cache_dir)
    target = cache_dir / f"whisper-ct2-{_cache_key(ct2_dir)}.pt"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(cache_dir / f".{target.name}.lock"):
        if target.is_file():  # Another worker finished while we waited.
            return target
        return convert_ct2_to_openai(ct2_dir, target)


def load_openai_model(checkpoint: Path, device: str = "cpu") -> Any:
    """Load a converted checkpoint like ``whisper.load_model`` and apply its alignment heads.

    ``alignment_heads`` is a non-persistent buffer in openai-whisper, so
    ``whisper.load_model(path)`` alone falls back to "all heads of the upper half";
    restoring the model's real heads keeps word timestamps as accurate as upstream.
    """
    import torch
    from whisper.model import ModelDimensions, Whisper

    try:
        stored = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
        model = Whisper(ModelDimensions(**stored["dims"]))
        model.load_state_dict(stored["model_state_dict"])
    except (OSError, KeyError, TypeError, RuntimeError) as exc:
        raise ModelConversionError(f"cannot load converted checkpoint {checkpoint}: {exc}") from exc
    heads = stored.get("alignment_heads")
    if heads is not None:
        model.set_alignment_heads(heads)
    return model.to(device)
