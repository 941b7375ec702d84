"""Convert a CTranslate2 Whisper model directory into an openai-whisper checkpoint.

The default ASR engine ships a CTranslate2 (faster-whisper) model; the optional
openai-whisper engine needs the same weights as a ``.pt`` checkpoint, so the model is read
from CTranslate2's ``model.bin`` directly (``ct2_model.py``, numpy only), mapped onto
openai-whisper's parameter names (``ct2_weights.py``) and written here, once per model into a
cache shared by the workers. Torch is imported lazily so that importing this module costs
nothing for the default engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .ct2_model import ModelConversionError, read_ct2_model
from .ct2_weights import alignment_heads, build_state_dict

logger = logging.getLogger(__name__)

__all__ = [
    "CONVERTER_VERSION",
    "cached_openai_checkpoint",
    "convert_ct2_to_openai",
    "load_openai_model",
]

#: Bump when the produced checkpoint changes, so cached conversions are redone.
CONVERTER_VERSION = 1


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
    dims, state = build_state_dict(model)
    heads = alignment_heads(ct2_dir, dims)

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
def exclusive_lock(lock_path: Path) -> Iterator[None]:
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
    with exclusive_lock(cache_dir / f".{target.name}.lock"):
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
