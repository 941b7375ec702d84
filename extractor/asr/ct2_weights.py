"""Mapping a CTranslate2 Whisper model's variables onto openai-whisper's parameter names and
dimensions, refusing any layout openai-whisper cannot express."""

from __future__ import annotations

import base64
import gzip
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .ct2_model import CT2Model, ModelConversionError

logger = logging.getLogger(__name__)

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


def build_state_dict(model: CT2Model) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
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


def alignment_heads(ct2_dir: Path, dims: dict[str, Any]) -> bytes | None:
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
