"""The bundled float16 Whisper model written once as int8, so that a worker loads int8 directly.

CTranslate2 converts a float16 ``model.bin`` to ``compute_type="int8"`` when it loads it: it
reads every variable first (75 MB for tiny.en), then quantizes them one by one, each through a
float32 copy (the 51864 x 384 token embedding: 80 MB). Measured in-process, loading took the
process 174 MB above its size before the load to keep 60 MB: a worker's peak RSS (VmHWM) was
its loading, 280-291 MB against 214-219 MB ready. The same weights quantized here, once per
machine into the model cache, load with a peak of 71 MB above (12 MB of scratch).

The quantization is CTranslate2's own (its converter's rule, ``ctranslate2.specs.model_spec``:
a per-row scale ``127 / max |row|``, values rounded to nearest even), applied to what the loader
quantizes (the 2-D ``weight`` matrices, the token embedding among them); every other float
variable is stored as float32, which the loader would make of it for int8 too. The loaded
model is bit for bit the same: equal encoder output and equal transcripts, words, times and
log-probabilities on several clips (tests/asr/test_ct2_int8.py checks it on every run).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .ct2_convert import exclusive_lock
from .ct2_model import (
    DTYPE_IDS,
    CT2Header,
    ModelConversionError,
    Variable,
    read_aliases,
    read_header,
    read_variables,
)
from .models import model_directory

log = logging.getLogger(__name__)

#: Bump when the written model changes, so cached copies are written again.
QUANTIZER_VERSION = 1
#: Compute types for which the loader quantizes float weights to int8 with float32 elsewhere.
INT8_TYPES = frozenset({"int8", "int8_float32"})
ROWS_AT_ONCE = 4096  # rows quantized per step: a float32 block of 6 MB for tiny's embedding


def loadable_model(model: str, compute_type: str, cache_dir: Path | None) -> str:
    """What to hand CTranslate2 for ``model`` (a name of ``asr.models``, a directory or a hub
    name) at ``compute_type``: for int8 and a local directory, the copy already quantized
    (``int8_model_dir``), whose loading peaks ~100 MB lower than CTranslate2 quantizing a
    float16 model itself."""
    model = model_directory(model, cache_dir)
    local = Path(model)
    if cache_dir is None or compute_type not in INT8_TYPES or not local.is_dir():
        return model  # a hub name is downloaded (and quantized) by faster-whisper
    return str(int8_model_dir(local, cache_dir))


def int8_model_dir(model_dir: Path, cache_dir: Path) -> Path:
    """``model_dir`` with its float weights quantized to int8, written once into ``cache_dir``;
    ``model_dir`` itself if it holds no float weight matrix (already quantized) or the cache
    cannot be written (the loader then quantizes, at its higher peak)."""
    model_bin = model_dir / "model.bin"
    try:
        if not _has_float_weights(model_bin):
            return model_dir
        target = cache_dir / f"whisper-ct2-int8-{_fingerprint(model_bin)}"
        if (target / "model.bin").is_file():
            return target
        cache_dir.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(cache_dir / f".{target.name}.lock"):
            if not (target / "model.bin").is_file():  # another worker may have written it
                _write_int8_copy(model_dir, target)
        return target
    except (OSError, ModelConversionError) as exc:
        log.warning(
            "no int8 copy of the speech model, loading the original",
            extra={"model": str(model_dir), "error": str(exc)},
        )
        return model_dir


def _fingerprint(model_bin: Path) -> str:
    """Which model this is (path, size, mtime) and which quantizer wrote it."""
    stat = model_bin.stat()
    key = f"q{QUANTIZER_VERSION}\n{model_bin.resolve()}\n{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def _has_float_weights(model_bin: Path) -> bool:
    """Whether some weight matrix of ``model_bin`` is stored as floats."""
    with model_bin.open("rb") as fh:
        header = read_header(fh, model_bin)
        return any(_quantized(v) for v in read_variables(fh, header, model_bin))


def _quantized(variable: Variable) -> bool:
    """Whether CTranslate2 quantizes ``variable`` for int8: a float matrix named ``weight``
    (the convolutions' 3-D weights stay float)."""
    return (
        variable.name.endswith("weight")
        and variable.value.ndim == 2
        and variable.dtype in ("float16", "float32", "bfloat16")
    )


def _write_int8_copy(model_dir: Path, target: Path) -> None:
    """Write ``target`` (a model directory) atomically: into a temporary sibling, renamed."""
    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for item in model_dir.iterdir():
            if item.is_file() and item.name != "model.bin":
                shutil.copyfile(item, staging / item.name)
        source_bin = model_dir / "model.bin"
        with source_bin.open("rb") as source, (staging / "model.bin").open("wb") as out:
            _quantize_model(source, out, source_bin)
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info(
        "speech model quantized to int8",
        extra={"model": str(model_dir), "copy": str(target),
               "seconds": round(time.perf_counter() - started, 2)},
    )  # fmt: skip


def _quantize_model(source: BinaryIO, out: BinaryIO, model_bin: Path) -> None:
    """Copy ``source`` to ``out`` variable by variable, weight matrices quantized to int8."""
    header = read_header(source, model_bin)
    written = [
        piece
        for variable in read_variables(source, header, model_bin)
        for piece in _int8_variables(variable)
    ]
    # The count comes first: variables are counted, not held (``written`` holds the int8
    # copies, 40 MB for tiny.en, never the float16 originals).
    out.write(_header_bytes(header, len(written)))
    for name, value in written:
        out.write(_variable_bytes(name, value))
    aliases = read_aliases(source, header)
    out.write(struct.pack("<I", len(aliases)))
    for alias, name in aliases.items():
        out.write(_str_bytes(alias) + _str_bytes(name))


def _int8_variables(variable: Variable) -> Iterator[tuple[str, np.ndarray]]:
    """What ``variable`` becomes: a weight matrix and its ``_scale``, or float32, or itself."""
    name, value = variable.name, variable.value
    if variable.dtype == "bfloat16":
        value = (value.astype(np.uint32) << 16).view(np.float32)
    if _quantized(variable):
        quantized = np.empty(value.shape, np.int8)
        scale = np.empty(value.shape[0], np.float32)
        for row in range(0, value.shape[0], ROWS_AT_ONCE):
            block = value[row : row + ROWS_AT_ONCE].astype(np.float32)
            amax = np.amax(np.absolute(block), axis=1)
            amax[amax == 0] = 127.0
            amax = np.maximum(amax, np.float32(127) / np.finfo(np.float32).max)
            block_scale = (np.float32(127.0) / amax).astype(np.float32)
            block *= block_scale[:, None]
            quantized[row : row + ROWS_AT_ONCE] = np.rint(block)
            scale[row : row + ROWS_AT_ONCE] = block_scale
        yield name, quantized
        yield name + "_scale", scale
    elif value.dtype.kind == "f":
        yield name, value.astype(np.float32)
    else:
        yield name, value


def _header_bytes(header: CT2Header, count: int) -> bytes:
    version = struct.pack("<I", header.binary_version)
    return version + _str_bytes(header.spec) + struct.pack("<II", header.revision, count)


def _variable_bytes(name: str, value: np.ndarray) -> bytes:
    value = np.require(value, requirements="C")  # keeps a scalar's rank 0
    dtype = {np.dtype("float32"): "float32", np.dtype("int8"): "int8", np.dtype("int16"): "int16",
             np.dtype("int32"): "int32", np.dtype("float16"): "float16"}[value.dtype]  # fmt: skip
    shape = struct.pack(f"<B{value.ndim}I", value.ndim, *value.shape)
    return (
        _str_bytes(name) + shape + struct.pack("<BI", DTYPE_IDS[dtype], value.nbytes)
        + value.tobytes()
    )  # fmt: skip


def _str_bytes(text: str) -> bytes:
    """A CTranslate2 string: u16 length with the NUL, UTF-8 bytes, NUL."""
    data = text.encode() + b"\0"
    return struct.pack("<H", len(data)) + data


__all__ = ["INT8_TYPES", "int8_model_dir", "loadable_model"]
