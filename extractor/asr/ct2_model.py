"""Reading a CTranslate2 ``model.bin`` into numpy arrays (numpy only, no CTranslate2).

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

import dataclasses
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

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
#: CTranslate2's id of each type name, for writing a model.bin.
DTYPE_IDS: dict[str, int] = {name: id_ for id_, name in _DTYPES.items()}
_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "int8": np.dtype("i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),  # raw bits; widened to float32 on use.
}


class Variable(NamedTuple):
    """One stored variable: its name, its values and CTranslate2's name of their type."""

    name: str
    value: np.ndarray
    dtype: str  # a value of _DTYPES ("bfloat16" values are raw uint16 bits)


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


@dataclasses.dataclass(frozen=True)
class CT2Header:
    """What precedes a ``model.bin``'s variables."""

    binary_version: int
    spec: str
    revision: int
    count: int  # variables that follow


def read_header(fh: BinaryIO, model_bin: Path) -> CT2Header:
    """Read and check the header of ``model_bin`` (open as ``fh``), up to its variables."""
    version = _read_u(fh, "I", "binary version")
    if not _MIN_BINARY_VERSION <= version <= _MAX_BINARY_VERSION:
        raise ModelConversionError(
            f"{model_bin}: unsupported CTranslate2 binary version {version} "
            f"(supported: {_MIN_BINARY_VERSION}..{_MAX_BINARY_VERSION}); not a model.bin?"
        )
    spec = _read_str(fh, "spec name")
    revision = _read_u(fh, "I", "spec revision")
    return CT2Header(version, spec, revision, _read_u(fh, "I", "variable count"))


def read_variables(fh: BinaryIO, header: CT2Header, model_bin: Path) -> Iterator[Variable]:
    """The variables after ``header``, one at a time (a caller keeping none of them holds one
    variable's bytes at a time, not the whole file)."""
    for index in range(header.count):
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
        yield Variable(name, np.frombuffer(data, dtype=dtype).reshape(shape), _DTYPES[dtype_id])


def variable_span(model_bin: Path, name: str) -> tuple[int, int] | None:
    """Where variable ``name``'s bytes are in ``model_bin`` (offset, size), its headers read
    and every other variable's bytes skipped; None if it has no such variable."""
    with Path(model_bin).open("rb") as fh:
        header = read_header(fh, model_bin)
        for index in range(header.count):
            found = _read_str(fh, f"name of variable #{index}")
            rank = _read_u(fh, "B", f"rank of {found}")
            for _ in range(rank):
                _read_u(fh, "I", f"shape of {found}")
            _read_u(fh, "B", f"dtype of {found}")
            size = _read_u(fh, "I", f"size of {found}")
            if found == name:
                return fh.tell(), size
            fh.seek(size, 1)
    return None


def read_aliases(fh: BinaryIO, header: CT2Header) -> dict[str, str]:
    """The alias table after the variables (binary version 3 and later)."""
    aliases: dict[str, str] = {}
    if header.binary_version >= 3:
        for index in range(_read_u(fh, "I", "alias count")):
            alias = _read_str(fh, f"alias #{index}")
            aliases[alias] = _read_str(fh, f"target of alias {alias}")
    return aliases


def read_ct2_model(model_bin: Path) -> CT2Model:
    """Parse a CTranslate2 ``model.bin`` into numpy arrays, validating its framing."""
    model_bin = Path(model_bin)
    try:
        fh = model_bin.open("rb")
    except OSError as exc:
        raise ModelConversionError(f"cannot open CTranslate2 model {model_bin}: {exc}") from exc
    with fh:
        header = read_header(fh, model_bin)
        variables = {v.name: v.value for v in read_variables(fh, header, model_bin)}
        aliases = read_aliases(fh, header)
        if fh.read(1):
            logger.warning("%s has trailing bytes after the alias table; ignoring them", model_bin)
    return CT2Model(header.spec, header.revision, header.binary_version, variables, aliases)
